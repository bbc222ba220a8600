"""The range-wise optimizers step exactly as torch.optim does, and the schedule has its documented shape."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from sim.config.numerics import OptimizerConfig, ScheduleConfig  # noqa: E402
from sim.numerics.optim import FlatOptimizer, learning_rate  # noqa: E402


@pytest.mark.parametrize(
    "settings",
    [
        {"name": "sgd", "lr": 0.1, "momentum": 0.0},
        {"name": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 0.01},
        {"name": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": True},
        {"name": "adam", "lr": 0.01, "weight_decay": 0.001},
        {"name": "adamw", "lr": 0.01, "weight_decay": 0.1},
    ],
    ids=["sgd", "momentum-wd", "nesterov", "adam", "adamw"],
)
def test_stepping_two_ranges_separately_equals_torch_optim_on_the_whole(settings: dict) -> None:
    cfg = OptimizerConfig(**settings)
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(10, generator=gen)
    grads = [torch.randn(10, generator=gen) for _ in range(5)]
    reference = torch.nn.Parameter(start.clone())
    if cfg.name == "sgd":
        opt = torch.optim.SGD(
            [reference], lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov, weight_decay=cfg.weight_decay
        )
    elif cfg.name == "adamw":
        opt = torch.optim.AdamW([reference], lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    else:
        opt = torch.optim.Adam([reference], lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)
    params = torch.stack([torch.zeros(10), start.clone()])  # row 1 is the replica under test
    flat = FlatOptimizer(cfg, 2, 10)
    for g in grads:
        reference.grad = g.clone()
        opt.step()
        flat.step(params[1], 1, 6, 10, g[6:], cfg.lr)  # the last bucket first, as backward produces it
        flat.step(params[1], 1, 0, 6, g[:6], cfg.lr)
    torch.testing.assert_close(params[1], reference.detach(), rtol=1e-6, atol=1e-7)
    assert torch.count_nonzero(params[0]) == 0  # other replicas untouched


def test_momentum_override_applies_only_to_that_step() -> None:
    flat = FlatOptimizer(OptimizerConfig(lr=1.0, momentum=0.9), 1, 1)
    p = torch.zeros(1)
    flat.step(p, 0, 0, 1, torch.ones(1), 1.0, momentum=0.0)  # plain step; the buffer stays empty
    flat.step(p, 0, 0, 1, torch.ones(1), 1.0, momentum=0.5)  # buffer = 1
    flat.step(p, 0, 0, 1, torch.ones(1), 1.0, momentum=0.5)  # buffer = 0.5 + 1
    assert p.item() == pytest.approx(-(1.0 + 1.0 + 1.5))


def test_schedule_warmup_step_and_cosine() -> None:
    warm = ScheduleConfig(warmup_iterations=4)
    assert [learning_rate(1.0, warm, i, 100) for i in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    step = ScheduleConfig(kind="step", milestones=[10, 20], gamma=0.5)
    assert [learning_rate(2.0, step, i, 100) for i in (9, 10, 19, 20)] == [2.0, 1.0, 1.0, 0.5]
    cosine = ScheduleConfig(kind="cosine")
    assert learning_rate(1.0, cosine, 0, 100) == 1.0
    assert learning_rate(1.0, cosine, 50, 100) == pytest.approx(0.5)
    assert learning_rate(1.0, cosine, 100, 100) == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(1.0, cosine, 25, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
