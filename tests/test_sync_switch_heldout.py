"""Sync-Switch calibrated on CIFAR-10 alone, scored on CIFAR-100 and 16 workers
(sim/experiments/sync_switch_heldout.py; the bounds are docs/sync_switch.md's, "Held out")."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.experiments import sync_switch_heldout as heldout
from sim.experiments import sync_switch_logs as logs
from sim.experiments import sync_switch_reproduction as repro

# 1/20 of every run (~10 s, once): a run's time is linear in its steps and switch cost; the docs' table
# is full length, and at 1/20 every figure is within 0.2 points of it, each hybrid's extra within 0.4 min
SCALE = 20


def _phases(*jobs: tuple[str, str, str, str]) -> pd.DataFrame:
    return pd.DataFrame([{"job": j, "mode": m, "started": s, "ended": e, "steps": 1} for j, m, s, e in jobs])


def test_the_switch_cost_is_the_median_gap_of_the_chosen_jobs_only() -> None:
    phases = _phases(
        ("5050_run1", "BSP", "2020-10-08 00:00:00", "2020-10-08 01:00:00"),
        ("5050_run1", "ASP", "2020-10-08 01:01:40", "2020-10-08 02:00:00"),  # 100 s
        ("694_run1", "BSP", "2020-10-08 03:00:00", "2020-10-08 03:10:00"),
        ("694_run1", "ASP", "2020-10-08 03:13:20", "2020-10-08 04:00:00"),  # 200 s
        ("cifar100_5050_run1", "BSP", "2020-09-17 00:00:00", "2020-09-17 01:00:00"),
        ("cifar100_5050_run1", "ASP", "2020-09-17 02:00:00", "2020-09-17 03:00:00"),  # 3,600 s, not CIFAR-10
    )
    assert heldout.switch_gap_s(phases, heldout.CIFAR10_JOBS) == pytest.approx(150.0)
    with pytest.raises(ValueError, match="jobs: no job record"):
        heldout.switch_gap_s(phases, r"^cluster_16_\d+_run\d+$")


def test_the_null_model_is_the_cifar10_mix_for_the_same_images_at_perfect_scaling() -> None:
    # every setup trains 8.2 M images: 8,000 x 8 x 128 = 16,000 x 8 x 64 = 4,000 x 16 x 128
    assert heldout.images(repro.CIFAR100) == heldout.images(repro.CIFAR10) == heldout.images(repro.CLUSTER16)
    # CIFAR-100 12.5% BSP: 0.125 x 180 + 0.875 x 26 min + one 180 s switch = 22.5 + 22.75 + 3
    assert heldout.null_minutes(repro.CIFAR100, 0.125, 1, 180.0, 26.0, 180.0) == pytest.approx(48.25)
    # 16 workers, 50% BSP: twice the workers, half of each phase: 45 + 6.5 + 3
    assert heldout.null_minutes(repro.CLUSTER16, 0.5, 1, 180.0, 26.0, 180.0) == pytest.approx(54.5)


@pytest.fixture(scope="module")
def scored() -> tuple[pd.DataFrame, repro.Calibration]:
    """The calibration from CIFAR-10's rows and records alone (anything else removed, so using it
    would fail), then the held-out predictions scored against the full logs."""
    runs, phases, base = logs.bundled(), logs.bundled(logs.PHASES), repro.base_config()
    cifar10_runs = runs[runs["experiment"].str.startswith("cifar10_res32/")]
    cifar10_phases = phases[phases["job"].str.match(heldout.CIFAR10_JOBS)]
    calibration = heldout.calibrate_cifar10(cifar10_runs, cifar10_phases, base)
    table = heldout.predict_held_out(runs, calibration, base, SCALE)
    return table.set_index(["experiment", "configuration"]), calibration


def _per_image_s(experiment: str, configuration: str) -> float:
    """The logged seconds per image of a BSP run (every BSP step is workers x batch images)."""
    setup = {s.experiment: s for s in (repro.CIFAR10, repro.CIFAR100, repro.CLUSTER16)}.get(experiment, repro.CIFAR10)
    return repro.logged_seconds(logs.bundled(), experiment, configuration) / (setup.hosts * setup.batch_size)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", [repro.CIFAR100.experiment, repro.CLUSTER16.experiment])
def test_held_out_bsp_misses_by_how_much_that_masters_rate_differed(scored, experiment: str) -> None:
    """BSP is one master's input pipeline at the CIFAR-10 rate, so its error is the ratio of the
    logged seconds per image, from the logs alone: CIFAR-100 -5.6%, 16 workers +13.6%."""
    table, _ = scored
    row = table.loc[(experiment, "bsp")]
    expected = 100.0 * (_per_image_s(repro.BASELINE, "bsp") / _per_image_s(experiment, "bsp") - 1.0)
    assert row["error_pct"] == pytest.approx(expected, abs=1.0)
    assert abs(row["error_pct"]) <= 15.0  # docs: 15% on 16 workers, 10% on CIFAR-100
    if experiment == repro.CIFAR100.experiment:
        assert abs(row["error_pct"]) <= 10.0


# docs/sync_switch.md, "Held out": the bound on |error| per held-out run kind (the figures, rounded
# up to the next 5 points: a guard against regressions, not a claim of accuracy for CIFAR-100)
BOUNDS = {
    (repro.CIFAR100.experiment, "asp"): 45.0,
    (repro.CIFAR100.experiment, "hybrid"): 40.0,
    (repro.CLUSTER16.experiment, "hybrid"): 15.0,
}


@pytest.mark.slow
@pytest.mark.parametrize(("experiment", "kind"), list(BOUNDS))
def test_held_out_errors_stay_within_the_docs_bounds_and_under_the_null_models(scored, experiment, kind) -> None:
    table, _ = scored
    rows = table.loc[experiment]
    rows = rows[rows.index.map(heldout.kind) == kind]
    assert len(rows) >= 1
    assert (rows["error_pct"].abs() <= BOUNDS[(experiment, kind)]).all()
    # the null model (CIFAR-10's mix, perfect scaling with workers) misses every one by more
    assert (rows["error_pct"].abs() < rows["null_error_pct"].abs()).all()
    # and every miss here is an underestimate on CIFAR-100 (ResNet-50's compute), over on 16 workers
    assert ((rows["error_pct"] < 0) if experiment == repro.CIFAR100.experiment else (rows["error_pct"] > 0)).all()


@pytest.mark.slow
def test_a_hybrids_time_beyond_the_mix_is_the_switch_and_the_held_out_switches_agree(scored) -> None:
    table, calibration = scored
    hybrids = table[table.index.get_level_values("configuration").map(heldout.kind) == "hybrid"]
    # syncsim's hybrid = its own BSP and ASP runs mixed + one switch (docs: 0.5 min at most apart)
    assert (hybrids["predicted_extra_min"] - calibration.switch_cost_s / 60.0).abs().max() <= 0.5
    # the switch, from CIFAR-10's four records, against the held-out records (docs: within 10%)
    phases = logs.bundled(logs.PHASES)
    for _, _, jobs in heldout.HELD_OUT:
        assert calibration.switch_cost_s == pytest.approx(heldout.switch_gap_s(phases, jobs), rel=0.10)
    # CIFAR-100's logged extra (0.6-5.4 min) straddles it: nearer, by the median, than "no extra" (0 min)
    cifar100 = hybrids.loc[repro.CIFAR100.experiment]
    miss = (cifar100["predicted_extra_min"] - cifar100["logged_extra_min"]).abs()
    assert miss.median() < cifar100["logged_extra_min"].abs().median()


def test_the_docs_state_the_same_bounds() -> None:
    """docs/sync_switch.md's per-kind table gives each bound the tests hold."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "sync_switch.md").read_text()
    held_out = {repro.CIFAR100.experiment: "dataset", repro.CLUSTER16.experiment: "worker count"}
    kinds = {"asp": "ASP", "hybrid": ("4 hybrids", "50% hybrid")}
    for (experiment, kind), bound in BOUNDS.items():
        names = kinds[kind] if isinstance(kinds[kind], tuple) else (kinds[kind],)
        rows = [line for line in text.splitlines() if line.startswith(f"| {held_out[experiment]} | ")]
        (row,) = [line for line in rows if line.split(" | ")[1] in names]
        assert row.split(" | ")[4].startswith(f"{bound:g}%"), row
