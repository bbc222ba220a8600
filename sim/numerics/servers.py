"""The parameter servers' tensors: one model the shards partition, updated as the simulator delivers pushes.

A synchronous shard sums one push per worker for a (key, round) and applies the mean once, so BSP
through servers makes exactly the update of one process on the global batch. An asynchronous shard
applies each push on arrival as one worker's update: the rate follows `asynchronous.lr_scale` and the
momentum `asynchronous.momentum` (ramped back over `momentum_ramp_iterations`; docs/numerics.md), and
the schedule advances by 1/workers per update. A phased policy (Sync-Switch) restarts the servers
from a checkpoint at each switch (`begin_phase`): the schedule goes on, the ramp starts again.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim.config.numerics import NumericsConfig
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
        self.updates_before = 0  # worker-iterations of the phases before this one (policies.phases)
        scale = cfg.asynchronous.lr_scale
        self.async_lr_scale = 1.0 / world if scale == "linear" else 1.0 if scale == "none" else float(scale)
        mu = cfg.optimizer.momentum
        self.async_momentum = {"scaled": mu / world, "same": mu, "zero": 0.0}[cfg.asynchronous.momentum]
        self._ramp = cfg.asynchronous.momentum_ramp_iterations if cfg.asynchronous.momentum == "scaled" else 0

    def begin_phase(self, params: torch.Tensor, updates: int) -> None:
        """Restart from a checkpoint after `updates` worker-iterations: rounds and asynchronous
        update counts start again, and the learning-rate schedule goes on from where the run stands.
        Optimizer state (momentum) is part of the checkpoint and carries over."""
        if self._sums:
            raise RuntimeError(f"a phase ended with {len(self._sums)} round(s) half-pushed to the servers")
        self.params.copy_(params)
        self._async_updates.clear()
        self.updates_before = updates

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
        step = self.updates_before // self.world + rnd
        lr = learning_rate(self.cfg.optimizer.lr, self.cfg.schedule, step, self.iterations)
        self.optimizer.step(self.params, 0, a, b, total / count, lr)

    def apply_async(self, update: Update) -> None:
        """Apply one worker's push on its own."""
        done = self._async_updates.get((update.a, update.b), 0)
        self._async_updates[(update.a, update.b)] = done + 1
        progress = (self.updates_before + done) / self.world
        base = learning_rate(self.cfg.optimizer.lr, self.cfg.schedule, progress, self.iterations)
        lr = base * self.async_lr_scale
        self.optimizer.step(self.params, 0, update.a, update.b, update.values, lr, momentum=self._momentum(done))

    def _momentum(self, done: int) -> float:
        """Asynchronous momentum after `done` updates of a range in this phase (ramped back, if set)."""
        if not self._ramp:
            return self.async_momentum
        full = self.cfg.optimizer.momentum
        return self.async_momentum + (full - self.async_momentum) * min(1.0, done / self.world / self._ramp)
