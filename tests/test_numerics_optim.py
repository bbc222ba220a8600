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


def per_element_adam(cfg: OptimizerConfig, p: torch.Tensor, state: dict, a: int, b: int, g: torch.Tensor) -> None:
    """Adam as FlatOptimizer stepped it with an int64 step count per element, one expression (the reference)."""
    beta1, beta2 = cfg.betas
    if cfg.weight_decay:
        if cfg.name == "adamw":
            p[a:b].mul_(1 - cfg.lr * cfg.weight_decay)
        else:
            g = g + cfg.weight_decay * p[a:b]
    t, m, v = state["t"][a:b], state["m"][a:b], state["v"][a:b]
    t.add_(1)
    m.mul_(beta1).add_((1 - beta1) * g)
    v.mul_(beta2).add_((1 - beta2) * g * g)
    bias1, bias2 = 1 - torch.pow(beta1, t), 1 - torch.pow(beta2, t)
    p[a:b].sub_(cfg.lr * m / bias1 / (v.sqrt() / bias2.sqrt() + cfg.eps))


@pytest.mark.parametrize(
    "settings",
    [{"name": "adam", "lr": 0.01, "weight_decay": 0.001}, {"name": "adamw", "lr": 0.003, "weight_decay": 0.1}],
)
def test_per_range_step_counts_and_in_place_temporaries_give_the_per_element_results_bit_for_bit(
    settings: dict,
) -> None:
    """Buckets of 1,000 and 2,333 elements (vectorised loops and their tails), stepped 7 times each, then a range
    across both (a parameter-server update): the counts turn per element there and the values still agree
    exactly with the one-expression, per-element-count formulation."""
    cfg = OptimizerConfig(**settings)
    gen = torch.Generator().manual_seed(1)
    n, cut = 3333, 1000
    p = torch.randn(n, generator=gen)
    reference = p.clone()
    state = {"t": torch.zeros(n, dtype=torch.int64), "m": torch.zeros(n), "v": torch.zeros(n)}
    flat = FlatOptimizer(cfg, 1, n)
    for _ in range(7):
        g = torch.randn(n, generator=gen)
        for a, b in ((cut, n), (0, cut)):
            flat.step(p, 0, a, b, g[a:b], cfg.lr)
            per_element_adam(cfg, reference, state, a, b, g[a:b])
    assert flat.t is None and flat.steps == {(0, cut, n): 7, (0, 0, cut): 7}
    assert torch.equal(p, reference)
    g = torch.randn(n, generator=gen)
    flat.step(p, 0, 500, 2000, g[500:2000], cfg.lr)
    per_element_adam(cfg, reference, state, 500, 2000, g[500:2000])
    assert flat.t is not None and torch.equal(flat.t[0], state["t"])
    assert torch.equal(p, reference)


def test_adams_state_is_two_fp32_values_an_element() -> None:
    """No per-element step count: 2 x 4 bytes for each of 1,000 elements, stepped over two ranges."""
    from real.sharding import RangeOptimizer

    optimizer = RangeOptimizer(OptimizerConfig(name="adam"))
    p = torch.zeros(1000)
    for a, b in ((0, 400), (400, 1000)):
        optimizer.step(p, 0, a, b, torch.ones(b - a), 0.1)
        optimizer.step(p, 0, a, b, torch.ones(b - a), 0.1)
    assert optimizer.held_bytes() == 8 * 1000
