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


def test_a_switch_that_costs_nothing_halves_down_to_the_smallest_fraction() -> None:
    """Plain SGD with the linear scaling rule and no stragglers: the ASP phase makes BSP's updates,
    so every fraction ends within half a point of full BSP (a tolerance that can fail, unlike 1.0)."""
    result = offline_search(config(), tolerance=0.005, start=0.5, smallest=0.125, seeds=1)
    assert list(result.table["fraction"]) == [1.0, 0.5, 0.25, 0.125]
    assert (result.table["final_accuracy"] - result.reference).abs().max() <= 0.005
    assert result.best == 0.125 and result.table["passes"].all()
    assert list(result.table["chosen"]) == [False, False, False, True]
    assert result.reference == result.table["final_accuracy"].iloc[0]


def fake_simulate(accuracy):  # type: ignore[no-untyped-def]
    """`simulate` whose final accuracy is `accuracy(fraction, seed)` (no training)."""

    def simulate(config):  # type: ignore[no-untyped-def]
        fraction = config.policies[0].settings["switch_at"]
        value = accuracy(fraction, config.seed)
        row = {"status": "ok", "final_accuracy": value, "best_accuracy": value}
        row.update(sim_time_s=10.0 * fraction + config.seed, throughput_samples_s=1.0, switches=1)
        return type("Result", (), {"summary": pd.DataFrame([row])})()

    return simulate


def test_the_tolerance_is_the_line_between_passing_and_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Accuracies set per fraction (exact in binary): full BSP 0.75, tolerance 0.125. Fraction 0.5
    (0.6875) passes, 0.25 sits exactly on the line 0.625 and passes, 0.125 (0.5) falls short: the
    search stops there, before the smallest fraction, and chooses 0.25."""
    import sim.experiments.search as search

    accuracy = {1.0: 0.75, 0.5: 0.6875, 0.25: 0.625, 0.125: 0.5, 0.0625: 0.75}
    monkeypatch.setattr(search, "simulate", fake_simulate(lambda fraction, seed: accuracy[fraction]))
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


def test_three_seeds_by_default_and_the_decision_is_their_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full BSP scores 0.75 on every seed, tolerance 0.125. At 50% seed 0 scores 0.5 (alone it would
    fail, and the search would keep full BSP) but seeds 1 and 2 score 0.875: the mean, 0.75, passes.
    At 25% seed 0 scores 0.75 (alone it would pass) but the others 0.5: the mean, 7/12, fails."""
    import sim.experiments.search as search

    per_seed = {1.0: (0.75, 0.75, 0.75), 0.5: (0.5, 0.875, 0.875), 0.25: (0.75, 0.5, 0.5)}
    monkeypatch.setattr(search, "simulate", fake_simulate(lambda fraction, seed: per_seed[fraction][seed]))
    result = offline_search(config(), tolerance=0.125, start=0.5, smallest=0.0625)
    assert (result.table["seeds"] == 3).all() and list(result.points["seed"]) == [0, 1, 2] * 3
    assert list(result.table["passes"]) == [True, True, False] and result.best == 0.5
    assert list(result.table["final_accuracy_min"]) == [0.75, 0.5, 0.5]
    assert list(result.table["final_accuracy_max"]) == [0.75, 0.875, 0.75]
    one_seed = offline_search(config(), tolerance=0.125, start=0.5, smallest=0.0625, seeds=1)
    assert one_seed.best == 1.0 and list(one_seed.table["passes"]) == [True, False]


def test_the_plot_has_min_max_bars_and_says_how_many_seeds(drawn: list) -> None:
    from matplotlib.container import ErrorbarContainer

    from sim.results.plots import search_plot

    table = pd.DataFrame({"fraction": [1.0, 0.5], "final_accuracy": [0.9, 0.85], "final_accuracy_min": [0.88, 0.8],
                          "final_accuracy_max": [0.92, 0.9], "sim_time_s": [10.0, 6.0], "sim_time_s_min": [9.0, 5.0],
                          "sim_time_s_max": [11.0, 7.0], "seeds": [3, 3], "passes": [True, False],
                          "chosen": [True, False]})  # fmt: skip
    search_plot(table, 0.9, 0.02, Path("unused.png"))
    search_plot(table.assign(seeds=1), 0.9, 0.02, Path("unused.png"))
    ax_acc, ax_time = drawn[0].axes
    bars = [c for c in ax_acc.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1 and bars[0].has_yerr
    (segments,) = bars[0].lines[2]  # one vertical segment per fraction, from min to max
    assert sorted(tuple(sorted(seg[:, 1])) for seg in segments.get_segments()) == [(0.8, 0.9), (0.88, 0.92)]
    assert any(isinstance(c, ErrorbarContainer) for c in ax_time.containers)
    assert ax_acc.get_ylabel() == "final accuracy (consensus)\nmean of 3 seeds, bars: min-max"
    assert drawn[1].axes[0].get_ylabel() == "final accuracy (consensus)\n1 seed"


def test_cli_writes_every_point_and_the_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three seeds a fraction unless told otherwise; the table prints and saves each mean's spread."""
    import sim.experiments.search as search

    monkeypatch.setattr(search, "simulate", fake_simulate(lambda fraction, seed: 0.5 + 0.125 * seed))
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config(label="mine")))
    out = tmp_path / "out"
    code = main(["search", str(path), "--out", str(out), "--policy", "mine", "--tolerance", "0", "--smallest", "0.25"])
    assert code == 0
    table = pd.read_csv(out / "search.csv")
    assert list(table["fraction"]) == [1.0, 0.5, 0.25] and (table["seeds"] == 3).all()
    assert list(table["final_accuracy"]) == [0.625] * 3
    assert (table["final_accuracy_min"] == 0.5).all() and (table["final_accuracy_max"] == 0.75).all()
    assert list(table["sim_time_s_max"] - table["sim_time_s_min"]) == [2.0] * 3
    assert len(pd.read_csv(out / "search_points.csv")) == 9 and (out / "search.png").stat().st_size > 0
    printed = capsys.readouterr().out
    assert "final_accuracy_min" in printed and "final_accuracy_max" in printed
    assert "smallest BSP fraction within 0 of full BSP's accuracy (mean of 3 seeds" in printed


