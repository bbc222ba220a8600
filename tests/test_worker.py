"""The worker's iteration against closed forms: communication held until backward ends
(`workload.overlap_backward`), and the optimizer step once every `accumulation_steps` iterations."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import GBPS, US, star, synthetic

from sim.api import simulate
from sim.config import parse_config

MB = 1e6
STAR_ALPHA = (2 * 1.0 + 2 * 5.0) * US  # GPU -> host -> switch -> host -> GPU: intra-host 1 us, links 5 us


def ring_allreduce(p: int, n: float) -> float:
    """Ring all-reduce of n bytes over p ranks of the test star (25 Gbit/s NICs)."""
    return 2 * (p - 1) * STAR_ALPHA + 2 * (p - 1) / p * n / (25 * GBPS)


def _buckets(overlap: bool, iterations: int = 2) -> dict[str, Any]:
    """Ten 10 MB buckets over 100 ms of compute on 8 ranks."""
    cfg = synthetic(star(8), [{"name": "ring"}], 100, compute_ms=100.0, bucket_mb=10, layers=10, iterations=iterations)
    cfg["workload"]["overlap_backward"] = overlap
    return cfg


def _mean_iteration_s(cfg: dict[str, Any]) -> float:
    result = simulate(cfg)
    assert not result.errors, result.errors
    return float(result.summary["mean_iteration_s"].iloc[0])


def test_overlapped_buckets_hide_all_but_the_last() -> None:
    allreduce = ring_allreduce(8, 10 * MB)
    assert allreduce < 0.100 * (2 / 3) / 10  # each all-reduce ends before backward closes the next bucket
    assert _mean_iteration_s(_buckets(True)) == pytest.approx(0.100 + allreduce, rel=0.01)


def test_without_overlap_every_bucket_follows_backward() -> None:
    # nothing starts before backward ends; the ring runs the ten buckets one after another
    assert _mean_iteration_s(_buckets(False)) == pytest.approx(0.100 + 10 * ring_allreduce(8, 10 * MB), rel=0.01)


def test_without_overlap_one_bucket_costs_the_same() -> None:
    # one bucket closes when backward ends anyway: holding it back changes nothing
    one = synthetic(star(4), [{"name": "ring"}], 50, compute_ms=30.0, iterations=2)
    held = {**one, "workload": {**one["workload"], "overlap_backward": False}}
    assert _mean_iteration_s(held) == pytest.approx(_mean_iteration_s(one), rel=1e-12)
    assert _mean_iteration_s(one) == pytest.approx(0.030 + ring_allreduce(4, 50 * MB), rel=0.01)


def _accumulating(policy: str, steps: int, optimizer_ms: float, iterations: int) -> dict[str, Any]:
    cfg = synthetic(star(2), [{"name": policy}], 20, compute_ms=40.0, iterations=iterations)
    cfg["workload"].update(accumulation_steps=steps, optimizer_ms=optimizer_ms)
    return cfg


def test_optimizer_step_ends_every_kth_iteration() -> None:
    result = simulate(_accumulating("no_sync", 4, 10.0, 8))
    it = result.iterations
    # iterations 3 and 7 (0-based) end with the 10 ms optimizer step, counted as compute
    for step, seconds in enumerate([0.040, 0.040, 0.040, 0.050] * 2):
        rows = it[it["iteration"] == step]
        assert rows["iteration_s"].to_numpy() == pytest.approx([seconds] * 2, rel=1e-12), step
        assert rows["compute_s"].to_numpy() == pytest.approx([seconds] * 2, rel=1e-12), step
    # each rank's 8 iterations: 8 micro-batches of 40 ms and 2 optimizer steps of 10 ms
    assert float(it["iteration_s"].sum()) / 2 == pytest.approx(8 * 0.040 + 2 * 0.010, rel=1e-12)


def test_every_micro_batch_communicates_and_the_step_follows_the_last() -> None:
    allreduce = ring_allreduce(2, 20 * MB)
    it = simulate(_accumulating("ring", 2, 5.0, 4)).iterations
    step_s = it.groupby("iteration")["iteration_s"].mean().to_numpy()
    micro = 0.040 + allreduce
    assert step_s == pytest.approx([micro, micro + 0.005, micro, micro + 0.005], rel=0.01)


def test_under_no_sync_only_the_last_micro_batch_communicates() -> None:
    allreduce = ring_allreduce(2, 20 * MB)
    cfg = _accumulating("ring", 4, 5.0, 8)
    cfg["workload"]["accumulation_sync"] = "last"
    result = simulate(cfg)
    step_s = result.iterations.groupby("iteration")["iteration_s"].mean().to_numpy()
    last = 0.040 + allreduce + 0.005
    assert step_s == pytest.approx([0.040, 0.040, 0.040, last] * 2, rel=0.01)
    ops = result.ops
    assert sorted(set(ops.loc[ops["kind"] == "AllReduce", "step"])) == [3, 7]  # one all-reduce per optimizer step


def test_fsdp_under_no_sync_still_gathers_on_every_micro_batch() -> None:
    cfg = _accumulating("fsdp", 2, 5.0, 4)
    cfg["workload"]["accumulation_sync"] = "last"
    ops = simulate(cfg).ops
    gathers = ops.loc[ops["kind"] == "AllGather", "step"].value_counts().sort_index()
    scatters = ops.loc[ops["kind"] == "ReduceScatter", "step"].value_counts().sort_index()
    assert list(gathers.index) == [0, 1, 2, 3] and set(gathers) == {2}  # before forward and before backward
    assert list(scatters.index) == [1, 3]


def test_a_slow_worker_is_slow_at_the_optimizer_step_too() -> None:
    cfg = _accumulating("no_sync", 1, 10.0, 2)
    cfg["faults"] = {"slow_workers": [{"ranks": [1], "compute_factor": 2.0}]}
    it = simulate(cfg).iterations
    assert it[it["rank"] == 1]["compute_s"].to_numpy() == pytest.approx([0.100, 0.100], rel=1e-12)
    assert it[it["rank"] == 0]["compute_s"].to_numpy() == pytest.approx([0.050, 0.050], rel=1e-12)


@pytest.mark.parametrize(
    "workload, message",
    [
        ({"accumulation_steps": 0}, "accumulation_steps"),
        ({"accumulation_steps": 2**20}, "accumulation_steps"),
        ({"accumulation_steps": 2.0}, "accumulation_steps"),
        ({"optimizer_ms": -1.0}, "optimizer_ms"),
        ({"overlap_backward": "no"}, "overlap_backward"),
        ({"accumulation_steps": 4}, "accumulation_steps: 4 needs optimizer_ms > 0"),  # it would change nothing
    ],
)
def test_bad_settings_name_the_field(workload: dict[str, Any], message: str) -> None:
    cfg = synthetic(star(2), [{"name": "ring"}], 10, compute_ms=10.0)
    cfg["workload"].update(workload)
    with pytest.raises(Exception, match=message):
        parse_config(cfg)
