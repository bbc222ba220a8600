"""Link utilisation over time: bytes carried per network link, sampled on a regular grid.

The grid starts fine (`utilization_interval_ms`) and coarsens as the run goes: whenever more than
`utilization_samples` samples are held, every other one is dropped and the interval doubles, so a
run of any length ends with between half and all of that many evenly spaced samples. Utilisation
is relative to each link's nominal capacity, so a link slowed by a straggler shows the drop.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from sim.network.flows import Network

MAX_VALUES = 2_000_000  # samples x links kept in memory at most


class LinkSampler:
    def __init__(
        self,
        env: simpy.Environment,
        net: Network,
        links: np.ndarray,
        interval_s: float,
        max_samples: int,
        check_stall: Callable[[], None],
    ) -> None:
        self.env, self.net, self.links = env, net, links
        self.nominal = net.capacity[links].copy()
        self.interval = interval_s
        self.max_samples = max(4, min(max_samples, MAX_VALUES // max(1, len(links))))
        self.check_stall = check_stall
        self.times: list[float] = []
        self.carried: list[np.ndarray] = []

    def process(self, done: simpy.Event) -> Generator[Any, Any, None]:
        self._sample()
        while not done.triggered:
            yield self.env.timeout(self.times[-1] + self.interval - self.env.now)
            self.check_stall()
            self._sample()
            if len(self.times) > self.max_samples:
                self.times, self.carried = self.times[::2], self.carried[::2]
                self.interval *= 2

    def finish(self) -> None:
        """Close the last (partial) interval at the end of the run."""
        if self.times and self.env.now > self.times[-1]:
            self._sample()

    def _sample(self) -> None:
        self.times.append(self.env.now)
        self.carried.append(self.net.carried_bytes()[self.links])

    def utilization(self) -> tuple[np.ndarray, np.ndarray]:
        """(interval end times, utilisation per interval and link) — shape (intervals, links)."""
        if len(self.times) < 2:
            return np.zeros(0), np.zeros((0, len(self.links)))
        times, carried = np.array(self.times), np.array(self.carried)
        rate = np.diff(carried, axis=0) / np.diff(times)[:, None]
        return times[1:], rate / self.nominal[None, :]
