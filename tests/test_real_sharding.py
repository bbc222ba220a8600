"""real/sharding.py: what a sharded worker frees between steps and the optimizer state it holds; and the fsdp
policy on gloo processes, which trains to DDP's parameters while each rank's measured peak memory drops."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import star  # noqa: E402

from policies.registry import create  # noqa: E402
from policies.view import ModelInfo  # noqa: E402
from real.device_use import CPU_MEMORY_ENV  # noqa: E402
from real.hooks import cluster_view  # noqa: E402
from real.sharding import RangeOptimizer, Sharded, ShardedState, sharded  # noqa: E402
from sim.config.numerics import OptimizerConfig  # noqa: E402
from sim.numerics.optim import FlatOptimizer  # noqa: E402


def bound(name: str, **settings: Any) -> Any:
    policy = create(name, settings)
    policy.bind(cluster_view(star(2, gpus_per_host=2)), ModelInfo(400.0, (200.0, 200.0)))  # hybrid: 2 x 2
    return policy


def test_every_fsdp_strategy_shards_the_optimizer_state_and_all_but_zero_1_the_parameters_and_gradients() -> None:
    assert sharded(bound("ring")) == Sharded()
    assert sharded(bound("fsdp", strategy="optimizer")) == Sharded(optimizer=True)
    for strategy in ("full", "grad_op", "hybrid"):
        assert sharded(bound("fsdp", strategy=strategy)) == Sharded(True, True, True), strategy


def test_a_range_optimizer_steps_as_the_flat_one_and_holds_state_for_the_ranges_it_stepped_only() -> None:
    """Adam's state per stepped element: two fp32 moments, 8 bytes (its step count is one per range)."""
    cfg = OptimizerConfig(name="adam", lr=0.01, weight_decay=0.1)
    n, (a, b) = 100, (30, 55)
    mine, reference = torch.randn(n), None
    reference = mine.clone()
    ranged, flat = RangeOptimizer(cfg), FlatOptimizer(cfg, 1, n)
    for _ in range(3):
        grad = torch.randn(b - a)
        ranged.step(mine, 0, a, b, grad, 0.01)
        flat.step(reference, 0, a, b, grad, 0.01)
    assert torch.equal(mine, reference)
    assert ranged.held_bytes() == (b - a) * (4 + 4)


def test_between_steps_a_sharded_rank_holds_its_own_slices_and_no_flat_storage() -> None:
    n = 12
    params, grads = torch.arange(n, dtype=torch.float32), torch.ones(n)
    owned = [((0, 6), (3, 6)), ((6, 12), (9, 12))]  # two buckets; this rank kept the second half of each
    replica = SimpleNamespace(params=params, grads=grads, owned=lambda: owned)
    state = ShardedState(replica, Sharded(True, True, True))  # type: ignore[arg-type]
    state.reshard()
    assert params.untyped_storage().nbytes() == 0 and grads.untyped_storage().nbytes() == 0
    state.unshard()
    assert params.untyped_storage().nbytes() == 4 * n and grads.untyped_storage().nbytes() == 4 * n
    expected = torch.tensor([float("nan")] * 3 + [3.0, 4.0, 5.0] + [float("nan")] * 3 + [9.0, 10.0, 11.0])
    assert torch.equal(params.isnan(), expected.isnan())  # what others own waits for the all-gathers
    assert torch.equal(params[~params.isnan()], expected[~expected.isnan()])


def test_before_any_reduce_scatter_nothing_is_freed() -> None:
    params = torch.ones(4)
    state = ShardedState(SimpleNamespace(params=params, grads=torch.ones(4), owned=list), Sharded(True, True, True))  # type: ignore[arg-type]
    state.reshard()
    assert params.untyped_storage().nbytes() == 16


@pytest.mark.slow  # launches gloo processes (~20 s)
def test_fsdp_on_gloo_trains_to_ddps_parameters_with_a_lower_measured_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CPU_MEMORY_ENV, "1")  # `syncsim real --cpu-memory`: the ranks inherit it
    """4 workers (2 hosts x 2): full sharding and hybrid sharding inside each host end on the parameters of a
    ring all-reduce run of the same config and seed, and on numerics mode's. With Adam a DDP rank holds 16 bytes
    of optimizer state per parameter, a fully sharded one 16 / 4: each rank's measured peak drops."""
    from real.launch import launch
    from sim.api import simulate

    config = {
        "name": "real-fsdp",
        "seed": 3,
        "iterations": 6,
        "cluster": {"topology": "star", "hosts": 2, "gpus_per_host": 2, "nic_gbps": 1.0},
        "workload": {
            "model": "synthetic",
            "gradient_mb": 1.0,
            "compute_ms": 5,
            "synthetic_layers": 4,
            "bucket_mb": 0.3,
        },
        "numerics": {
            "dataset": "digits",
            "model": "mlp",
            "hidden": [256, 256],
            "global_batch": 32,
            "optimizer": {"name": "adam", "lr": 0.01},
            "eval_every": 3,
        },
        "policies": [
            {"name": "ring"},
            {"name": "fsdp", "label": "full"},
            {"name": "fsdp", "strategy": "hybrid", "label": "hybrid"},
        ],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    outcome = launch(path, tmp_path / "out", nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    ddp = real["ring/workers"]
    sim = {run.label: run for run in simulate(path).runs}
    # sums in another order round differently, and Adam's g / sqrt(v) magnifies that where a gradient is near 0
    # (the ring policy itself ends 1.2e-5 from numerics mode in one element of this model)
    for label in ("full", "hybrid"):
        np.testing.assert_allclose(real[f"{label}/workers"], ddp, rtol=1e-4, atol=5e-5, err_msg=label)
        np.testing.assert_allclose(real[f"{label}/workers"], sim[label].parameters, rtol=1e-4, atol=5e-5)
    assert np.abs(ddp - real["full/workers"]).mean() < 1e-7  # almost every element agrees to the last bits
    accuracy = pd.read_csv(tmp_path / "out" / "accuracy.csv").query("worker == -1")
    losses = {label: rows["loss"].to_numpy() for label, rows in accuracy.groupby("policy")}
    assert len(losses["full"]) == 3  # iterations 0, 3, 6: each scores the gathered model
    np.testing.assert_allclose(losses["full"], losses["ring"], rtol=1e-5)
    np.testing.assert_allclose(losses["hybrid"], losses["ring"], rtol=1e-5)

    ranks = pd.read_csv(tmp_path / "out" / "ranks.csv").set_index(["policy", "rank"])
    peak = ranks["peak_memory_bytes"]
    assert (peak > 0).all()
    for rank in range(4):
        assert peak["full", rank] < peak["ring", rank]
    # beside it, sim.memory's for the MLP trained: 64 x 256 + 256 + 256 x 256 + 256 + 256 x 10 + 10 parameters;
    # DDP holds 20 bytes of each: fp32 weight, gradient, Adam's two moments, and its flat gradient bucket
    simulated = ranks["simulated_peak_memory_bytes"]
    assert (simulated["ring"] == 20 * 85_002).all()
    assert (simulated["full"] < simulated["ring"]).all()
    predicted = ranks["predicted_peak_memory_bytes"]  # the real backend's layout (tests/test_real_memory.py)
    assert (predicted["full"] < predicted["hybrid"]).all() and (predicted["hybrid"] < predicted["ring"]).all()
