"""Diagnostics: link utilisation over time, per-link totals, the compute/comm/wait breakdown, trace."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import GBPS, star, synthetic, two_tier

from sim.api import simulate

MB = 1e6


def busy_config() -> dict:
    """Two racks at 2:1 with background on every uplink and an on/off host flow: contended links."""
    cfg = synthetic(
        two_tier(2, 4, 50.0),
        [{"name": "ring"}, {"name": "ds_sync"}, {"name": "ps"}],
        80,
        compute_ms=40.0,
        iterations=6,
        bucket_mb=10,
        layers=8,
        jitter=0.05,
    )
    cfg["background"] = [
        {"uplinks": "all", "fraction": 0.3},
        {"hosts": ["h1", "h6"], "gbps": 8, "on_s": 0.05, "off_s": 0.05},
    ]
    return cfg


def test_no_link_is_ever_over_capacity() -> None:
    result = simulate(busy_config())
    assert (result.utilization["utilization"] <= 1 + 1e-9).all()
    assert (result.links["peak_utilization"] <= 1 + 1e-9).all()
    assert (result.utilization["utilization"] >= -1e-12).all()


def test_utilisation_samples_add_up_to_the_bytes_carried() -> None:
    result = simulate(busy_config())
    for (policy, link), series in result.utilization.groupby(["policy", "link"]):
        times = np.concatenate([[0.0], series["time_s"].to_numpy()])
        row = result.links[(result.links["policy"] == policy) & (result.links["link"] == link)].iloc[0]
        carried = (series["utilization"].to_numpy() * np.diff(times)).sum() * row["capacity_gbps"] * GBPS
        assert carried == pytest.approx(row["bytes"], rel=1e-6, abs=1.0)


def test_background_keeps_uplinks_at_least_as_busy_as_its_cap() -> None:
    util = simulate(busy_config()).utilization
    uplinks = util[util["kind"] == "uplink"]
    assert uplinks["utilization"].min() >= 0.3 - 1e-9  # 30% of each uplink is always taken


def test_sampler_keeps_an_even_grid_within_its_budget() -> None:
    cfg = synthetic(star(2), [{"name": "ring"}], 10, compute_ms=50.0, iterations=40)
    cfg["simulation"].update(utilization_samples=16, utilization_interval_ms=1.0)
    util = simulate(cfg).utilization
    times = np.sort(util["time_s"].unique())
    assert 8 <= len(times) <= 17
    gaps = np.diff(times)
    assert np.allclose(gaps[:-1], gaps[0])  # even, but for the last (partial) interval
    doublings = np.log2(gaps[0] / 0.001)  # the first interval, doubled a whole number of times
    assert doublings == pytest.approx(round(doublings), abs=1e-9)


def test_a_saturated_uplink_reads_full_while_the_ring_crosses_it() -> None:
    """A communication-bound ring on 16:1: the uplink is the ring's bottleneck, busy most of the run."""
    cfg = synthetic(two_tier(2, 4, 6.25), [{"name": "ring"}], 200, compute_ms=10.0, iterations=3)
    links = simulate(cfg).links.set_index("link")
    assert links.loc["tor0->core0", "peak_utilization"] == pytest.approx(1.0, rel=1e-6)
    assert links.loc["tor0->core0", "mean_utilization"] > 0.9


def test_wait_is_time_blocked_on_others() -> None:
    """PS-BSP, one of four workers 2x slower: fast workers wait for it on every read, the slow one
    waits for nobody. Compute + comm + wait = iteration."""
    cfg = synthetic(
        star(4, server_hosts=1), [{"name": "ps", "placement": "dedicated"}], 1, compute_ms=20.0, iterations=6
    )
    cfg["faults"] = {"slow_workers": [{"ranks": [2], "compute_factor": 2.0}]}
    it = simulate(cfg).iterations
    steady = it[it["iteration"] > 0]
    assert (it["compute_s"] + it["comm_s"] + it["wait_s"]).to_numpy() == pytest.approx(it["iteration_s"].to_numpy())
    fast, slow = steady[steady["rank"] != 2], steady[steady["rank"] == 2]
    # the slow worker's extra 20 ms of compute, less the head start its lone push gets: the three fast
    # workers push 1 MB each to the server together (3 MB at 25 Gbps), the slow one alone (1 MB)
    head_start = 3 * MB / (25 * GBPS) - 1 * MB / (25 * GBPS)
    assert fast["wait_s"].to_numpy() == pytest.approx(0.020 - head_start, rel=1e-6)
    assert slow["wait_s"].to_numpy() == pytest.approx(0.0, abs=1e-6)


def test_trace_shows_faults_waits_and_utilisation(tmp_path: Path) -> None:
    cfg = busy_config()
    cfg["faults"] = {"stragglers": [{"ranks": [1], "delay_ms": 5, "start_s": 0.05, "duration_s": 0.1}]}
    cfg["simulation"]["trace"] = True
    simulate(cfg).write(tmp_path, plot=True)
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert "link utilisation" in names and "sync" in names
    assert any(n.startswith("straggler: ranks 1 delay_ms=5") for n in names)
    assert any(n.startswith("background: hosts h1 h6") for n in names)
    for name in ("utilization.png", "comparison.png", "faults.csv", "links.csv"):
        assert (tmp_path / name).stat().st_size > 0
