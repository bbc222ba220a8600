"""How long each worker computes: the nominal plan, seeded jitter, slow workers and compute stragglers.

Jitter is one lognormal factor (mean 1, the configured coefficient of variation) per worker and
iteration, drawn from that worker's own seeded stream. Worker r's k-th iteration therefore gets
the same factor under every policy, however many iterations other workers run (ASP lets fast
workers run more).
"""

from __future__ import annotations

import numpy as np

from sim.config import Config

BLOCK = 256  # jitter factors drawn per refill


class ComputeModel:
    def __init__(self, config: Config, world: int) -> None:
        self.cv = config.workload.compute_jitter
        self.seed = config.seed
        self.static = np.ones(world)
        for slow in config.faults.slow_workers:
            for rank in slow.ranks:
                if rank >= world:
                    raise ValueError(f"faults.slow_workers: rank {rank} does not exist (world size {world})")
                self.static[rank] *= slow.compute_factor
        self.transient = np.ones(world)  # product of the compute stragglers in force, per rank
        # no compute straggler configured: a segment's length never depends on when it starts
        self.steady = all(spec.compute_factor is None for spec in config.faults.stragglers)
        self._stragglers: dict[int, list[float]] = {}
        self._streams: dict[int, tuple[np.random.Generator, list[float]]] = {}

    def iteration_factor(self, rank: int) -> float:
        """Jitter times static slowness for `rank`'s next iteration (call once per iteration)."""
        return self._next_jitter(rank) * float(self.static[rank])

    def segment(self, rank: int, nominal_s: float, iteration_factor: float) -> float:
        """Duration of a compute segment that starts now (a straggler in force stretches it)."""
        return nominal_s * iteration_factor * float(self.transient[rank])

    def straggle(self, ranks: list[int], factor: float, on: bool) -> None:
        """Start (or end) a compute straggler on `ranks`; segments starting from now are stretched."""
        for rank in ranks:
            active = self._stragglers.setdefault(rank, [])
            if on:
                active.append(factor)
            else:
                active.remove(factor)
            self.transient[rank] = float(np.prod(active)) if active else 1.0

    def _next_jitter(self, rank: int) -> float:
        if self.cv == 0:
            return 1.0
        stream = self._streams.get(rank)
        if stream is None:
            rng = np.random.default_rng(np.random.SeedSequence([self.seed, rank]))
            stream = self._streams[rank] = (rng, [])
        rng, buffer = stream
        if not buffer:
            buffer.extend(reversed(lognormal_factors(self.cv, BLOCK, rng).tolist()))
        return buffer.pop()


def lognormal_factors(cv: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Positive multiplicative factors with mean 1 and coefficient of variation `cv`."""
    sigma2 = np.log1p(cv * cv)
    return rng.lognormal(mean=-sigma2 / 2, sigma=np.sqrt(sigma2), size=n)
