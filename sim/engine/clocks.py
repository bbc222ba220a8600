"""Worker clocks (iterations finished) and waits on the slowest one, for SSP-style bounds."""

from __future__ import annotations

import heapq
from collections import Counter

import simpy

RETIRED = 2**62  # the clock of a worker that has stopped


class ClockBoard:
    def __init__(self, env: simpy.Environment, workers: int, start: int = 0) -> None:
        """`start`: the iterations every worker had finished before (a phase starting mid-run)."""
        self.env = env
        self.clock = [start] * workers
        self._at = Counter({start: workers})  # clock value -> workers at it
        self.slowest = start
        self._waiters: list[tuple[int, int, simpy.Event]] = []
        self._seq = 0

    def tick(self, rank: int) -> None:
        """`rank` finished an iteration."""
        self._move(rank, self.clock[rank] + 1)

    def retire(self, rank: int) -> None:
        """`rank` will run no more iterations: it no longer holds anyone back."""
        self._move(rank, RETIRED)

    def _move(self, rank: int, clock: int) -> None:
        old = self.clock[rank]
        self.clock[rank] = clock
        self._at[old] -= 1
        self._at[clock] += 1
        while self._at[self.slowest] == 0:
            del self._at[self.slowest]
            self.slowest = min(self._at) if self._at else RETIRED
        while self._waiters and self._waiters[0][0] <= self.slowest:
            heapq.heappop(self._waiters)[2].succeed()

    def wait(self, min_clock: int) -> simpy.Event:
        """Fires once every worker has finished at least `min_clock` iterations."""
        event = self.env.event()
        if min_clock <= self.slowest:
            event.succeed()
        else:
            self._seq += 1
            heapq.heappush(self._waiters, (min_clock, self._seq, event))
        return event
