"""SGD with momentum, Adam and AdamW on element ranges of flat parameter vectors, and the learning-rate schedule.

torch.optim steps whole tensors; numerics mode must step one gradient bucket of one replica (or one
parameter-server slice) at a time, so the same update rules are written here over `[row, a:b]`
ranges. tests/test_numerics_optim.py checks them against torch.optim step for step.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from sim.config.numerics import OptimizerConfig, ScheduleConfig


class FlatOptimizer:
    """Optimizer state for `rows` replicas of an `n`-element parameter vector."""

    def __init__(self, cfg: OptimizerConfig, rows: int, n: int) -> None:
        self.cfg = cfg
        if cfg.name == "sgd":
            self.buffer = torch.zeros(rows, n) if cfg.momentum > 0 else None
        else:
            self.m, self.v = torch.zeros(rows, n), torch.zeros(rows, n)
            self.t = torch.zeros(rows, n, dtype=torch.int64)

    def step(
        self,
        params: torch.Tensor,
        row: int,
        a: int,
        b: int,
        grad: torch.Tensor,
        lr: float,
        momentum: Optional[float] = None,
    ) -> None:
        """Update `params[a:b]` (a view of replica `row`) in place with `grad`; `momentum` overrides sgd's."""
        cfg = self.cfg
        p = params[a:b]
        if cfg.weight_decay:
            if cfg.name == "adamw":  # decoupled: the parameter decays, the moments never see it
                p.mul_(1 - lr * cfg.weight_decay)
            else:
                grad = grad + cfg.weight_decay * p
        if cfg.name == "sgd":
            mu = cfg.momentum if momentum is None else momentum
            if self.buffer is None or mu == 0:
                p.sub_(lr * grad)
                return
            buf = self.buffer[row, a:b]
            buf.mul_(mu).add_(grad)
            p.sub_(lr * (grad + mu * buf if cfg.nesterov else buf))
            return
        beta1, beta2 = cfg.betas
        t = self.t[row, a:b]
        t.add_(1)
        m, v = self.m[row, a:b], self.v[row, a:b]
        m.mul_(beta1).add_((1 - beta1) * grad)
        v.mul_(beta2).add_((1 - beta2) * grad * grad)
        bias1 = 1 - torch.pow(beta1, t)
        bias2 = 1 - torch.pow(beta2, t)
        p.sub_(lr * m / bias1 / (v.sqrt() / bias2.sqrt() + cfg.eps))


def learning_rate(base: float, schedule: ScheduleConfig, iteration: float, total: int) -> float:
    """The rate of an update made at `iteration` (0-based; fractional for asynchronous updates)."""
    factor = 1.0
    if schedule.warmup_iterations and iteration < schedule.warmup_iterations:
        factor = (math.floor(iteration) + 1) / schedule.warmup_iterations
    if schedule.kind == "step":
        factor *= schedule.gamma ** sum(1 for m in schedule.milestones if iteration >= m)
    elif schedule.kind == "cosine":
        factor *= 0.5 * (1 + math.cos(math.pi * min(iteration, total) / total))
    return base * factor
