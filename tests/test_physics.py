"""The simulator against closed-form alpha-beta costs (docs/physics.md) on uncontended networks.

The formulas here are written independently of the engine: alpha is the latency of one hop-by-hop
path (summed link latencies), B the bottleneck bandwidth a flow can get. Each case runs a synthetic
workload with zero compute and one bucket, so one iteration is exactly one gradient exchange.
"""

from __future__ import annotations

import pytest
from helpers import GBPS, US, star, synthetic, two_tier

from sim.api import simulate
from sim.catalog.gpus import get_gpu

MB = 1e6
LINK_US = 5.0  # every config here uses link_latency_us: 5
INTRA_US = 1.0  # default intra_host_latency_us
MODELS = ["pipelined", "stepwise"]


def iteration_time(config: dict) -> float:
    result = simulate(config)
    assert not result.errors, result.errors
    return float(result.summary["mean_iteration_s"].iloc[0])


def second_iteration_time(config: dict) -> float:
    """A PS worker reads during forward what the previous step pushed: step 1 holds a read phase
    (forward) and a push phase (backward); step 0 has nothing to read yet."""
    config = {**config, "iterations": 2}
    result = simulate(config)
    assert not result.errors, result.errors
    it = result.iterations
    return float(it[it["iteration"] == 1]["iteration_s"].mean())


def ring_allreduce(p: int, n: float, alpha: float, bandwidth: float) -> float:
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth


def ring_phase(p: int, n: float, alpha: float, bandwidth: float) -> float:
    """Reduce-scatter or all-gather of an n-byte tensor."""
    return (p - 1) * alpha + (p - 1) / p * n / bandwidth


# GPU -> host -> switch -> host -> GPU on a star
STAR_ALPHA = (2 * INTRA_US + 2 * LINK_US) * US


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("p", [2, 4, 16, 64])
@pytest.mark.parametrize("mb", [1, 10, 100, 1000])
def test_ring_allreduce_matches_closed_form(p: int, mb: float, model: str) -> None:
    if model == "stepwise" and p == 64 and mb < 1000:
        pytest.skip("the stepwise 64-rank ring costs the same for every size; one size is enough")
    t = iteration_time(synthetic(star(p), [{"name": "ring"}], mb, model=model))
    assert t == pytest.approx(ring_allreduce(p, mb * MB, STAR_ALPHA, 25 * GBPS), rel=0.01)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    "p, k, server_gbps",
    [(8, 2, 25.0), (8, 8, 25.0), (16, 4, 100.0), (4, 1, 10.0), (12, 3, 40.0)],
)
@pytest.mark.parametrize("mb", [100, 0.01])
def test_ps_dedicated_matches_closed_form(p: int, k: int, server_gbps: float, model: str, mb: float) -> None:
    """p workers push n/k to each of k dedicated servers, then pull it back: per phase
    max(n/B_worker, p*n/(k*B_server)); alpha is GPU -> host -> switch -> server. Exact (docs/physics.md);
    at 10 kB the 11 us of alpha are most of a phase."""
    n = mb * MB
    cluster = star(p, server_hosts=k, server_nic_gbps=server_gbps)
    t = second_iteration_time(synthetic(cluster, [{"name": "ps", "placement": "dedicated"}], mb, model=model))
    alpha = (INTRA_US + 2 * LINK_US) * US
    phase = max(n / (25 * GBPS), p * n / (k * server_gbps * GBPS))
    assert t == pytest.approx(2 * (alpha + phase), rel=1e-9)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("p", [2, 4, 8, 16])
@pytest.mark.parametrize("mb", [100, 0.01])
def test_ps_colocated_matches_closed_form(p: int, model: str, mb: float) -> None:
    """One shard per host (k = p): each NIC sends (p-1)/p of n out and receives as much, per phase.
    Exact; at 10 kB the path latency is most of a phase."""
    n = mb * MB
    t = second_iteration_time(synthetic(star(p), [{"name": "ps"}], mb, model=model))
    alpha = (INTRA_US + 2 * LINK_US) * US
    assert t == pytest.approx(2 * (alpha + (p - 1) / p * n / (25 * GBPS)), rel=1e-9)


