"""Sync-Switch in the simulator: throughput as the phase-weighted mix of BSP's and ASP's, the online
policy against a transient straggler, switch costs, and the tables that show the phases."""

from __future__ import annotations

import pytest
from helpers import star, synthetic

from sim.api import simulate

FRACTIONS = (0.0, 0.05, 0.25, 1.0)


@pytest.fixture(scope="module")
def offline():
    """8 homogeneous workers, one PS shard colocated with each; compute jitter makes BSP wait for the
    slowest worker every step while ASP does not, so the two throughputs differ (~27%)."""
    policies = [{"name": "ps"}, {"name": "asp"}]
    policies += [{"name": "sync_switch", "label": f"f{f}", "switch_at": f} for f in FRACTIONS]
    return simulate(synthetic(star(8, 10.0), policies, 1.0, compute_ms=10.0, iterations=100, jitter=0.3))


@pytest.mark.parametrize("fraction", FRACTIONS)
def test_throughput_is_the_phase_weighted_mix(offline, fraction: float) -> None:
    """A fraction f of the samples goes at BSP's throughput X_b, the rest at ASP's X_a, so the run
    takes f S / X_b + (1 - f) S / X_a: its throughput is 1 / (f / X_b + (1 - f) / X_a)."""
    x = offline.summary.set_index("policy")["throughput_samples_s"]
    assert x["asp"] > 1.15 * x["ps"]  # the scenario separates the two
    mix = 1.0 / (fraction / x["ps"] + (1 - fraction) / x["asp"])
    assert x[f"f{fraction}"] == pytest.approx(mix, rel=0.03)
    if fraction in (0.0, 1.0):  # one phase: the plain policy itself
        assert x[f"f{fraction}"] == pytest.approx(x["asp" if fraction == 0 else "ps"], rel=0.01)


def test_phases_show_in_the_tables(offline) -> None:
    phases = offline.phases[offline.phases["policy"] == "f0.25"]
    assert list(phases["phase_policy"]) == ["ps", "asp"]
    assert list(phases["updates"]) == [25 * 8, 75 * 8] and list(phases["start_step"]) == [0, 25]
    assert phases["end_s"].iloc[0] == pytest.approx(phases["start_s"].iloc[1])
    rows = offline.iterations[offline.iterations["policy"] == "f0.25"]
    bsp = rows[rows["phase_policy"] == "ps"]
    assert len(bsp) == 25 * 8 and set(bsp["iteration"]) == set(range(25)) and set(bsp["phase"]) == {0}
    assert rows[rows["phase"] == 1]["start_s"].min() >= bsp["end_s"].max()  # every worker stopped first
    summary = offline.summary.set_index("policy")
    assert summary.loc["f0.25", "switches"] == 1 and summary.loc["ps", "switches"] == 0
    assert summary.loc["f0.25", "synchronous_s"] + summary.loc["f0.25", "asynchronous_s"] == pytest.approx(
        summary.loc["f0.25", "sim_time_s"]
    )


def test_a_switch_costs_its_idle_time() -> None:
    policies = [
        {"name": "sync_switch", "label": "free", "pattern": "101", "switch_at": [0.3, 0.6]},
        {"name": "sync_switch", "label": "costly", "pattern": "101", "switch_at": [0.3, 0.6], "switch_cost_s": 0.5},
    ]
    result = simulate(synthetic(star(4, 10.0), policies, 1.0, compute_ms=10.0, iterations=20))
    summary = result.summary.set_index("policy")
    assert summary.loc["costly", "switches"] == 2 and summary.loc["costly", "switch_s"] == pytest.approx(1.0)
    assert summary.loc["costly", "sim_time_s"] == pytest.approx(summary.loc["free", "sim_time_s"] + 1.0)
    phases = result.phases[result.phases["policy"] == "costly"]
    assert list(phases["phase_policy"]) == ["ps", "asp", "ps"] and list(phases["start_step"]) == [0, 6, 12]


# ----------------------------------------------------------------------------------------- online
def straggled(stragglers: bool) -> dict:
    """Sync-Switch's straggler experiment: 8 workers, 30 ms of extra network delay on 2 of them for
    the middle third of the run (PS shards on their own hosts, so the delay slows the stragglers'
    own pushes)."""
    ps = {"name": "ps", "placement": "dedicated"}
    asp = {"name": "asp", "placement": "dedicated"}
    online = {"name": "sync_switch", "switching": "online", "first": ps, "then": asp, "threshold": 1.3}
    cfg = synthetic(star(8, 10.0, server_hosts=8), [ps, asp, online], 1.86, compute_ms=40.0, iterations=150)
    cfg["workload"]["compute_jitter"] = 0.02
    if stragglers:  # the run takes ~6.6 s without the straggler
        cfg["faults"] = {"stragglers": [{"ranks": [1, 6], "delay_ms": 30, "start_s": 2.2, "duration_s": 2.2}]}
    return cfg


def test_online_switches_to_asp_while_the_straggler_lasts() -> None:
    result = simulate(straggled(True))
    end = result.summary.set_index("policy")["sim_time_s"]
    assert end["sync_switch"] < end["ps"]  # faster than BSP under the straggler
    phases = result.phases[result.phases["policy"] == "sync_switch"].reset_index()
    assert list(phases["phase_policy"]) == ["ps", "asp", "ps"]
    assert 2.2 < phases["start_s"][1] < 2.2 + 0.2 * 2.2  # detected within a fifth of its duration
    assert 4.4 < phases["start_s"][2] < 4.4 + 0.2 * 2.2  # and back to BSP soon after it ended
    rows = result.iterations[result.iterations["policy"] == "sync_switch"]
    last = rows[rows["end_s"] == rows["end_s"].max()]
    assert set(last["phase_policy"]) == {"ps"}  # iterations.csv shows the way back


def test_online_never_switches_without_a_straggler() -> None:
    result = simulate(straggled(False))
    summary = result.summary.set_index("policy")
    assert summary.loc["sync_switch", "switches"] == 0
    assert summary.loc["sync_switch", "sim_time_s"] == pytest.approx(summary.loc["ps", "sim_time_s"])
