"""Oversubscription costs exactly what the bottleneck predicts (docs/physics.md, "Oversubscription").

The bundled two_tier configs put 16 single-GPU V100 hosts at 25 Gbps in 4 racks with 100, 25 and
6.25 Gbps uplinks (1:1, 4:1, 16:1). Ranks are packed rack by rack, so a ring crosses each uplink
with exactly one flow per direction: a flow gets min(NIC, uplink). Hence the ring all-reduce of
ResNet-50's buckets costs the same at 1:1 and 4:1 (the uplink equals one NIC), and at 16:1 its
bandwidth term grows by 25/6.25 = 4 while the latency term stays.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import GBPS, US

from sim.api import simulate
from sim.catalog.gpus import get_gpu
from sim.compute.workload import compute_plan
from sim.config import load_config

CONFIGS = Path(__file__).parent.parent / "configs"
P = 16
CROSS_RACK_ALPHA = (2 * 1.0 + 4 * 5.0) * US  # GPU-host-ToR-core-ToR-host-GPU


def ring_allreduce_per_iteration(ratio: str) -> tuple[float, float]:
    """(simulated, predicted) seconds of ring all-reduce per iteration for one bundled config."""
    cfg = load_config(CONFIGS / f"two_tier_{ratio}_resnet50.yaml")
    ring = next(p for p in cfg.policies if p.name == "ring")
    ideal = cfg.simulation.model_copy(update={"network_model": "ideal"})  # the closed form's network
    cfg = cfg.model_copy(update={"iterations": 3, "policies": [ring], "simulation": ideal})
    result = simulate(cfg)
    ops = result.ops[result.ops["kind"] == "AllReduce"]
    simulated = ops.groupby("step")["duration_s"].sum().mean()
    plan = compute_plan(cfg.workload, get_gpu(cfg.cluster.gpu))
    bandwidth = min(cfg.cluster.nic_gbps, cfg.cluster.uplink_gbps) * GBPS
    predicted = sum(
        2 * (P - 1) * CROSS_RACK_ALPHA + 2 * (P - 1) / P * bucket.nbytes / bandwidth for bucket in plan.buckets
    )
    return float(simulated), predicted


@pytest.mark.parametrize("ratio", ["1to1", "4to1", "16to1"])
def test_ring_allreduce_time_matches_bottleneck(ratio: str) -> None:
    simulated, predicted = ring_allreduce_per_iteration(ratio)
    assert simulated == pytest.approx(predicted, rel=0.01)


def test_oversubscription_ratios() -> None:
    """Predicted from the closed form alone: 4:1 / 1:1 = 1 and 16:1 / 1:1 = 3.88 (docs/physics.md)."""
    (base, base_pred), (four, four_pred), (sixteen, sixteen_pred) = (
        ring_allreduce_per_iteration(r) for r in ("1to1", "4to1", "16to1")
    )
    assert four_pred / base_pred == pytest.approx(1.0)
    assert sixteen_pred / base_pred == pytest.approx(3.876, abs=0.001)
    assert four / base == pytest.approx(four_pred / base_pred, rel=0.01)
    assert sixteen / base == pytest.approx(sixteen_pred / base_pred, rel=0.01)
