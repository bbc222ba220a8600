"""The parameter servers' tensors: one model the shards partition, updated as the simulator delivers pushes.

A synchronous shard sums one push per worker for a (key, round) and applies the mean once, so BSP
through servers makes exactly the update of one process on the global batch. An asynchronous shard
applies each push on arrival as one worker's update: the rate follows `asynchronous.lr_scale` and the
momentum `asynchronous.momentum` (docs/numerics.md), and the schedule advances by 1/workers per update.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim.config_numerics import NumericsConfig
from sim.numerics.optim import FlatOptimizer, learning_rate


@dataclass(frozen=True)
class Update:
    """Gradient values of elements [a, b) pushed by `rank`."""

    rank: int
    a: int
    b: int
    values: torch.Tensor


class ServerTensors:
    def __init__(self, cfg: NumericsConfig, initial: torch.Tensor, world: int, iterations: int) -> None:
        self.cfg, self.world, self.iterations = cfg, world, iterations
        self.params = initial.clone()
        self.optimizer = FlatOptimizer(cfg.optimizer, 1, initial.numel())
        self._sums: dict[tuple[int, int, int], list] = {}  # (shard, key, round) -> [a, b, sum, count]
        self._async_updates: dict[tuple[int, int], int] = {}  # (a, b) -> updates applied
        scale = cfg.asynchronous.lr_scale
        self.async_lr_scale = 1.0 / world if scale == "linear" else 1.0 if scale == "none" else float(scale)
        mu = cfg.optimizer.momentum
        self.async_momentum = {"scaled": mu / world, "same": mu, "zero": 0.0}[cfg.asynchronous.momentum]

    def add(self, shard: int, key: int, rnd: int, update: Update) -> None:
        """A synchronous shard received one worker's push for (key, round)."""
        entry = self._sums.get((shard, key, rnd))
        if entry is None:
            self._sums[(shard, key, rnd)] = [update.a, update.b, update.values.clone(), 1]
            return
        if (entry[0], entry[1]) != (update.a, update.b):
            raise ValueError(
                f"shard {shard}, key {key}: rank {update.rank} pushed elements [{update.a}, {update.b}) "
                f"where other workers pushed [{entry[0]}, {entry[1]})"
            )
        entry[2].add_(update.values)
        entry[3] += 1

    def apply_round(self, shard: int, key: int, rnd: int) -> None:
        """Apply the mean of a complete round."""
        a, b, total, count = self._sums.pop((shard, key, rnd))
        lr = learning_rate(self.cfg.optimizer.lr, self.cfg.schedule, rnd, self.iterations)
        self.optimizer.step(self.params, 0, a, b, total / count, lr)

    def apply_async(self, update: Update) -> None:
        """Apply one worker's push on its own."""
        done = self._async_updates.get((update.a, update.b), 0)
        self._async_updates[(update.a, update.b)] = done + 1
        base = learning_rate(self.cfg.optimizer.lr, self.cfg.schedule, done / self.world, self.iterations)
        lr = base * self.async_lr_scale
        self.optimizer.step(self.params, 0, update.a, update.b, update.values, lr, momentum=self.async_momentum)
