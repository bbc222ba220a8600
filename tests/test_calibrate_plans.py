"""Calibration keeps every policy's plan (real/calibrate/plans.py), and the dry-run plans it compares
(sim/engine/policy_plans.py) are the ops the simulator issues.

The acceptance test calibrates configs/real_2x2_digits.yaml from what a loopback calibration of it
measured (`syncsim calibrate` on this project's machine, whose raw rows are LOOPBACK below): it runs
the fit and the writer exactly as a calibrating rank does (real/calibrate/session.py), skipping only
the multi-process measurement (about 45 s), and compares every policy's plan before and after.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from policies.base import Policy
from policies.ds_sync import DSSync
from policies.registry import create
from real.calibrate import fit_report, write_calibrated_config
from real.calibrate.export import calibrated_cluster
from real.calibrate.plans import keep_plans
from real.calibrate.rows import CollectiveSample, ComputeSample, Measurements, PairSample, UplinkSample
from sim.api import simulate
from sim.cluster.topology import build_cluster
from sim.config import load_config
from sim.engine.policy_plans import policy_plans

REAL_2X2 = Path(__file__).parent.parent / "configs" / "real_2x2_digits.yaml"

# the raw rows `syncsim calibrate configs/real_2x2_digits.yaml` wrote on loopback (the .csv files
# beside the calibrated config): both "racks" on one machine, so no oversubscription is measured
LOOPBACK = {
    PairSample: """src_host,dst_host,nbytes,seconds,round_trip_s
h0,h1,8,5.49615e-05,0.000109923
h0,h1,1024,0.00205726,0.00411453
h0,h1,16384,0.00194950,0.00389901
h0,h1,2097152,0.00225753,0.00451505
h0,h1,8388608,0.00333313,0.00666626
h0,h1,33554432,0.0249032,0.0498064
h1,h0,8,0.00200802,0.00401604
h1,h0,1024,0.00210353,0.00420706
h1,h0,16384,0.00277451,0.00554902
h1,h0,2097152,0.00151766,0.00303533
h1,h0,8388608,0.00328861,0.00657721
h1,h0,33554432,0.0360657,0.0721314""",
    UplinkSample: """rack,senders,receivers,nbytes,seconds
rack0,1,1,33554432,0.0157521
rack1,1,1,33554432,0.0125473""",
    CollectiveSample: """op,ranks,nbytes,seconds
all_reduce,4,4096,0.0197827
all_reduce,4,65536,0.00937657
all_reduce,4,2097152,0.00992448
all_reduce,4,8388608,0.0240936
all_reduce,4,33554432,0.0853000""",
    ComputeSample: """rank,batch,seconds,jitter
