"""Asynchronous policies out of step: lockstep is what noiseless simulation gives, the ensemble
takes the workers out of it, and no seed beats the links' capacity."""

from __future__ import annotations

import pytest

from sim.config import parse_config
from sim.experiments.ensemble import asynchronous_policies, decorrelated

MB = 1e6
NIC_GBPS, UPLINK_GBPS, GRADIENT_MB, COMPUTE_MS, BATCH = 0.2, 0.1, 1.2, 5.0, 16


def two_racks() -> dict:
    """2 racks x 2 hosts, 2:1 uplinks, ASP with a shard in each rack (docs/validation.md's 2x2), on
    the ideal network."""
    return {
        "seed": 0,
        "iterations": 30,
        "cluster": {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "nic_gbps": NIC_GBPS,
                    "uplink_gbps": UPLINK_GBPS, "link_latency_us": 50},
        "workload": {"model": "synthetic", "gradient_mb": GRADIENT_MB, "compute_ms": COMPUTE_MS,
                     "synthetic_layers": 2, "bucket_mb": 0.6, "batch_size": BATCH},
        "policies": [{"name": "ring"}, {"name": "asp", "hosts": ["h0", "h2"]}],
        "simulation": {"network_model": "ideal"},  # links at their line rate, as the arithmetic below
    }  # fmt: skip


def uplink_round_s() -> float:
    """Seconds an uplink direction needs per iteration of every worker: rack 0's uplink carries out
    its 2 workers' pushes to h2's shard and h0's replies to rack 1's 2 workers, half a gradient each
    (and the mirror image in), so 4 half-gradients each way."""
    return 4 * (GRADIENT_MB * MB / 2) * 8 / (UPLINK_GBPS * 1e9)


def test_only_asynchronous_policies_are_ensembled() -> None:
    assert asynchronous_policies(parse_config(two_racks())) == ["asp"]


def test_without_noise_every_seed_is_the_same_lockstep_at_the_uplinks_capacity() -> None:
    runs = decorrelated(parse_config(two_racks()), ["asp"], seeds=3, jitter=0.0, warmup=3)
    assert len(runs) == 3 and list(runs["seed"]) == [0, 1, 2]
    assert runs["throughput_samples_s"].nunique() == 1  # the seed only seeds jitter: none here
    # in step, the uplinks are the bottleneck every iteration: 4 workers x BATCH per uplink round + compute
    lockstep = 4 * BATCH / (uplink_round_s() + COMPUTE_MS / 1e3)
    assert runs["throughput_samples_s"].iloc[0] == pytest.approx(lockstep, rel=0.03)


def test_out_of_step_seeds_differ_stay_under_capacity_and_repeat_exactly() -> None:
    config = parse_config(two_racks())
    runs = decorrelated(config, ["asp"], seeds=5, warmup=3)
    throughput = runs["throughput_samples_s"]
    assert throughput.max() / throughput.min() > 1.02  # each seed settles in its own steady state
    capacity = 4 * BATCH / uplink_round_s()  # both uplink directions busy all the time: no faster
    assert throughput.max() <= capacity * 1.001
    assert throughput.median() < 0.97 * capacity  # out of step, transfers do not interleave perfectly
    assert runs.equals(decorrelated(config, ["asp"], seeds=5, warmup=3))


def test_bad_arguments_name_the_field() -> None:
    config = parse_config(two_racks())
    with pytest.raises(ValueError, match="policies.*allowed"):
        decorrelated(config, ["nope"])
    with pytest.raises(ValueError, match="seeds"):
        decorrelated(config, ["asp"], seeds=0)
