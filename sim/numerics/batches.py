"""Which samples each worker trains on: a fixed shard per worker, reshuffled every epoch."""

from __future__ import annotations

import numpy as np

from sim.errors import ConfigError


class ShardSampler:
    """Worker `rank`'s batches: its 1/world share of the training set (the same split on every backend),
    read in an order its own seeded stream reshuffles at each epoch; a short last batch is dropped."""

    def __init__(self, n_train: int, world: int, rank: int, batch: int, seed: int) -> None:
        per_worker = n_train // world
        if batch > per_worker:
            raise ConfigError(
                f"numerics.global_batch: a worker's batch of {batch} exceeds its shard of {per_worker} "
                f"training samples ({n_train} over {world} workers); lower global_batch"
            )
        split = np.random.default_rng([seed, 0xDA7A]).permutation(n_train)
        self.shard = split[rank * per_worker : (rank + 1) * per_worker]
        self.batch = batch
        self._rng = np.random.default_rng([seed, 0xDA7A, rank])
        self._order = self._rng.permutation(self.shard)
        self._cursor = 0

    def next(self) -> np.ndarray:
        """The indices of the next batch."""
        if self._cursor + self.batch > len(self._order):
            self._order = self._rng.permutation(self.shard)
            self._cursor = 0
        out = self._order[self._cursor : self._cursor + self.batch]
        self._cursor += self.batch
        return out


def per_worker_batch(global_batch: int, world: int) -> int:
    if global_batch % world:
        raise ConfigError(
            f"numerics.global_batch: {global_batch} does not split evenly over {world} workers; "
            f"use a multiple of {world}"
        )
    return global_batch // world
