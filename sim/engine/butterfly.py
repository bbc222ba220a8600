"""The butterfly all-reduce (`AllReduce(algorithm="butterfly")`, policies/ops.py) as network flows.

Member j owns the j-th 1/p of the tensor. Scatter: every member sends each other member that member's part
(n/p bytes), all at once. Gather: each owner, once it holds every member's copy of its part, sends the
reduced part back to every other member, all at once. Per member that is 2(p - 1) n/p bytes out and as many
in, as in the ring, but over p - 1 connections at a time and in two latency rounds.

`pipelined`: each phase is one coupled transfer of p(p - 1) sub-flows, the gather starting when the whole
scatter is delivered. `stepwise`: one flow per ordered pair, and owner j's gather starts as soon as the p - 1
flows into j are delivered, as hivemind's owners reply once their part is reduced. Uncontended, on paths of
equal latency both take 2 (alpha + (n/p) / B) where B is the bandwidth a pair's flow gets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Optional

import simpy
from simpy.events import Event

from sim.cluster.routing import Path
from sim.network.flows import Network


class Mesh(NamedTuple):
    """A group's paths between every two members: `rows[i][j]` from member i to member j (`rows[i][i]`
    unused), and the ordered pairs' paths in one tuple (kept, so the network recognises the transfer's class)."""

    rows: tuple[tuple[Path, ...], ...]
    pairs: tuple[Path, ...]

    @classmethod
    def of(cls, rows: Sequence[Sequence[Path]]) -> Mesh:
        rows = tuple(tuple(row) for row in rows)
        return cls(rows, tuple(path for i, row in enumerate(rows) for j, path in enumerate(row) if i != j))


def butterfly(
    env: simpy.Environment, net: Network, mesh: Mesh, share: float, model: str, done: Optional[simpy.Event] = None
) -> simpy.Event:
    """Run a butterfly all-reduce over `mesh`, each part `share` bytes; returns its completion event (`done`,
    when given)."""
    if done is None:
        done = Event(env)
    if model == "pipelined":
        net.transfer(mesh.pairs, share).callbacks.append(lambda _e: _gather_all(net, mesh.pairs, share, done))
        return done
    _StepwiseButterfly(net, mesh.rows, share, done)
    return done


def _gather_all(net: Network, pairs: tuple[Path, ...], share: float, done: simpy.Event) -> None:
    net.transfer(pairs, share, done=done)  # every owner's replies, over the same pairs (each in both roles)


class _StepwiseButterfly:
    """One flow per ordered pair; owner j replies to everyone once the p - 1 flows into j are delivered."""

    def __init__(self, net: Network, paths: Sequence[Sequence[Path]], share: float, done: simpy.Event) -> None:
        self.net, self.paths, self.share, self.done = net, paths, share, done
        p = len(paths)
        self.missing = [p - 1] * p  # per owner, scatter flows not yet delivered
        self.replies_left = p * (p - 1)
        for i in range(p):
            for j in range(p):
                if i != j:
                    net.transfer([paths[i][j]], share).callbacks.append(self._scattered(j))

    def _scattered(self, owner: int) -> Callable[[simpy.Event], None]:
        def callback(_event: simpy.Event) -> None:
            self.missing[owner] -= 1
            if self.missing[owner] == 0:  # the owner holds every copy of its part: reduce and reply
                for k, path in enumerate(self.paths[owner]):
                    if k != owner:
                        self.net.transfer([path], self.share).callbacks.append(self._gathered)

        return callback

    def _gathered(self, _event: simpy.Event) -> None:
        self.replies_left -= 1
        if self.replies_left == 0:
            self.done.succeed()
