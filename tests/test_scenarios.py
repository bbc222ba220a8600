"""DS-Sync's scenarios (docs/scenarios.md): each ratio predicted by bottleneck arithmetic, then simulated.

The bundled dssync_* configs (16 V100 workers, 25 Gbps NICs, 4 racks, BERT-large) run with compute
jitter off, so a step of each policy is exactly what `predict.py` computes from the closed forms.
Time per step is the run's makespan over its iterations: the rate at which steps complete.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from predict import ALPHA_CROSS, GBPS, ds_sync_cycle, hierarchical_step, ring, ring_step

from sim.api import prepare, simulate
from sim.config import parse_config

CONFIGS = Path(__file__).parent.parent / "configs"
NIC = 25 * GBPS
STEPS = 6  # local, mixing, local, mixing, local, mixing


def run(name: str, **changes: object):  # type: ignore[no-untyped-def]
    """A bundled config with `changes` to its top-level keys, validated as a user's file would be, on
    the ideal network (the closed forms')."""
    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    data.update(iterations=STEPS, **changes)
    data["workload"]["compute_jitter"] = 0.0
    data.setdefault("simulation", {})["network_model"] = "ideal"  # the closed forms' network
    cfg = parse_config(data)
    result = simulate(cfg)
    assert not result.errors, result.errors
    per_step = {
        label: (rows["end_s"].max() - rows["start_s"].min()) / STEPS
        for label, rows in result.iterations.groupby("policy")
    }
    return per_step, prepare(cfg)[1], result


def share(uplink_gbps: float, flows: int, background: float = 0.0) -> float:
    """Max-min rate of each of `flows` training flows on an uplink direction that also carries a
    background flow capped at `background` x uplink (and nothing above one NIC)."""
    uplink = uplink_gbps * GBPS
    cap = background * uplink
    fair = uplink / (flows + (1 if background else 0))
    rate = fair if cap >= fair else (uplink - cap) / flows  # a cap below the fair share frees the rest
    return min(NIC, rate)


def predicted(plan, uplink_gbps: float, ring_flows_per_uplink: int, background: float = 0.0) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Per-step predictions: a packed ring puts 1 flow on each uplink direction (scattered: 4),
    hierarchical's 4 cross-rack rings 4, a DS-Sync mixing step 1."""
    local, mixing = ds_sync_cycle(plan, 4, NIC, share(uplink_gbps, 1, background))
    return {
        "ring": ring_step(plan, 16, share(uplink_gbps, ring_flows_per_uplink, background)),
        "hierarchical": hierarchical_step(plan, 4, 4, NIC, share(uplink_gbps, 4, background)),
        "ds_sync": (local + mixing) / 2,
    }


def assert_predicted(simulated: dict[str, float], prediction: dict[str, float]) -> None:
    for label, value in prediction.items():
        assert simulated[label] == pytest.approx(value, rel=0.01), label


def test_static_bottleneck_16to1() -> None:
    """Packed ranks, 6.25 Gbps uplinks: ring and hierarchical push cross-rack bytes through them every
    step; DS-Sync only in its mixing steps, one flow per uplink. Predicted DS-Sync/ring = 0.397."""
    sim, plan, _ = run("dssync_16to1_packed")
    pred = predicted(plan, 6.25, ring_flows_per_uplink=1)
    assert_predicted(sim, pred)
    assert pred["ds_sync"] / pred["ring"] == pytest.approx(0.397, abs=0.001)
    assert sim["ds_sync"] <= 0.6 * sim["ring"]
    assert sim["ds_sync"] <= sim["hierarchical"]


def test_scattered_placement_4to1() -> None:
    """Scattered ranks: every ring neighbour sits in the next rack, so four ring flows share each
    25 Gbps uplink (6.25 Gbps each, like packed at 16:1). DS-Sync's groups follow the physical racks,
    so it is unaffected. Predicted DS-Sync/ring = 0.230."""
    sim, plan, _ = run("dssync_4to1_scattered")
    pred = predicted(plan, 25, ring_flows_per_uplink=4)
    assert_predicted(sim, pred)
    assert pred["ds_sync"] / pred["ring"] == pytest.approx(0.230, abs=0.001)
    assert sim["ds_sync"] <= 0.5 * sim["ring"]


def test_packed_ring_is_not_slowed_by_4to1_uplinks() -> None:
    """Packed, a ring puts one flow on each uplink direction: at 4:1 (uplink = one NIC) it runs as if
    the racks were non-blocking."""
    four, _, _ = run("dssync_4to1_packed")
    cluster = yaml.safe_load((CONFIGS / "dssync_4to1_packed.yaml").read_text())["cluster"]
    one, _, _ = run("dssync_4to1_packed", cluster={**cluster, "uplink_gbps": 100.0})
    assert four["ring"] == pytest.approx(one["ring"], rel=1e-9)


def test_background_taking_half_of_each_uplink() -> None:
    """Other jobs cap-limited to half of every uplink (both directions), 4:1 packed: max-min gives each
    ring flow crossing an uplink the other half, 12.5 Gbps instead of 25, so every ring all-reduce
    takes 2(p-1)a + 2(p-1)/p n/12.5 Gbps. Hierarchical's four flows per uplink share it with the
    background five ways (5 Gbps each: the cap does not bind). DS-Sync only crosses uplinks in mixing
    steps, with one flow per uplink: 12.5 Gbps."""
    base, plan, _ = run("dssync_4to1_packed")
    busy, _, result = run("dssync_4to1_packed", background=[{"uplinks": "all", "fraction": 0.5}])
    ops = result.ops[(result.ops["policy"] == "ring") & (result.ops["kind"] == "AllReduce")]
    expected = [ring(16, nbytes, ALPHA_CROSS, 12.5 * GBPS) for nbytes in ops["nbytes"]]
    assert ops["duration_s"].to_numpy() == pytest.approx(expected, rel=0.02)
    pred = predicted(plan, 25, ring_flows_per_uplink=1, background=0.5)
    assert_predicted(busy, pred)
    assert busy["ds_sync"] / base["ds_sync"] < busy["ring"] / base["ring"]


def test_ds_sync_is_no_slower_than_ring_on_a_star() -> None:
    """No bottleneck, one island: DS-Sync's auto group is everyone, averaged bucket by bucket."""
    star = {"topology": "star", "hosts": 16, "nic_gbps": 25}
    sim, _, _ = run("dssync_4to1_packed", cluster=star, policies=[{"name": "ring"}, {"name": "ds_sync"}])
    assert sim["ds_sync"] <= sim["ring"] * (1 + 1e-9)


def test_ds_sync_crosses_racks_only_when_mixing() -> None:
    """Each mixing step, every rack's ambassador sends one model's worth (2-rank all-reduce: M) up
    its uplink; local steps send nothing. Six steps hold three mixing steps."""
    _, plan, result = run("dssync_16to1_packed")
    links = result.links[(result.links["policy"] == "ds_sync") & (result.links["kind"] == "uplink")]
    up = links[links["link"].str.startswith("tor")]["bytes"].sum()
    assert up == pytest.approx(3 * 4 * plan.gradient_bytes, rel=1e-6)
