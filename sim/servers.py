"""Parameter-server shards as the simulator runs them.

A shard applies updates one at a time (`apply_s_per_mb` of server time per MB). A synchronous shard
collects one push per worker for each (key, round) and applies their sum once; a pull for that key
and round is answered after the apply. An asynchronous shard applies every push on arrival and
answers pulls at once. A worker's round is its own count of pushes to that key, so rounds need no
global clock.
"""

from __future__ import annotations

from collections import defaultdict

import simpy

from policies.ops import ServerSpec

MB = 1e6


class Shard:
    def __init__(self, env: simpy.Environment, spec: ServerSpec, workers: tuple[int, ...]) -> None:
        self.env, self.spec = env, spec
        self.workers = spec.workers or workers
        self.applied_updates = 0
        self._busy_until = 0.0
        self._pushes: dict[tuple[int, int], int] = defaultdict(int)  # (key, round) -> pushes received
        self._pushed_rounds: dict[tuple[int, int], int] = defaultdict(int)  # (rank, key) -> rounds pushed
        self._pulled_rounds: dict[tuple[int, int], int] = defaultdict(int)  # (rank, key) -> rounds pulled
        self._applied: dict[tuple[int, int], simpy.Event] = {}
        self._answered: dict[tuple[int, int], int] = defaultdict(int)  # (key, round) -> pulls answered

    def received(self, rank: int, key: int, nbytes: float) -> None:
        """A push from `rank` has arrived."""
        rnd = self._pushed_rounds[(rank, key)]
        self._pushed_rounds[(rank, key)] = rnd + 1
        if not self.spec.sync:
            self._apply(nbytes)
            return
        self._pushes[(key, rnd)] += 1
        if self._pushes[(key, rnd)] == len(self.workers):
            del self._pushes[(key, rnd)]
            self._apply(nbytes, self._applied_event(key, rnd))

    def ready(self, rank: int, key: int) -> simpy.Event:
        """When `rank`'s next pull of `key` may be answered."""
        rnd = self._pulled_rounds[(rank, key)]
        self._pulled_rounds[(rank, key)] = rnd + 1
        if not self.spec.sync:
            event = self.env.event()
            event.succeed()
            return event
        event = self._applied_event(key, rnd)
        self._answered[(key, rnd)] += 1
        if self._answered[(key, rnd)] == len(self.workers):  # every worker has its reply: forget the round
            del self._answered[(key, rnd)], self._applied[(key, rnd)]
        return event

    def _applied_event(self, key: int, rnd: int) -> simpy.Event:
        event = self._applied.get((key, rnd))
        if event is None:
            event = self._applied[(key, rnd)] = self.env.event()
        return event

    def _apply(self, nbytes: float, then: simpy.Event | None = None) -> None:
        cost = self.spec.apply_s_per_mb * nbytes / MB
        start = max(self.env.now, self._busy_until)
        self._busy_until = start + cost

        def applied(_ev: object = None) -> None:
            self.applied_updates += 1
            if then is not None:
                then.succeed()

        delay = self._busy_until - self.env.now
        if delay > 0:
            self.env.timeout(delay).callbacks.append(applied)
        else:
            applied()