def test_the_pick_is_judged_against_both_neighbours_by_their_seeds_spread(monkeypatch: pytest.MonkeyPatch) -> None:
    """Per seed, full BSP scores 0.95, 0.96, 0.97, 50% 0.96, 0.97, 0.98 and 25% 0.90, 0.91, 0.92;
    tolerance 0.03 (25% falls short, 50% is the pick). 95% intervals (t = 4.303 on 2 degrees of
    freedom, sd 0.01): ± 0.0248 each. The pick, 0.97, against full BSP, 0.96: 0.01 apart, they overlap,
    and 18 seeds would separate them (tests/test_seed_spread.py works the count). Against 25%, 0.91:
    0.06 apart, distinguishable."""
    import sim.experiments.search as search

    per_seed = {1.0: (0.95, 0.96, 0.97), 0.5: (0.96, 0.97, 0.98), 0.25: (0.90, 0.91, 0.92)}
    monkeypatch.setattr(search, "simulate", fake_simulate(lambda fraction, seed: per_seed[fraction][seed]))
    result = offline_search(config(), tolerance=0.03, start=0.5, smallest=0.0625)
    assert result.best == 0.5
    found = result.separation
    assert list(found["neighbour"]) == [1.0, 0.25] and list(found["overlap"]) == [True, False]
    assert found["seeds_needed"].iloc[0] == 18 and pd.isna(found["seeds_needed"].iloc[1])
    assert list(found["fraction_ci95"]) == pytest.approx([4.303 * 0.01 / 3**0.5] * 2, rel=1e-3)
    full, smaller = result.verdicts()
    assert full.startswith("the pick 50.00% (0.9700 ± 0.0248) against full BSP (0.9600 ± 0.0248; 95% intervals")
    assert full.endswith("NOT distinguishable (the intervals overlap); about 18 seeds per fraction would separate "
                         "them if the spread stayed as measured")  # fmt: skip
    assert smaller.endswith("against 25.00% (0.9100 ± 0.0248; 95% intervals over 3 seeds): distinguishable "
                            "(the intervals do not overlap)")  # fmt: skip
    assert list(result.table["final_accuracy_sd"]) == pytest.approx([0.01] * 3)
    alone = offline_search(config(), tolerance=0.03, start=0.5, smallest=0.0625, seeds=1)
    assert all("one seed per fraction shows no spread" in line for line in alone.verdicts())


def test_a_piped_search_prints_a_line_per_finished_run_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """stderr is not a terminal here (as in `syncsim search ... | tee log`): no bar, a line per run, at
    most 2 seeds x (full BSP, 50%, 25%) = 6 of them; the verdict is printed and written."""
    import re

    import sim.experiments.search as search

    monkeypatch.setattr(search, "simulate", fake_simulate(lambda fraction, seed: 0.5 + 0.125 * seed))
    path = tmp_path / "search.yaml"
    path.write_text(yaml.safe_dump(config()))
    out = tmp_path / "out"
    assert main(["search", str(path), "--out", str(out), "--seeds", "2", "--smallest", "0.25"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 6 and all(re.fullmatch(r"search: run \d of at most 6 done \(.*\), \d+ s", ln) for ln in lines)
    assert lines[0].startswith("search: run 1 of at most 6 done (fraction 100.00%, seed 0: final accuracy 0.5000)")
    assert lines[5].startswith("search: run 6 of at most 6 done (fraction 25.00%, seed 1: final accuracy 0.6250)")
    verdict = "  the pick 25.00% (0.5625 ± 0.7941) against 50.00% (0.5625 ± 0.7941; 95% intervals over 2 seeds)"
    assert verdict in captured.out  # t(1) = 12.706 times sd 0.0884 / √2 = 0.0625: two seeds say little
    assert "their means are equal, so no number of seeds would separate them" in captured.out
    written = pd.read_csv(out / "search_separation.csv")
    assert list(written["neighbour"]) == [0.5] and written["overlap"].tolist() == [True]
    assert pd.isna(written["seeds_needed"].iloc[0])  # equal means: no number of seeds separates them


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
