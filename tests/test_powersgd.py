"""policies/powersgd.py: its program per bucket, its seeds, the bytes it declares, and what it does in
simulation and numerics mode, against closed forms. Its equality with PyTorch's own hook on gloo is
tests/test_real_powersgd.py; with numerics mode on the real backend, tests/test_real_primitives.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from helpers import star, synthetic

from policies import ClusterView, HostInfo, ModelInfo
from policies.base import Bucket, SettingError
from policies.factor_ops import RandomFill
from policies.ops import AllReduce, Combine
from policies.powersgd import REST, P, PowerSGD, Q
from sim.api import simulate
from sim.catalog.zoo import get_model

VIEW = ClusterView(
    ("h0", "h1"), {f"h{i}": HostInfo(f"h{i}", None, (i,), 1e9, 1e9) for i in range(2)}, {}
)  # two ranks, one per host
SHAPES = (((64, 32), (64,)), ((10, 64), (10,)))  # two buckets: a linear layer each


def bound(**settings: Any) -> PowerSGD:
    policy = PowerSGD(**settings)
    policy.bind(VIEW, ModelInfo(4.0 * 7370, (4.0 * 2112, 4.0 * 650), bucket_shapes=SHAPES))
    return policy


def test_warm_up_steps_all_reduce_the_bucket_then_three_all_reduces_follow() -> None:
    policy = bound(rank=2, warmup_steps=3)
    bucket = Bucket(0, 4.0 * 2112, 2)
    assert [type(op) for op in policy.on_gradients(0, 2, bucket)] == [AllReduce]
    ops = list(policy.on_gradients(0, 3, bucket))
    reduces = [op for op in ops if isinstance(op, AllReduce)]
    assert [op.tensor for op in reduces] == [REST, P, Q]
    # bucket 0: 64 x 32 at rank 2 is factored ((64 + 32) x 2 x 2 < 2048); its bias travels as it is
    assert [op.nbytes for op in reduces] == [4.0 * 64, 4.0 * 64 * 2, 4.0 * 32 * 2]
    # error feedback first and last: the residual added, a copy kept, and the residual made from it
    assert isinstance(ops[0], Combine) and ops[0].terms == ((1.0, "gradients"), (1.0, "powersgd_error"))
    assert ops[-1] == Combine("powersgd_error", ((1.0, "powersgd_input"), (-1.0, "gradients")))
    assert any(isinstance(op, RandomFill) for op in ops)  # the first compressed step draws Q
    assert not any(isinstance(op, RandomFill) for op in policy.on_gradients(0, 4, bucket))  # warm start after


def test_without_error_feedback_no_model_sized_buffers_are_kept() -> None:
    policy = bound(error_feedback=False)
    assert [b.name for b in policy.buffers()] == [P, Q, REST]
    assert not any(isinstance(op, Combine) for op in policy.on_gradients(1, 0, Bucket(1, 2600.0, 2)))


def test_seeds_are_numpys_draws_in_the_hooks_order() -> None:
    draws = np.random.RandomState(9)
    expected = [int(draws.randint(1_000_000_000)) for _ in range(6)]
    warm = bound(seed=9, warmup_steps=1)
    seeds = [op.seed for b in (0, 1) for op in warm.on_gradients(0, 1, Bucket(b, 1.0, 2)) if isinstance(op, RandomFill)]
    assert seeds == expected[:2]  # one draw per bucket, bucket by bucket
    cold = bound(seed=9, warmup_steps=1, warm_start=False)
    seeds = [
        op.seed
        for step in (1, 2, 3)
        for b in (0, 1)
        for op in cold.on_gradients(1, step, Bucket(b, 1.0, 2))
        if isinstance(op, RandomFill)
    ]
    assert seeds == expected  # a fresh draw every step and bucket


def test_a_model_without_tensor_shapes_is_refused_naming_the_setting() -> None:
    with pytest.raises(SettingError, match="tensor shapes"):
        PowerSGD().bind(VIEW, ModelInfo(8.0, (8.0,)))


def test_a_compressed_step_moves_the_factors_of_every_zoo_tensor() -> None:
    """resnet50, rank 4: each compressed step's all-reduces carry, per tensor of rows x cols (first dimension
    by the rest), (rows + cols) r values if that is less than half of rows cols, else all of them (fp32)."""
    rank = 4
    values = 0
    for layer in get_model("resnet50").layers:
        for shape in layer.shapes:
            rows = shape[0]
            cols = math.prod(shape) // rows
            r = min(rank, rows, cols)
            values += (rows + cols) * r if 2 * (rows + cols) * r < rows * cols else rows * cols
    config = synthetic(star(4), [{"name": "powersgd", "rank": rank, "warmup_steps": 1}], iterations=2)
    config["workload"] = {"model": "resnet50", "batch_size": 32}
    ops = simulate(config).ops
    step = ops[(ops["step"] == 1) & (ops["rank"] == -1)]
    assert len(step) == 3 * len(ops[(ops["step"] == 0) & (ops["rank"] == -1)])
    assert step["nbytes"].sum() == pytest.approx(4.0 * values)
    assert step["nbytes"].sum() < 0.1 * ops[ops["step"] == 0]["nbytes"].sum()  # ResNet-50 shrinks > 10x


def test_full_rank_factors_average_exactly_as_ring_does() -> None:
    """Numerics mode: at a rank no smaller than any matrix's smaller side, with every tensor factored, P Q^T
    is the exact mean of the workers' gradients (P spans the column space of their sum), and error feedback
    adds residuals that sum to zero: so PowerSGD trains exactly as ring does, to round-off."""
    policies = [{"name": "ring"}, {"name": "powersgd", "rank": 64, "min_compression_rate": 0.0, "warmup_steps": 1}]
    config = synthetic(star(4), policies, 1.0, compute_ms=5, iterations=8, layers=3)
    config["numerics"] = {"model": "logreg", "global_batch": 16, "eval_every": 4}
    result = simulate(config)
    assert not result.errors
    ring, ours = result.runs
    np.testing.assert_allclose(ours.parameters, ring.parameters, rtol=1e-4, atol=1e-5)
    # and at rank 1 it does not: the codec is lossy there
    config["policies"][1]["rank"] = 1
    lossy = simulate(config).runs[1]
    assert np.abs(lossy.parameters - ring.parameters).max() > 1e-3
