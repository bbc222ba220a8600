"""Collectives as network flows, at two fidelities behind one interface.

`stepwise`: a ring collective is S steps; in step s rank i sends one n/p chunk to rank i+1, and may
do so once it has received step s-1's chunk from rank i-1 and delivered its own step s-1 chunk
(2(p-1) steps of p flows for all-reduce, p-1 for reduce-scatter and all-gather).

`pipelined`: the same collective as one transfer of p coupled sub-flows (rank i -> i+1), each
carrying S*n/p bytes at a common rate, delivered S path-latencies after its data: one event pair
per collective instead of S*p flows. Uncontended, both give S*alpha + S*(n/p)/B exactly; under
contention they agree closely (tests compare them), because the stepwise ring also advances at the
pace of its slowest flow.

All-to-all sends n/p from every member to every other member at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import simpy

from policies.ops import AllGather, AllReduce, AllToAll, Barrier, Collective, ReduceScatter
from sim.network import Network
from sim.routing import Path, Router

MODELS = ("pipelined", "stepwise")


def ring_steps(op: Collective, p: int) -> int:
    """Steps of the ring algorithm for `op` over p ranks."""
    if isinstance(op, (AllReduce, Barrier)):
        return 2 * (p - 1)
    if isinstance(op, (ReduceScatter, AllGather)):
        return p - 1
    raise TypeError(f"{type(op).__name__} is not a ring collective")


class CollectiveRunner:
    """Turns a launched collective into flows; `run` returns the event of its completion."""

    def __init__(self, env: simpy.Environment, net: Network, router: Router, rank_nodes: Sequence[str], model: str):
        if model not in MODELS:
            raise ValueError(f"collective model {model!r}; allowed: {', '.join(MODELS)}")
        self.env, self.net, self.router, self.model = env, net, router, model
        self.rank_nodes = rank_nodes

    def run(self, op: Collective) -> simpy.Event:
        ranks = op.group.ranks
        p = len(ranks)
        if p == 1:
            done = self.env.event()
            done.succeed()
            return done
        if isinstance(op, AllToAll):
            return self._all_to_all(ranks, op.nbytes / p)
        steps = ring_steps(op, p)
        paths = [self._path(ranks[i], ranks[(i + 1) % p]) for i in range(p)]
        chunk = op.nbytes / p
        if self.model == "pipelined":
            latency = steps * max(self.net.path_latency(path) for path in paths)
            return self.net.transfer(paths, steps * chunk, latency=latency)
        return _StepwiseRing(self.env, self.net, paths, steps, chunk).done

    def _path(self, a: int, b: int) -> Path:
        return self.router.path(self.rank_nodes[a], self.rank_nodes[b])

    def _all_to_all(self, ranks: Sequence[int], share: float) -> simpy.Event:
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        paths = [self._path(a, b) for a, b in pairs]
        if self.model == "pipelined":
            return self.net.transfer(paths, share)
        return self.env.all_of([self.net.transfer([path], share) for path in paths])


class _StepwiseRing:
    """Flow-by-flow ring: flow (i, s) waits for (i-1, s-1) and (i, s-1) to be delivered."""

    def __init__(self, env: simpy.Environment, net: Network, paths: list[Path], steps: int, chunk: float):
        self.net, self.paths, self.steps, self.chunk = net, paths, steps, chunk
        self.p = len(paths)
        self.delivered = [[False] * steps for _ in range(self.p)]
        self.last_step_left = self.p
        self.done = env.event()
        for i in range(self.p):
            self._start(i, 0)

    def _start(self, i: int, s: int) -> None:
        event = self.net.transfer([self.paths[i]], self.chunk)
        event.callbacks.append(self._on_delivered(i, s))

    def _on_delivered(self, i: int, s: int) -> Callable[[simpy.Event], None]:
        def callback(_event: simpy.Event) -> None:
            self.delivered[i][s] = True
            if s + 1 == self.steps:
                self.last_step_left -= 1
                if self.last_step_left == 0:
                    self.done.succeed()
                return
            # (i, s) is the last prerequisite of (i, s+1) and of (i+1, s+1) to be delivered, if the
            # other prerequisite of each is already in; so each flow is started exactly once.
            if self.delivered[(i - 1) % self.p][s]:
                self._start(i, s + 1)
            nxt = (i + 1) % self.p
            if self.delivered[nxt][s]:
                self._start(nxt, s + 1)

        return callback
