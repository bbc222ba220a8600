"""Sync-Switch's straggler runs as slowdowns, its online runs replayed (sim/experiments/sync_switch_stragglers.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.experiments import sync_switch_logs as logs
from sim.experiments import sync_switch_reproduction as repro
from sim.experiments import sync_switch_stragglers as stragglers


def test_an_online_runs_phases_are_replayed_from_its_job_records() -> None:
    """Policy 1's records (BSP to step 200, ASP to 3,214, BSP to 3,400, ASP to the end; medians over
    its three runs) in worker-updates of 8 workers: 1,600, 3,012, 1,504 and 57,813."""
    phases = logs.bundled(logs.PHASES)
    pattern, ends = stragglers.replayed_plan(phases, "policy1_freq1_1straggler_10ms", 8)
    total = 1600 + 3012 + 1504 + 57813
    assert pattern == "1010"
    assert ends == pytest.approx((1600 / total, 4612 / total, 6116 / total), abs=1e-4)
    # policy 2 took the static plan's phases: 400 BSP steps (5% of the updates), then ASP
    assert stragglers.replayed_plan(phases, "policy2_freq4_2straggler_30ms", 8) == ("10", (0.05,))
    assert stragglers.replayed_plan(phases, "baseline_freq1_1straggler_10ms", 8) == ("10", (0.05,))
    with pytest.raises(ValueError, match="no_such_run: no job records"):
        stragglers.replayed_plan(phases, "no_such_run", 8)


def test_every_straggler_series_names_logged_runs_and_slows_per_step() -> None:
    runs = logs.bundled()
    slowdowns = {}
    for _mode, baseline, name, _policy, cases in stragglers.STRAGGLER_SERIES:
        base = repro.logged_seconds(runs, "straggler", baseline)
        for suffix, _delay, _ranks in cases:
            slowdowns[(baseline, suffix)] = repro.logged_seconds(runs, "straggler", name.format(suffix)) / base
    assert len(slowdowns) == 10
    # the April 10 ms x 2 run stopped at 34,000 steps: 418.67 min over them against 451.73 min over 40,000
    assert slowdowns[("fixed_batch_sync_baseline_cosine", "10lat_2strag")] == pytest.approx(
        (418.67 / 34000) / (451.73 / 40000), rel=1e-9
    )
    assert slowdowns[("sync_baseline", "30lat_2strag")] == pytest.approx(466.9 / 170.2, rel=1e-3)


def test_the_extra_time_is_scored_on_what_the_stragglers_add() -> None:
    # logged 1.5x, predicted 1.2x: the total is 20% under, the 0.5 extra 60% under (0.2 against 0.5)
    assert stragglers.extra_error_pct(1.2, 1.5) == pytest.approx(-60.0)
    assert stragglers.extra_error_pct(2.0, 1.5) == pytest.approx(100.0)  # 1.0 extra against 0.5
    assert stragglers.extra_error_pct(1.0, 1.1) == pytest.approx(-100.0)  # stragglers cost nothing
    with pytest.raises(ValueError, match="logged_slowdown: above 1"):
        stragglers.extra_error_pct(1.1, 1.0)


def test_within_counts_the_errors_inside_the_band_both_ways() -> None:
    assert stragglers.within(pd.Series([-25.0, 25.0, -25.1, 30.0, 0.0])) == 3
    assert stragglers.within(pd.Series([-100.0, -60.0])) == 0
