"""real/memory.py: the simulator's peak memory per worker for the model a real run trains."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import star, synthetic

pytest.importorskip("torch")

from real.memory import predicted_peak_bytes, trained_plan  # noqa: E402
from sim.api import prepare  # noqa: E402
from sim.config import parse_config  # noqa: E402


def setup(policies: list[dict[str, Any]], optimizer: dict[str, Any]) -> tuple[Any, Any, Any]:
    cfg = synthetic(star(2, gpus_per_host=2), policies, 8.0, compute_ms=1.0, bucket_mb=2.0, layers=4)
    cfg["numerics"] = {"model": "mlp", "hidden": [8], "global_batch": 32, "optimizer": optimizer}
    config = parse_config(cfg)
    cluster, plan = prepare(config)
    return config, cluster, plan


def test_the_plan_is_the_trained_models_with_the_workloads_buckets_in_proportion() -> None:
    config, cluster, plan = setup([{"name": "ring"}], {"name": "sgd"})
    trained = trained_plan(config, plan, cluster, 1000)
    assert trained.params == 1000 and trained.gradient_bytes == 4000
    assert [b.nbytes for b in trained.buckets] == pytest.approx([b.nbytes / 2000 for b in plan.buckets])  # 8 MB
    assert trained.batch_size == 8  # the numerics batch of 32 over 4 workers
    assert trained.activation_bytes_per_sample is None


@pytest.mark.parametrize(
    ("optimizer", "per_parameter"), [({"name": "adam"}, 20), ({"name": "sgd", "momentum": 0.9}, 16)]
)
def test_ddp_holds_its_weights_gradient_optimizer_state_and_flat_buckets(
    optimizer: dict[str, Any], per_parameter: int
) -> None:
    """fp32: 4 bytes each of weight, gradient and DDP's flat gradient bucket, plus 4 per optimizer state value
    (Adam's two moments, or the momentum)."""
    config, cluster, plan = setup([{"name": "ring"}], optimizer)
    assert predicted_peak_bytes(config, 0, cluster, plan, 1000) == per_parameter * 1000


def test_zero_1_holds_a_quarter_of_the_optimizer_state_over_four_ranks() -> None:
    config, cluster, plan = setup([{"name": "ring"}, {"name": "fsdp", "strategy": "optimizer"}], {"name": "adam"})
    ddp, zero1 = (predicted_peak_bytes(config, i, cluster, plan, 1000) for i in (0, 1))
    assert ddp - zero1 == pytest.approx(2 * 4 * 1000 * (1 - 1 / 4))
