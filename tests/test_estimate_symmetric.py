"""The cost estimate of host-symmetric runs (`sim.estimate.symmetric`): it counts one host's workers where the
engine simulates one host, and every rank where it does not."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import star, synthetic, two_tier

from sim.api import simulate
from sim.config import parse_config
from sim.estimate.cost import estimate

POWERSGD = {"name": "powersgd", "rank": 2, "warmup_steps": 1}
HYBRID = {"name": "fsdp", "strategy": "hybrid", "shard_group": "host"}


def job(racks: int, policy: str | dict[str, Any] = "ring", jitter: float = 0.0, **cluster: Any) -> dict[str, Any]:
    """`racks` racks of 2 hosts of 4 GPUs, 3 buckets, 3 iterations, 10 ms of compute."""
    data = synthetic(
        two_tier(racks, 2, 100.0, gpus_per_host=4, **cluster),
        [{"name": policy} if isinstance(policy, str) else policy],
        30.0,
        compute_ms=10,
        iterations=3,
        jitter=jitter,
        bucket_mb=10.0,
        layers=3,
    )
    return data


def events(data: dict[str, Any]) -> float:
    return estimate(parse_config(data)).events


ONE_HOST = ["ring", "hierarchical", "fsdp", HYBRID, POWERSGD]
IDS = ["ring", "hierarchical", "fsdp", "fsdp_hybrid_host", "powersgd"]


@pytest.mark.parametrize("policy", ONE_HOST, ids=IDS)
def test_a_symmetric_runs_events_follow_one_host_not_the_world(policy: str | dict[str, Any]) -> None:
    """64x the ranks: the one host simulated runs the same program; its collectives still launch once each
    (they hold every rank's sub-flows, which cost build time, not events)."""
    small, large = events(job(2, policy)), events(job(128, policy))
    assert large / small < 2.0, (small, large)


def test_a_jittered_run_counts_every_rank() -> None:
    """Jitter makes ranks differ: the engine runs them all, and so does the estimate (events grow with ranks)."""
    small, large = events(job(2, jitter=0.05)), events(job(128, jitter=0.05))
    assert large / small > 32.0, (small, large)
    assert events(job(128, jitter=0.05)) > 20 * events(job(128))


CASES = {
    "ring": job(4),
    "hierarchical": job(4, "hierarchical"),
    "hierarchical_at_rack_level": {**job(4), "policies": [{"name": "hierarchical", "level": "rack"}]},
    "ps": job(4, "ps"),
    "fsdp": job(4, "fsdp"),
    "fsdp_hybrid_host": job(4, HYBRID),
    "fsdp_hybrid_rack": job(4, {**HYBRID, "shard_group": "rack"}),
    "powersgd": job(4, POWERSGD),
    "jitter": job(4, jitter=0.05),
    "scattered": job(4, placement="scattered"),
    "symmetry_off": {**job(4), "simulation": {**job(4)["simulation"], "host_symmetry": "off"}},
    "one_gpu_a_host_star": synthetic(star(8), [{"name": "ring"}], 30.0, compute_ms=10, iterations=2),
    "one_host": synthetic(star(1, gpus_per_host=8), [{"name": "ring"}], 30.0, compute_ms=10, iterations=2),
    "fat_tree": synthetic({"topology": "fat_tree", "pods": 2, "racks_per_pod": 2, "hosts_per_rack": 2,
                           "gpus_per_host": 2}, [{"name": "ring"}], 30.0, compute_ms=10, iterations=2),
    "rail_optimized_hierarchical": synthetic(
        {"topology": "rail_optimized", "rail_groups": 2, "hosts_per_group": 2, "gpus_per_host": 4,
         "nics_per_host": 2}, [{"name": "hierarchical"}], 30.0, compute_ms=10, iterations=2),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_estimate_discounts_exactly_the_runs_the_engine_runs_on_one_host(case: str) -> None:
    """The estimate decides from the config alone; the engine from the built cluster (decisions.csv)."""
    config = parse_config(CASES[case])
    result = simulate(config)
    assert not result.errors
    decided = result.decisions.set_index("setting").loc["simulation.host_symmetry", "value"]
    noted = "host symmetry: 1 of" in estimate(config).policies[0].note
    assert noted == (decided == "one host"), (case, decided, estimate(config).policies[0].note)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse_buckets"])
@pytest.mark.parametrize("policy", ONE_HOST, ids=IDS)
def test_one_host_counts_are_near_what_the_engine_runs(policy: str | dict[str, Any], sparse: bool) -> None:
    """Events within the estimate's factor of 3 of the one-host run's; flows (coupled transfers) as run. A
    sparse bucket is all-reduced whole by these policies, on one host like the others."""
    data = job(16, policy)
    if sparse:
        data["workload"]["sparsity"] = {"topk": 0.01}
    config = parse_config(data)
    run = simulate(config).runs[0]
    row = estimate(config).policies[0]
    assert 1 / 3 <= row.events / run.events <= 3, (row.events, run.events)
    assert row.flows == pytest.approx(run.flows, rel=0.01)
