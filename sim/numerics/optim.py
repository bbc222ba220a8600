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

Span = tuple[int, int, int]  # (row, a, b)


class FlatOptimizer:
    """Optimizer state for `rows` replicas of an `n`-element parameter vector.

    Adam's step count is kept per range stepped (`steps`), as torch.optim keeps one per tensor: the ranges a
    replica steps are its buckets, the same every step. Where a range is stepped that overlaps a different one
    of the same row (a parameter-server shard's updates over changing ranges), the counts become per element
    (`t`, an int64 per element) from then on. Either way the bias corrections are computed per element from an
    int64 tensor of the counts, so the arithmetic is the same whichever holds them."""

    def __init__(self, cfg: OptimizerConfig, rows: int, n: int) -> None:
        self.cfg = cfg
        self.rows, self.n = rows, n
        if cfg.name == "sgd":
            self.buffer = torch.zeros(rows, n) if cfg.momentum > 0 else None
        else:
            self.m, self.v = torch.zeros(rows, n), torch.zeros(rows, n)
            self.steps: dict[Span, int] = {}
            self.t: Optional[torch.Tensor] = None

    def _counts(self, row: int, a: int, b: int, device: torch.device) -> torch.Tensor:
        """The step counts of `[row, a:b]` after this step, one per element."""
        span = (row, a, b)
        fresh = self.t is None and span not in self.steps and a < b
        if fresh and any(r == row and a < d and c < b for r, c, d in self.steps):
            self.t = torch.zeros(self.rows, self.n, dtype=torch.int64, device=device)
            for (r, c, d), count in self.steps.items():  # disjoint: no two overlapped so far
                self.t[r, c:d] = count
        if self.t is not None:
            return self.t[row, a:b].add_(1)
        self.steps[span] = self.steps.get(span, 0) + 1
        return torch.full((b - a,), self.steps[span], dtype=torch.int64, device=device)

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
        m, v = self.m[row, a:b], self.v[row, a:b]
        m.mul_(beta1).add_((1 - beta1) * grad)
        v.mul_(beta2).add_((1 - beta2) * grad * grad)
        # lr * m / (1 - beta1^t) / (sqrt(v) / sqrt(1 - beta2^t) + eps), each operation as written and in this
        # order, but in place where a temporary's old value is not needed again: the same values, with at most
        # the int64 counts and two fp32 temporaries per element alive at once (docs/real.md)
        t = self._counts(row, a, b, p.device)
        bias1 = torch.pow(beta1, t).neg_().add_(1)  # -x + 1 is 1 - x exactly
        bias2 = torch.pow(beta2, t).neg_().add_(1)
        del t  # per-range counts are a temporary
        update = torch.mul(m, lr).div_(bias1)
        del bias1
        denominator = v.sqrt().div_(bias2.sqrt_()).add_(cfg.eps)
        del bias2
        p.sub_(update.div_(denominator))


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
