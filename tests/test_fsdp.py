"""policies/fsdp.py in the simulator: the bytes each strategy sends per step against their closed forms (full
sharding 3(p-1)/p of the model per rank, DDP and ZeRO-1/2 2(p-1)/p, hybrid sharding's inside and across
terms), the iteration of a one-unit model against the alpha-beta sum, the refusals; and in numerics mode, every
strategy trains to DDP's parameters (sharding changes where values live, not the mathematics)."""

from __future__ import annotations

from typing import Any

import numpy as np
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


def test_a_shard_group_the_cluster_lacks_is_refused_naming_the_setting() -> None:
    cfg = synthetic(star(2), [{"name": "fsdp", "strategy": "hybrid", "shard_group": "rack"}], 1.0)
    with pytest.raises(ConfigError, match=r"policies\[0\]\.shard_group: this cluster has no racks"):
        prepare(parse_config(cfg))


# ----------------------------------------------------------------------------------------- numerics mode
STRATEGIES = [
    {"name": "fsdp", "label": "full"},
    {"name": "fsdp", "strategy": "grad_op", "label": "grad_op"},
    {"name": "fsdp", "strategy": "optimizer", "label": "optimizer"},
    {"name": "fsdp", "strategy": "hybrid", "shard_group": "host", "label": "hybrid"},
    {"name": "fsdp", "reshard_after_forward": False, "label": "full-kept"},
]
SGD = {
    "model": "mlp",
    "hidden": [32, 16],
    "global_batch": 32,
    "optimizer": {"name": "sgd", "lr": 0.2, "momentum": 0.9, "weight_decay": 1e-4},
}
ADAM = {"model": "mlp", "hidden": [16], "global_batch": 32, "optimizer": {"name": "adam", "lr": 0.01}}


def numerics_run(policies: list[dict[str, Any]], numerics: dict[str, Any], iterations: int = 6) -> Any:
    """2 hosts x 2 GPUs; the model cut into 4 buckets, so each rank owns a shard of every bucket."""
    cfg = synthetic(
        star(2, gpus_per_host=2), policies, 4.0, compute_ms=1.0, iterations=iterations, bucket_mb=1.0, layers=4
    )
    cfg["numerics"] = {"eval_every": 3, **numerics}
    result = simulate(cfg)
    assert result.errors == {}
    return result


@pytest.mark.parametrize("numerics", [SGD, ADAM], ids=["sgd-momentum", "adam"])
def test_every_strategy_ends_on_ddps_parameters(numerics: dict[str, Any]) -> None:
    """Reduce-scatter, a step of the owned shard, all-gather: DDP's update, element by element, so every replica
    (gathered at the end, as FSDP's full state dict) equals the ring all-reduce's replicas to fp32 rounding
    (hybrid averages in two stages: (a + b) / 2 + (c + d) / 2 over 2 rounds differently from the mean of four)."""
    result = numerics_run([{"name": "ring"}, *STRATEGIES], numerics)
    ddp = result.runs[0]
    assert (ddp.parameters == ddp.parameters[0]).all()
    for run in result.runs[1:]:
        for replica in run.parameters:
            np.testing.assert_allclose(replica, ddp.parameters[0], rtol=0, atol=2e-6, err_msg=run.label)
        np.testing.assert_allclose(run.consensus, ddp.consensus, rtol=0, atol=2e-6, err_msg=run.label)
        # every evaluation scores the gathered model: (iteration, time, worker, train loss, held-out loss, accuracy)
        held_out = [[row[4] for row in r.accuracy if row[2] == -1] for r in (run, ddp)]
        assert len(held_out[0]) == 3  # iterations 0, 3 and 6
        np.testing.assert_allclose(*held_out, rtol=1e-5, err_msg=run.label)


def test_a_rank_holds_stale_values_outside_its_shard_until_the_gather_overwrites_them(monkeypatch: Any) -> None:
    """Each rank steps only the shard it owns: before the next all-gather of the parameters its copy of the
    others' shards is a step behind theirs (so a gather that did nothing would leave the replicas apart)."""
    from sim.numerics.replicas import Replicas

    gaps: list[float] = []
    gather = Replicas._all_gather

    def watched(self: Replicas, op: Any, data: Any, ranks: Any, buckets: Any) -> None:
        owned = {r: self.replicas[r].range(buckets[r]) for r in ranks}  # before the gather pops the slices
        if len(set(owned.values())) == len(ranks):  # after a reduce-scatter: each rank holds its own slice
            gaps.append(
                max(float((data[r][a:b] - data[q][a:b]).abs().max()) for q, (a, b) in owned.items() for r in ranks)
            )
        gather(self, op, data, ranks, buckets)

    monkeypatch.setattr(Replicas, "_all_gather", watched)
    result = numerics_run([{"name": "fsdp"}], SGD, iterations=3)
    assert len(gaps) == 2 * 4  # the forward gathers of steps 1 and 2, one per bucket
    assert min(gaps) > 1e-4  # every bucket: some rank's copy of another's shard is stale
    assert (result.runs[0].parameters == result.runs[0].parameters[0]).all()


def test_a_gather_that_does_nothing_leaves_the_replicas_off_ddp(monkeypatch: Any) -> None:
    from sim.numerics.replicas import Replicas

    monkeypatch.setattr(Replicas, "_all_gather", lambda *args: None)
    result = numerics_run([{"name": "ring"}, {"name": "fsdp"}], SGD, iterations=3)
    gap = np.abs(result.runs[1].consensus - result.runs[0].consensus).max()
    assert gap > 1e-3
