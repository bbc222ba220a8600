"""Sync-Switch as a policy object: phases planned from its settings, the online rule on observed
timings, and bad settings refused with the setting's name (no simulator involved)."""

from __future__ import annotations

import pytest
from helpers import star, synthetic

from policies.base import SettingError
from policies.phases import Phase, Progress, Timing
from policies.registry import create
from sim.config import parse_config
from sim.errors import ConfigError

WORKERS = 8
BUDGET = 100 * WORKERS  # 100 BSP steps <-> 800 ASP updates


def phases_of(settings: dict, budget: int = BUDGET) -> list[tuple[str, int, bool]]:
    """(label, updates, synchronous) of every phase when each phase runs its whole budget."""
    policy = create("sync_switch", settings)
    out, progress = [], Progress(0, budget, WORKERS, 0)
    while (phase := policy.next_phase(progress)) is not None:
        out.append((phase.label, phase.updates, phase.synchronous))
        progress = Progress(progress.updates + phase.updates, budget, WORKERS, progress.phases + 1)
    return out


def test_default_is_five_percent_bsp_then_asp_counted_per_worker() -> None:
    assert phases_of({}) == [("ps", 5 * WORKERS, True), ("asp", 95 * WORKERS, False)]


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [
        (0.0, [("asp", BUDGET, False)]),
        (1.0, [("ps", BUDGET, True)]),
        (0.25, [("ps", 25 * WORKERS, True), ("asp", 75 * WORKERS, False)]),
        (0.125, [("ps", 12 * WORKERS, True), ("asp", 88 * WORKERS, False)]),  # whole BSP steps (12.5 rounds to 12)
    ],
)
def test_switch_at_splits_the_budget_in_whole_bsp_steps(fraction: float, expected: list) -> None:
    assert phases_of({"switch_at": fraction}) == expected


def test_longer_patterns_alternate_at_each_fraction() -> None:
    got = phases_of({"pattern": "101", "switch_at": [0.1, 0.6]})
    assert got == [("ps", 10 * WORKERS, True), ("asp", 50 * WORKERS, False), ("ps", 40 * WORKERS, True)]
    assert phases_of({"pattern": "01", "switch_at": 0.3}) == [("asp", 30 * WORKERS, False), ("ps", 70 * WORKERS, True)]


def test_the_switch_cost_applies_to_every_phase_but_the_first() -> None:
    policy = create("sync_switch", {"switch_at": 0.5, "switch_cost_s": 2.5})
    first = policy.next_phase(Progress(0, BUDGET, WORKERS, 0))
    then = policy.next_phase(Progress(first.updates, BUDGET, WORKERS, 1))
    assert (first.switch_cost_s, then.switch_cost_s) == (0.0, 2.5)


def test_wrapped_policies_keep_their_own_settings() -> None:
    policy = create("sync_switch", {"first": {"name": "ps", "shards": 2}, "then": {"name": "ssp", "staleness": 1}})
    assert policy.first.settings.shards == 2 and policy.then.settings.staleness == 1
    assert policy.then.shared_budget and not policy.first.shared_budget


def test_a_plain_policy_is_one_phase_of_itself() -> None:
    policy = create("ring")
    phase = policy.next_phase(Progress(0, BUDGET, WORKERS, 0))
    assert phase == Phase(policy, BUDGET, "ring")
    assert policy.next_phase(Progress(BUDGET, BUDGET, WORKERS, 1)) is None


# ----------------------------------------------------------------------------------------- online
def feed(policy, step: int, busy: dict[int, float]) -> None:
    for rank in range(WORKERS):
        policy.observe(Timing(rank, step, busy.get(rank, 0.1) + 0.05, 0.05))  # 50 ms of waiting aside


def online(**settings) -> object:
    policy = create("sync_switch", {"switching": "online", "threshold": 1.5, "window": 3, **settings})
    phase = policy.next_phase(Progress(0, BUDGET, WORKERS, 0))
    assert phase.label == "ps" and phase.adaptive
    return policy


def test_online_switches_only_after_window_slow_iterations_in_a_row() -> None:
    policy = online()
    for step in range(2):
        feed(policy, step, {3: 0.2})  # 2x its peers' pace, but only 2 iterations so far
        assert not policy.phase_over()
    feed(policy, 2, {3: 0.2})
    assert policy.phase_over() and policy.switches[-1] == (2, "ranks [3] slow")


def test_online_ignores_noise_and_waits_measured_by_the_worker_itself() -> None:
    policy = online()
    for step in range(20):  # 1.4x is under the threshold; long waits are other workers' doing
        feed(policy, step, {3: 0.14, 5: 0.1 + (0.2 if step % 2 else 0.0)})
        policy.observe(Timing(6, step, 0.9, 0.8))
    assert not policy.phase_over() and policy.switches == []


def test_online_returns_after_recovery_with_hysteresis() -> None:
    policy = online(release=1.2)
    for step in range(3):
        feed(policy, step, {3: 0.3})
    assert policy.phase_over()
    then = policy.next_phase(Progress(3 * WORKERS, BUDGET, WORKERS, 1))
    assert then.label == "asp" and not policy.phase_over()
    for step in range(3, 13):  # 1.3x: recovering, but not below release
        feed(policy, step, {3: 0.13})
    assert not policy.phase_over()
    for step in range(13, 15):
        feed(policy, step, {3: 0.11})
    assert not policy.phase_over()  # two fast iterations of a window of three
    feed(policy, 15, {3: 0.11})
    assert policy.phase_over() and policy.switches[-1] == (15, "ranks [3] recovered")
    back = policy.next_phase(Progress(16 * WORKERS, BUDGET, WORKERS, 2))
    assert back.label == "ps" and not policy.phase_over()


