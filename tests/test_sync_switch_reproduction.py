"""Sync-Switch's logged runs predicted from its pure BSP and ASP runs (sim/experiments/sync_switch_reproduction.py)."""

from __future__ import annotations

import pytest

from sim.api import simulate
from sim.config import load_config
from sim.experiments import sync_switch_logs as logs
from sim.experiments import sync_switch_reproduction as repro


@pytest.mark.parametrize(
    ("setup", "steps", "fraction"),
    [
        (repro.CIFAR10, 61213, 0.05),  # b5-a95: 400 BSP steps, then 60,800 ASP updates
        (repro.CIFAR10, 62892, 0.02),  # b2-a98
        (repro.CIFAR10, 60513, 0.0625),  # "b6-a94" ran 500 BSP steps (the job records agree), not 480
        (repro.CIFAR10, 22000, 0.75),  # a25-b75: 16,000 ASP updates, then 6,000 BSP steps
        (repro.CIFAR100, 114014, 0.125),  # 12_88: the paper's halving, 2,000 of 16,000 steps
        (repro.CIFAR100, 121012, 0.0625),  # 6_94
        (repro.CLUSTER16, 34029, 0.5),  # 16 workers, 5050
    ],
)
def test_a_hybrids_bsp_share_follows_from_its_logged_steps(setup: repro.Setup, steps: int, fraction: float) -> None:
    assert setup.bsp_fraction(steps) == fraction


def test_the_calibration_targets_are_the_logged_pure_runs() -> None:
    runs = logs.bundled()
    bsp = runs[(runs["experiment"] == repro.BASELINE) & (runs["configuration"] == "bsp") & (runs["steps"] == 8000)]
    assert repro.logged_seconds(runs, repro.BASELINE, "bsp") == pytest.approx(bsp["wall_min"].median() * 60 / 8000)
    assert 1.3 < repro.logged_seconds(runs, repro.BASELINE, "bsp") < 1.36  # 177 min / 8,000 steps
    assert repro.logged(runs, repro.BASELINE).loc["bsp", "runs"] == 4  # the 23,400-step run left out
    with pytest.raises(ValueError, match="no timed"):
        repro.logged_seconds(runs, repro.BASELINE, "b5-a95")


def test_calibration_reproduces_the_pure_runs_and_the_bundled_config() -> None:
    runs, phases, base = logs.bundled(), logs.bundled(logs.PHASES), repro.base_config()
    cal = repro.calibrate(runs, phases, base)
    setup = repro.CIFAR10
    config = repro.setup_config(base, setup, cal.compute_ms["resnet32"], cal.input_samples_s)
    summary = repro.run_policies(config, [repro.BSP, repro.ASP], repro.CALIBRATION_ITERATIONS)
    assert summary.loc["bsp", "mean_iteration_s"] == pytest.approx(
        repro.logged_seconds(runs, repro.BASELINE, "bsp"), rel=0.01
    )
    assert summary.loc["asp", "mean_iteration_s"] == pytest.approx(
        repro.logged_seconds(runs, repro.BASELINE, "asp") * 8, rel=0.01
    )
    # the mechanism, not a factor: the master's pipeline prepares 8 x 128 images a step
    assert cal.input_samples_s == pytest.approx(8 * 128 / summary.loc["bsp", "mean_iteration_s"], rel=0.01)
    assert 180 < cal.switch_cost_s < 195  # main.py's 90 s wait plus the relaunch
    shipped = load_config(repro.CONFIG).workload
    assert shipped.input_samples_s == pytest.approx(cal.input_samples_s, rel=0.01)
    assert shipped.compute_ms == pytest.approx(cal.compute_ms["resnet32"], rel=0.01)


def test_the_bundled_config_predicts_the_logged_hybrids_within_fifteen_percent() -> None:
    """Issue 31's acceptance for two of the hybrids (the command checks them all)."""
    config = load_config(repro.CONFIG).model_dump(exclude_none=True)
    config["policies"] = [p for p in config["policies"] if p.get("label") in ("b5-a95", "b25-a75")]
    summary = simulate(config).summary.set_index("policy")
    logged = logs.summary(logs.bundled()).set_index(["experiment", "configuration"])
    for label in ("b5-a95", "b25-a75"):
        minutes = summary.loc[label, "sim_time_s"] / 60
        assert minutes == pytest.approx(logged.loc[(repro.CIFAR10.experiment, label), "median_min"], rel=0.15)
    assert summary.loc["b5-a95", "switches"] == 1


def test_the_null_model_is_the_phase_weighted_mix_of_the_pure_runs() -> None:
    # 5% of a 180 min BSP run, 95% of a 26 min ASP run, one 180 s switch: 9 + 24.7 + 3 min
    assert repro.phase_mix_minutes(0.05, 180.0, 26.0, 1, 180.0) == pytest.approx(36.7)
    # the pure runs are the mix at share 1 and 0, with no switch
    assert repro.phase_mix_minutes(1.0, 180.0, 26.0, 0, 180.0) == 180.0
    assert repro.phase_mix_minutes(0.0, 180.0, 26.0, 0, 180.0) == 26.0
    with pytest.raises(ValueError, match="fraction: a BSP share between 0 and 1"):
        repro.phase_mix_minutes(5.0, 180.0, 26.0, 1, 180.0)
    with pytest.raises(ValueError, match="switches: a count"):
        repro.phase_mix_minutes(0.5, 180.0, 26.0, -1, 180.0)