def test_ps_apply_time_adds_once_per_round() -> None:
    """The shard applies the round's sum before answering the next step's reads."""
    n = 100 * MB
    cluster = star(4, server_hosts=1)
    base = second_iteration_time(synthetic(cluster, [{"name": "ps", "placement": "dedicated"}], 100))
    slow = second_iteration_time(
        synthetic(cluster, [{"name": "ps", "placement": "dedicated", "apply_ms_per_mb": 0.5}], 100)
    )
    assert slow - base == pytest.approx(0.5e-3 * n / MB, rel=1e-6)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    "racks, hosts, uplink_gbps", [(4, 4, 100.0), (4, 4, 25.0), (4, 4, 6.25), (2, 8, 50.0), (8, 2, 12.5)]
)
def test_hierarchical_rack_level_matches_closed_form(racks: int, hosts: int, uplink_gbps: float, model: str) -> None:
    """Reduce-scatter among a rack's g hosts, g parallel cross-rack rings of m = racks members on n/g
    bytes each (the g rings share every uplink: a flow gets min(B, U/g)), all-gather in the rack."""
    n, g, m = 100 * MB, hosts, racks
    cfg = synthetic(two_tier(racks, hosts, uplink_gbps), [{"name": "hierarchical", "level": "rack"}], 100, model=model)
    local_alpha = (2 * INTRA_US + 2 * LINK_US) * US  # GPU-host-ToR-host-GPU
    cross_alpha = (2 * INTRA_US + 4 * LINK_US) * US  # ... through the core
    nic, uplink = 25 * GBPS, uplink_gbps * GBPS
    expected = 2 * ring_phase(g, n, local_alpha, nic) + ring_allreduce(m, n / g, cross_alpha, min(nic, uplink / g))
    assert iteration_time(cfg) == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("hosts, gpus", [(4, 8), (8, 4), (2, 2)])
def test_hierarchical_host_level_matches_closed_form(hosts: int, gpus: int, model: str) -> None:
    """Reduce-scatter over NVLink inside a host, g cross-host rings sharing the host NIC (each gets
    B_nic/g), all-gather over NVLink."""
    n = 100 * MB
    cfg = synthetic(
        star(hosts, 100.0, gpus_per_host=gpus), [{"name": "hierarchical", "level": "host"}], 100, model=model
    )
    nvlink = get_gpu("V100").intra_host_gbps * GBPS
    intra_alpha = 2 * INTRA_US * US
    expected = 2 * ring_phase(gpus, n, intra_alpha, nvlink) + ring_allreduce(
        hosts, n / gpus, STAR_ALPHA, min(nvlink, 100 * GBPS / gpus)
    )
    assert iteration_time(cfg) == pytest.approx(expected, rel=0.01)


def test_no_sync_is_compute_only() -> None:
    cfg = synthetic(star(4), [{"name": "no_sync"}], 100, compute_ms=40.0, iterations=3)
    assert iteration_time(cfg) == pytest.approx(0.040, rel=1e-9)


def test_bucketed_ring_overlaps_backward() -> None:
    """Ten 10 MB buckets, 100 ms of compute: all but the last bucket's all-reduce hides behind
    backward when each all-reduce is shorter than the backward slice that produces the next bucket."""
    p, n_bucket = 8, 10 * MB
    cfg = synthetic(star(p), [{"name": "ring"}], 100, compute_ms=100.0, bucket_mb=10, layers=10)
    allreduce = ring_allreduce(p, n_bucket, STAR_ALPHA, 25 * GBPS)
    backward_slice = 0.100 * (2 / 3) / 10
    assert allreduce < backward_slice  # precondition of the closed form below
    assert iteration_time(cfg) == pytest.approx(0.100 + allreduce, rel=0.01)
