"""policies/fsdp.py in the simulator: the bytes each strategy sends per step against their closed forms (full
sharding 3(p-1)/p of the model per rank, DDP and ZeRO-1/2 2(p-1)/p, hybrid sharding's inside and across
terms), the iteration of a one-unit model against the alpha-beta sum, and the refusals."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import GBPS, US, star, synthetic

from sim.api import prepare, simulate
from sim.config import parse_config
from sim.errors import ConfigError

MB = 1e6
N = 64 * MB


def wire_per_rank(policy: dict[str, Any], cluster: dict[str, Any], ranks: int) -> dict[str, float]:
    """Bytes each rank puts on the wire in one step, by collective kind (the ops table counts every member's)."""
    result = simulate(synthetic(cluster, [policy], N / MB, compute_ms=5.0, bucket_mb=16.0))
    assert result.summary.iloc[0]["status"] == "ok"
    ops = result.ops[(result.ops["rank"] == -1) & (result.ops["step"] == 0)]
    return {kind: float(rows["wire_bytes"].sum()) / ranks for kind, rows in ops.groupby("kind")}


@pytest.mark.parametrize("p", [2, 4, 8])
def test_full_sharding_sends_half_again_what_ddp_sends(p: int) -> None:
    full = wire_per_rank({"name": "fsdp"}, star(p), p)
    ddp = wire_per_rank({"name": "ring"}, star(p), p)
    assert full["AllGather"] == pytest.approx(2 * (p - 1) / p * N, rel=1e-12)  # before forward, again before backward
    assert full["ReduceScatter"] == pytest.approx((p - 1) / p * N, rel=1e-12)
    assert sum(full.values()) == pytest.approx(3 * (p - 1) / p * N, rel=1e-12)
    assert sum(ddp.values()) == pytest.approx(2 * (p - 1) / p * N, rel=1e-12)


@pytest.mark.parametrize("strategy", ["grad_op", "optimizer"])
def test_zero_1_and_2_send_what_ddp_sends(strategy: str) -> None:
    p = 4
    sent = wire_per_rank({"name": "fsdp", "strategy": strategy}, star(p), p)
    assert sent == pytest.approx({"AllGather": (p - 1) / p * N, "ReduceScatter": (p - 1) / p * N}, rel=1e-12)
    kept = wire_per_rank({"name": "fsdp", "reshard_after_forward": False}, star(p), p)
    assert kept == pytest.approx(sent, rel=1e-12)  # full sharding that keeps the gathered parameters


def test_hybrid_sharding_shards_inside_a_host_and_all_reduces_the_shard_across() -> None:
    """4 hosts x 4 GPUs, shard group = host (g = 4), r = 4 replicas: inside, 3(g-1)/g of the model per rank;
    across, a 2(r-1)/r all-reduce of the rank's n/g shard."""
    g, r = 4, 4
    sent = wire_per_rank({"name": "fsdp", "strategy": "hybrid"}, star(r, gpus_per_host=g), g * r)
    assert sent["AllGather"] + sent["ReduceScatter"] == pytest.approx(3 * (g - 1) / g * N, rel=1e-12)
    assert sent["AllReduce"] == pytest.approx(2 * (r - 1) / r * N / g, rel=1e-12)


def test_a_one_unit_iteration_is_compute_three_exposed_collectives_and_a_shard_of_the_optimizer() -> None:
    """One unit: forward waits for its gather, backward for the second, the reduce-scatter follows backward;
    each is (p-1) hops of 12 us plus (p-1)/p of the model over 25 Gb/s; each rank steps 1/p of the optimizer."""
    p, compute_ms, optimizer_ms = 4, 20.0, 8.0
    cfg = synthetic(star(p), [{"name": "fsdp"}], N / MB, compute_ms=compute_ms, iterations=2)
    cfg["workload"]["optimizer_ms"] = optimizer_ms
    it = simulate(cfg).iterations
    collective = (p - 1) * 12 * US + (p - 1) / p * N / (25 * GBPS)
    expected = compute_ms * 1e-3 + 3 * collective + optimizer_ms * 1e-3 / p
    assert it["iteration_s"].to_numpy() == pytest.approx([expected] * (2 * p), rel=1e-9)


def test_sharded_policies_are_refused_where_no_tensor_rules_exist_yet() -> None:
    cfg = synthetic(star(2), [{"name": "fsdp"}], 1.0)
    cfg["numerics"] = {"dataset": "digits", "model": "mlp", "hidden": [8], "global_batch": 8}
    with pytest.raises(ConfigError, match=r"policies\[0\]: fsdp is timed by the simulator, but numerics mode has no"):
        prepare(parse_config(cfg))


def test_a_shard_group_the_cluster_lacks_is_refused_naming_the_setting() -> None:
    cfg = synthetic(star(2), [{"name": "fsdp", "strategy": "hybrid", "shard_group": "rack"}], 1.0)
    with pytest.raises(ConfigError, match=r"policies\[0\]\.shard_group: this cluster has no racks"):
        prepare(parse_config(cfg))


def test_the_real_backend_refuses_it_before_any_process_starts() -> None:
    pytest.importorskip("torch")
    from real.layout import placement

    cfg = synthetic(star(2), [{"name": "fsdp"}], 1.0)
    cfg["numerics"] = {"dataset": "digits", "model": "mlp", "hidden": [8], "global_batch": 8, "enabled": False}
    with pytest.raises(ConfigError, match=r"policies\[0\]: fsdp is timed by the simulator only; the real backend"):
        placement(parse_config(cfg))
