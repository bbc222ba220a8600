"""Parameter-server shards as the simulator runs them.

A shard applies updates one at a time (`apply_s_per_mb` of server time per MB). A synchronous shard
collects one push per worker for each (key, round) and applies their sum once; a pull for that key
and round is answered after the apply. An asynchronous shard applies every push on arrival and
answers pulls at once. A worker's round is its own count of pushes to that key, so rounds need no
global clock.

A shard started mid-run (a phase after a switch, policies.phases) holds the checkpoint the workers
restart from: each worker's first pull of a key in the phase reads it at once, and its k-th pull
waits for round k - 1, so a synchronous phase may start at any step.

Staleness (asynchronous shards): when a worker's update to a key is applied, the number of updates
to that key applied since the shard last sent that worker the key's parameters.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, Optional

import simpy

from policies.ops import ServerSpec

MB = 1e6


# Called for every update an asynchronous shard applies: (rank, key, staleness).
OnApply = Callable[[int, int, int], None]


class Shard:
    def __init__(
        self,
        env: simpy.Environment,
        spec: ServerSpec,
        workers: tuple[int, ...],
        on_apply: Optional[OnApply] = None,
        tensors: Any = None,
        restarted: bool = False,
    ) -> None:
        """`tensors` (numerics mode: a `sim.numerics.servers.ServerTensors`) receives the pushed values;
        `restarted`: the shard starts from a checkpoint mid-run (first pulls answered at once)."""
        self.env, self.spec, self.on_apply, self.tensors = env, spec, on_apply, tensors
        self.workers = spec.workers or workers
        self.applied_updates = 0
        self._applied_to: dict[int, int] = defaultdict(int)  # key -> updates applied to it
        self._sent_version: dict[tuple[int, int], int] = defaultdict(int)  # (rank, key) -> version last sent
        self._busy_until = 0.0
        self._pushes: dict[tuple[int, int], int] = defaultdict(int)  # (key, round) -> pushes received
        self._pushed_rounds: dict[tuple[int, int], int] = defaultdict(int)  # (rank, key) -> rounds pushed
        first = -1 if restarted else 0  # the checkpoint counts as round -1
        self._pulled_rounds: dict[tuple[int, int], int] = defaultdict(lambda: first)  # (rank, key) -> next round
        self._applied: dict[tuple[int, int], simpy.Event] = {}
        self._answered: dict[tuple[int, int], int] = defaultdict(int)  # (key, round) -> pulls answered

    def received(self, rank: int, key: int, nbytes: float, update: Any = None) -> None:
        """A push from `rank` has arrived (`update`: its values, in numerics mode)."""
        tensors, shard = self.tensors, self.spec.shard
        if not self.spec.sync:  # applied on arrival: no rounds to count
            if update is None and not self.spec.apply_s_per_mb:  # applied at once, nothing to apply
                self._commit(key, None, rank, None)
                return
            apply = (lambda: tensors.apply_async(update)) if update is not None else None
            self._apply(nbytes, key, None, rank, apply)
            return
        rnd = self._pushed_rounds[(rank, key)]
        self._pushed_rounds[(rank, key)] = rnd + 1
        if update is not None:
            tensors.add(shard, key, rnd, update)
        self._pushes[(key, rnd)] += 1
        if self._pushes[(key, rnd)] == len(self.workers):
            del self._pushes[(key, rnd)]
            apply = (lambda: tensors.apply_round(shard, key, rnd)) if update is not None else None
            self._apply(nbytes, key, self._applied_event(key, rnd), -1, apply)

    def ready(self, rank: int, key: int) -> Optional[simpy.Event]:
        """When `rank`'s next pull of `key` may be answered: an event, or None for at once."""
        if not self.spec.sync:  # asynchronous shards answer at once: no rounds to count
            return None
        rnd = self._pulled_rounds[(rank, key)]
        self._pulled_rounds[(rank, key)] = rnd + 1
        if rnd < 0:
            return None
        event = self._applied_event(key, rnd)
        self._answered[(key, rnd)] += 1
        if self._answered[(key, rnd)] == len(self.workers):  # every worker has its reply: forget the round
            del self._answered[(key, rnd)], self._applied[(key, rnd)]
        return event

    def reply(self, rank: int, key: int) -> None:
        """The shard sends `rank` its current parameters of `key`."""
        self._sent_version[(rank, key)] = self._applied_to[key]

    def _applied_event(self, key: int, rnd: int) -> simpy.Event:
        event = self._applied.get((key, rnd))
        if event is None:
            event = self._applied[(key, rnd)] = self.env.event()
        return event

    def _apply(
        self, nbytes: float, key: int, then: simpy.Event | None, rank: int, update: Optional[Callable[[], None]]
    ) -> None:
        """Apply one update (`rank`'s, or -1 for a round's sum), after any the shard is still busy with
        (one at a time); `then` fires once it is applied."""
        now = self.env.now
        self._busy_until = max(now, self._busy_until) + self.spec.apply_s_per_mb * nbytes / MB
        delay = self._busy_until - now
        if delay > 0:
            self.env.timeout(delay).callbacks.append(lambda _ev: self._commit(key, then, rank, update))
        else:  # free, and applying costs nothing: no event
            self._commit(key, then, rank, update)

    def _commit(self, key: int, then: simpy.Event | None, rank: int, update: Optional[Callable[[], None]]) -> None:
        """The update is applied: record staleness, apply the values (numerics mode), count it."""
        if rank >= 0 and self.on_apply is not None:
            self.on_apply(rank, key, self._applied_to[key] - self._sent_version[(rank, key)])
        if update is not None:
            update()
        self._applied_to[key] += 1
        self.applied_updates += 1
        if then is not None:
            then.succeed()