def test_online_waits_for_every_slow_worker() -> None:
    policy = online()
    for step in range(3):
        feed(policy, step, {3: 0.3, 5: 0.3 if step else 0.1})  # 5 is slow too, one iteration late
    policy.next_phase(Progress(3 * WORKERS, BUDGET, WORKERS, 1))
    for step in range(3, 9):
        feed(policy, step, {5: 0.3})  # 3 recovered, 5 has not
    assert not policy.phase_over()
    for step in range(9, 12):
        feed(policy, step, {})
    assert policy.phase_over()


def test_online_state_round_trips() -> None:
    policy = online()
    for step in range(3):
        feed(policy, step, {3: 0.3})
    copy = online()
    copy.load_state_dict(policy.state_dict())
    assert copy.state_dict() == policy.state_dict()


# ----------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"pattern": "1a0"}, "policies[0].pattern: use only the letters 1 (first) and 0 (then)"),
        ({"pattern": ""}, "policies[0].pattern: use only the letters"),
        ({"switch_at": 1.5}, "policies[0].switch_at: should be less than or equal to 1"),
        ({"switch_at": -0.1}, "policies[0].switch_at: should be greater than or equal to 0"),
        ({"pattern": "101", "switch_at": 0.5}, "policies[0].switch_at: pattern 101 switches 2 time(s)"),
        ({"pattern": "101", "switch_at": [0.6, 0.2]}, "policies[0].switch_at: fractions must not decrease"),
        ({"switching": "online", "threshold": 1.0}, "policies[0].threshold: should be greater than 1"),
        ({"switching": "online", "release": 1.8}, "policies[0].release: must not exceed threshold"),
        ({"switching": "online", "switch_at": 0.1}, "policies[0].switch_at: has no effect with switching: online"),
        ({"window": 3}, "policies[0].window: has no effect with switching: offline"),
        ({"first": "bsp"}, "policies[0].first.name: unknown policy 'bsp'; allowed: asp,"),
        ({"then": {"name": "ssp", "staleness": -1}}, "policies[0].then.staleness: should be greater than or equal"),
        ({"then": {"staleness": 1}}, "policies[0].then: needs a policy name"),
        ({"first": "sync_switch"}, "policies[0].first.name: sync_switch cannot wrap itself"),
        ({"switch_cost_s": -1}, "policies[0].switch_cost_s: should be greater than or equal to 0"),
        ({"switch_cost_s": float("inf")}, "policies[0].switch_cost_s: should be a finite number"),
        ({"switching": "online", "threshold": float("inf")}, "policies[0].threshold: should be a finite number"),
        ({"switching": "sometimes"}, "policies[0].switching: should be 'offline' or 'online'"),
    ],
)
def test_bad_settings_name_the_field(settings: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(synthetic(star(8), [{"name": "sync_switch", **settings}], 1.0))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_setting_that_does_not_fit_the_cluster_names_the_wrapped_field() -> None:
    from sim.api import prepare

    config = parse_config(synthetic(star(8), [{"name": "sync_switch", "first": {"name": "ps", "hosts": ["nope"]}}]))
    with pytest.raises(ConfigError, match=r"policies\[0\]\.first\.hosts: unknown hosts"):
        prepare(config)


def test_setting_errors_carry_the_field() -> None:
    with pytest.raises(SettingError) as err:
        create("sync_switch", {"first": {"name": "ps", "shards": 0}})
    assert err.value.field == "first.shards"


def test_check_refuses_a_bad_pattern_with_exit_code_2(tmp_path, capsys) -> None:
    import yaml

    from sim.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(synthetic(star(8), [{"name": "ring"}, {"name": "sync_switch", "pattern": "1x0"}])))
    assert main(["check", str(path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[1].strip().startswith("policies[1].pattern: use only the letters 1 (first) and 0 (then)")
    assert len(lines) == 2


def test_the_docs_example_policies_are_valid() -> None:
    import re
    from pathlib import Path

    import yaml

    from sim.api import prepare

    text = (Path(__file__).parent.parent / "docs" / "sync_switch.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", text, re.S)
    config = parse_config(synthetic(star(8), yaml.safe_load(block)["policies"], 1.0))
    prepare(config)
    assert [p.display for p in config.policies] == ["sync_switch", "bsp25_then_asp", "online"]


@pytest.mark.parametrize(
    "settings, expected",
    [
        (
            {"switching": "online", "threshold": 2.0, "release": 3.0, "window": 0},
            ["window: should be greater than or equal to 1 (got 0)", "release: must not exceed threshold (2.0)"],
        ),
        (
            {"switching": "online", "threshold": 2.0, "release": 3.0, "pattern": "101"},
            ["pattern: has no effect with switching: online", "release: must not exceed threshold (2.0)"],
        ),
        (
            {"switch_at": [0.5, 0.2], "pattern": "101", "then": {"name": "asp", "bogus": 1}},
            ["switch_at: fractions must not decrease", "then.bogus: unknown setting for policy 'asp'"],
        ),
    ],
)
def test_every_bad_setting_is_reported_in_one_pass(settings: dict, expected: list[str]) -> None:
    """release above threshold beside another setting's error, and the wrapper's checks beside the
    inner policies': each config has two problems, and both are named."""
    cfg = synthetic(star(2), [{"name": "sync_switch", **settings}], 1.0)
    with pytest.raises(ConfigError) as caught:
        parse_config(cfg)
    lines = str(caught.value).splitlines()
    for line in expected:
        assert any(got.startswith(f"policies[0].{line}") for got in lines), (line, lines)
