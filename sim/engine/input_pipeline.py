"""A host's input pipeline: the data loaders that read, decode and augment samples on the host's CPUs
for all of its GPUs (`workload.input_samples_s`).

Every host prepares batches at its own rate, in turn for whichever of its workers asks, keeping up to
`input_prefetch_batches` per GPU ready ahead. A worker's iteration starts once its batch is ready, so
when the host's GPUs together consume samples faster than its CPUs prepare them, the iterations wait
for data (counted as `wait_s`) and the host's throughput is its input rate. This is why image models
whose GPUs got faster (mixed precision, newer GPUs) stop scaling on a host whose CPUs did not: the
loaders start with the run (nothing prepared before iteration 0).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy


class HostInput:
    """One host's loaders: `batch` samples every `batch / samples_s` seconds, at most `depth` batches
    ahead of the workers that take them."""

    def __init__(self, env: simpy.Environment, samples_s: float, batch: int, depth: int) -> None:
        self.env, self.batch, self.period = env, batch, batch / samples_s
        self.ready = simpy.Container(env, capacity=depth * batch, init=0)
        self.preparing = False  # a batch is being prepared (not waiting for room in the queue)
        env.process(self._prepare())

    def take(self) -> simpy.Event:
        """The event of one batch being handed to a worker (in the order workers asked)."""
        return self.ready.get(self.batch)

    def _prepare(self) -> Generator[simpy.Event, Any, None]:
        # blocks on a full queue once the workers stop taking: the run then ends with nothing scheduled
        while True:
            self.preparing = True
            yield self.env.timeout(self.period)
            self.preparing = False
            yield self.ready.put(self.batch)


def preparing(inputs: list[HostInput] | None) -> bool:
    """Whether some host is preparing a batch: progress, for the stall detector (a slow loader is
    not a deadlock)."""
    return inputs is not None and any(host.preparing for host in inputs)


def host_inputs(
    env: simpy.Environment,
    rank_hosts: tuple[str, ...],
    samples_s: float | None,
    batch: int,
    prefetch_batches: int,
) -> list[HostInput] | None:
    """Per rank, its host's input pipeline (None: unlimited input, iterations never wait for data)."""
    if samples_s is None:
        return None
    gpus: dict[str, int] = {}
    for host in rank_hosts:
        gpus[host] = gpus.get(host, 0) + 1
    hosts = {h: HostInput(env, samples_s, batch, prefetch_batches * n) for h, n in gpus.items()}
    return [hosts[h] for h in rank_hosts]
