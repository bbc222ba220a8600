"""Sync-Switch's offline search (`syncsim search`): halving the BSP fraction, every point reported."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import star, synthetic  # noqa: E402

from sim.cli import main  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.experiments.search import offline_search  # noqa: E402


def config(**entry) -> dict:
    cfg = synthetic(star(4), [{"name": "ring"}, {"name": "sync_switch", **entry}], 1.0, compute_ms=5.0, iterations=16)
    cfg["numerics"] = {"model": "logreg", "global_batch": 32, "optimizer": {"lr": 0.5, "momentum": 0.0}}
    return cfg


def test_a_generous_tolerance_halves_down_to_the_smallest_fraction() -> None:
    result = offline_search(config(), tolerance=1.0, start=0.5, smallest=0.125)
    assert list(result.table["fraction"]) == [1.0, 0.5, 0.25, 0.125]
    assert result.best == 0.125 and result.table["passes"].all()
    assert list(result.table["chosen"]) == [False, False, False, True]
    assert result.reference == result.table["final_accuracy"].iloc[0]


def test_the_tolerance_is_the_line_between_passing_and_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accuracies set per fraction (exact in binary): full BSP 0.75, tolerance 0.125. Fraction 0.5
    (0.6875) passes, 0.25 sits exactly on the line 0.625 and passes, 0.125 (0.5) falls short: the
    search stops there, before the smallest fraction, and chooses 0.25."""
    import sim.experiments.search as search

    accuracy = {1.0: 0.75, 0.5: 0.6875, 0.25: 0.625, 0.125: 0.5, 0.0625: 0.75}

    def fake_simulate(config):  # type: ignore[no-untyped-def]
        fraction = config.policies[0].settings["switch_at"]
        row = {"status": "ok", "final_accuracy": accuracy[fraction], "best_accuracy": accuracy[fraction]}
        row.update(sim_time_s=1.0, throughput_samples_s=1.0, switches=1)
        return type("Result", (), {"summary": pd.DataFrame([row])})()

    monkeypatch.setattr(search, "simulate", fake_simulate)
    result = offline_search(config(), tolerance=0.125, start=0.5, smallest=0.0625)
    assert list(result.table["fraction"]) == [1.0, 0.5, 0.25, 0.125]
    assert list(result.table["passes"]) == [True, True, True, False]
    assert result.best == 0.25 and list(result.table["chosen"]) == [False, False, True, False]
    tighter = offline_search(config(), tolerance=0.0625, start=0.5, smallest=0.0625)
    assert list(tighter.table["passes"]) == [True, True, False] and tighter.best == 0.5


def test_the_search_stops_at_the_first_fraction_that_falls_short() -> None:
    """Whatever the accuracies: every fraction tried but the last passes, the last is the first
    failure (or the smallest), and the chosen one is the smallest that passed."""
    result = offline_search(config(), tolerance=0.0, start=0.5, smallest=0.0625, seeds=2)
    table = result.table
    assert (table["seeds"] == 2).all() and len(result.points) == 2 * len(table)
    ok = table["final_accuracy"] >= result.reference
    assert list(table["passes"]) == list(ok)
    assert ok.iloc[1:-1].all()
    passing = table[table["passes"] & (table["fraction"] < 1)]
    assert result.best == (passing["fraction"].min() if len(passing) else 1.0)
    assert table["fraction"].iloc[-1] == 0.0625 or not table["passes"].iloc[-1]


def test_cli_writes_every_point_and_the_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config(label="mine")))
    out = tmp_path / "out"
    code = main(["search", str(path), "--out", str(out), "--policy", "mine", "--tolerance", "1", "--smallest", "0.25"])
    assert code == 0
    table = pd.read_csv(out / "search.csv")
    assert list(table["fraction"]) == [1.0, 0.5, 0.25]
    assert len(pd.read_csv(out / "search_points.csv")) == 3 and (out / "search.png").stat().st_size > 0
    assert "smallest BSP fraction within 1 of full BSP's accuracy" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**config(), "numerics": None}, "numerics: the search compares trained accuracy"),
        (config(switching="online"), "policies[1]: the search varies switch_at of an offline 10 pattern"),
    ],
)
def test_configs_the_search_cannot_use(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        offline_search(data)


def test_an_unknown_label_lists_the_entries() -> None:
    with pytest.raises(ConfigError, match="sync_switch entries: sync_switch"):
        offline_search(config(), "nope")