0,16,0.00138023,0.0
1,16,0.00129153,0.0
2,16,0.00131305,0.0
3,16,0.00132012,0.0""",
}


def _rows(kind: type) -> tuple[Any, ...]:
    """LOOPBACK's rows of one kind, each value in its field's type."""
    types = {f.name: {"str": str, "int": int, "float": float}[str(f.type)] for f in fields(kind)}
    return tuple(
        kind(**{k: types[k](v) for k, v in row.items()}) for row in csv.DictReader(io.StringIO(LOOPBACK[kind]))
    )


def loopback_measurements() -> Measurements:
    """What a loopback calibration of real_2x2_digits measures (2 hosts of 2 ranks, a rack each)."""
    return Measurements(
        rank_hosts=("h0", "h0", "h1", "h1"),
        host_racks={"h0": "rack0", "h1": "rack1"},
        pairs=_rows(PairSample),
        uplinks=_rows(UplinkSample),
        collectives=_rows(CollectiveSample),
        computes=_rows(ComputeSample),
        gradient_bytes=19240,  # the digits MLP 64-64-10: 4810 float32 parameters
        batch=16,
    )


def test_calibrating_the_bundled_real_config_on_loopback_keeps_every_policys_plan(tmp_path: Path) -> None:
    base = load_config(REAL_2X2)
    report = fit_report(loopback_measurements(), fold_efficiency=False)  # as real/calibrate/session.py fits
    assert "uplink_gbps" not in report.cluster  # the premise: loopback measures no oversubscription
    notes: list[str] = []
    path = write_calibrated_config(report, base, tmp_path / "calibrated.yaml", echo=notes.append)
    calibrated = load_config(path)

    before, after = policy_plans(base), policy_plans(calibrated)
    assert [p.label for p in after] == ["ring", "hierarchical", "ds_sync", "ps", "sync_switch"]
    for b, a in zip(before, after):
        assert a == b, f"{b.label}: {a.describe()} (real run: {b.describe()})"
    assert Counter(dict(after[2].counts())) == Counter({("all_reduce", 2): 180})  # 30 steps, 4 buckets
    # the measured figures are in, the base's structure kept
    assert calibrated.cluster.nic_gbps == report.cluster["nic_gbps"]
    assert calibrated.cluster.uplink_gbps is None and calibrated.cluster.racks == 2
    assert calibrated.workload.gradient_mb == pytest.approx(0.01924)
    # each pin says so, naming what the measured figures would have planned
    assert len(notes) == 2, notes
    assert (
        notes[0].startswith("plan kept: workload.bucket_mb 0.05 -> ")
        and "1 bucket(s) where the real run cuts 4" in notes[0]
    )
    assert notes[1].startswith(
        "plan kept: policies[2] (ds_sync): the measured figures would plan 4 buckets: 120 all_reduce of 4 ranks "
        "instead of 4 buckets: 180 all_reduce of 2 ranks (the real run's); pinned to the real run's with schedule: "
    )
    assert all(note in path.read_text() for note in notes)  # and the file's header keeps them


def test_the_dry_run_plan_counts_the_ops_the_simulator_issues() -> None:
    config = load_config(REAL_2X2, ["numerics.enabled=false", "iterations=6"])
    ops = simulate(config).ops
    names = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter"}
    for plan in policy_plans(config):
        rows = ops[ops["policy"] == plan.label]
        simulated = Counter(
            {
                (names.get(k, k), int(g)): int(n)
                for (k, g), n in rows.groupby(["kind", "group_size"])["count"].sum().items()
            }
        )
        assert plan.counts() == simulated, plan.label


def test_a_pinned_ds_sync_schedule_plans_the_same_groups_on_a_non_blocking_cluster() -> None:
    base = load_config(REAL_2X2, ["numerics.enabled=false"])
    open_ = load_config(REAL_2X2, ["numerics.enabled=false", "cluster.uplink_gbps=null"])
    model = policy_plans(base)[2].policy.bound_model  # type: ignore[union-attr]
    for settings in ({}, {"mixing_period": 3}, {"schedule": "shuffle", "seed": 4}):
        planned = create("ds_sync", settings)
        planned.bind(build_cluster(base.cluster).view, model)
        pinned = create("ds_sync", planned.pinned_settings())
        pinned.bind(build_cluster(open_.cluster).view, model)
        unpinned = create("ds_sync", settings)
        unpinned.bind(build_cluster(open_.cluster).view, model)
        for step in range(24):
            assert pinned.pattern(step) == planned.pattern(step), (settings, step)
        assert any(unpinned.pattern(s) != planned.pattern(s) for s in range(24)), settings  # a real change


def test_a_sync_switch_around_ds_sync_pins_its_inner_policy() -> None:
    base = load_config(REAL_2X2, ["numerics.enabled=false"]).model_dump(mode="json")
    base["policies"] = [{"name": "sync_switch", "first": "ds_sync", "then": "asp", "switch_at": 0.5}]
    calibrated = base | {"cluster": {k: v for k, v in base["cluster"].items() if k != "uplink_gbps"}}
    data, notes = keep_plans(base, calibrated)
    first = data["policies"][0]["first"]
    assert first["name"] == "ds_sync" and isinstance(first["schedule"], list)
    assert len(notes) == 1 and notes[0].startswith("plan kept: policies[0] (sync_switch)")


def test_a_plan_no_setting_can_pin_is_reported_as_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    # a policy that plans from the figures but cannot pin itself: the default pinned_settings
    monkeypatch.setattr(DSSync, "pinned_settings", Policy.pinned_settings)
    base = load_config(REAL_2X2, ["numerics.enabled=false"]).model_dump(mode="json")
    base["policies"] = [{"name": "ds_sync"}]
    calibrated = base | {"cluster": {k: v for k, v in base["cluster"].items() if k != "uplink_gbps"}}
    data, notes = keep_plans(base, calibrated)
    assert data["policies"] == [{"name": "ds_sync"}]  # left as it was
    assert len(notes) == 1 and notes[0].startswith(
        "PLAN CHANGED: policies[0] (ds_sync): the measured figures would plan"
    )


def test_the_calibrated_cluster_keeps_the_base_structure_and_replaces_the_measured_figures() -> None:
    base = {
        "topology": "two_tier",
        "racks": 2,
        "hosts_per_rack": 2,
        "gpus_per_host": 1,
        "nic_gbps": 0.2,
        "uplink_gbps": 0.1,
        "core_switches": 2,
        "server_hosts": 1,
        "placement": "scattered",
    }
    measured = {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 1, "nic_gbps": 9.5}
    measured |= {"link_latency_us": 20.0, "intra_host_latency_us": 1.0}
    cluster = calibrated_cluster(base, measured)
    assert cluster == {k: v for k, v in base.items() if k != "uplink_gbps"} | measured  # measured non-blocking
    assert calibrated_cluster(base, measured | {"uplink_gbps": 4.0})["uplink_gbps"] == 4.0
    # another measured shape: the measured cluster, with the base's unmeasured settings
    other = calibrated_cluster(base, measured | {"racks": 1, "hosts_per_rack": 4})
    assert other["racks"] == 1 and other["placement"] == "scattered" and "server_hosts" not in other
