"""The sweep figure from a synthetic table: lines and bands for a numeric axis, grouped bars with the
seeds' min-max as error bars for a categorical axis or for seeds alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.errors import ConfigError
from sim.experiments.sweep_plot import pick_x, sweep_plot


def table(axis: str | None, values: list, seeds: int = 3) -> pd.DataFrame:
    rows = []
    for value in values if axis else [None]:
        for seed in range(seeds):
            for policy, base in (("ring", 100.0), ("ds_sync", 200.0)):
                row = {"point": len(rows), "key": f"k{len(rows)}", "seed": seed, "policy": policy, "status": "ok"}
                if axis:
                    row = {"point": row.pop("point"), "key": row.pop("key"), axis: value, **row}
                rows.append({**row, "throughput_samples_s": base + 10 * seed})
    return pd.DataFrame(rows)


def test_seeds_alone_give_a_bar_per_policy_with_min_max_error_bars(drawn: list, tmp_path: Path) -> None:
    t = table(None, [])
    assert pick_x(t, None) is None
    sweep_plot(t, "throughput_samples_s", None, tmp_path / "s", "seeds only")
    ax = drawn[0].axes[0]
    bars = [p.get_height() for p in ax.patches]
    assert bars == pytest.approx([110.0, 210.0])  # the mean over seeds 0, 1, 2
    caps = [c for c in ax.containers if hasattr(c, "errorbar") and c.errorbar is not None]
    segments = [seg for c in caps for seg in c.errorbar.lines[2][0].get_segments()]
    assert sorted((s[0][1], s[1][1]) for s in segments) == [(100.0, 120.0), (200.0, 220.0)]  # min to max
    assert "3 seeds: mean, error bar = min-max" in drawn[0]._suptitle.get_text()


def test_a_categorical_axis_gives_grouped_bars(drawn: list, tmp_path: Path) -> None:
    t = table("workload.model", ["resnet50", "bert_large"])
    assert pick_x(t, None) == "workload.model"
    sweep_plot(t, "throughput_samples_s", "workload.model", tmp_path / "s", "models")
    ax = drawn[0].axes[0]
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["bert_large", "resnet50"]  # sorted groups
    assert len(ax.patches) == 4


def test_a_numeric_axis_gives_lines_and_bands_that_stay_visible(drawn: list, tmp_path: Path) -> None:
    t = table("cluster.uplink_gbps", [10, 25, 100])
    t.loc[t["policy"] == "ds_sync", "throughput_samples_s"] -= 100  # the two lines coincide
    sweep_plot(t, "throughput_samples_s", pick_x(t, None), tmp_path / "s", "uplinks")
    ax = drawn[0].axes[0]
    ring, ds = ax.lines
    assert np.array_equal(ring.get_ydata(), ds.get_ydata())
    assert (ring.get_linestyle(), ring.get_linewidth()) != (ds.get_linestyle(), ds.get_linewidth())
    assert len([c for c in ax.collections if len(c.get_paths())]) == 2  # a band each
    legend = drawn[0].legends[0]  # one legend, beside the panel
    assert [t.get_text() for t in legend.get_texts()] == ["ring", "ds_sync", "min-max over 3 seeds"]
    assert ax.get_legend() is None


def test_axes_say_what_they_show_with_units_and_log_spaced_bandwidths_get_a_log_axis(
    drawn: list, tmp_path: Path
) -> None:
    t = table("cluster.uplink_gbps", [100, 25, 12.5, 6.25])
    sweep_plot(t, "throughput_samples_s", "cluster.uplink_gbps", tmp_path / "s", "uplinks")
    ax = drawn[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("Uplink bandwidth (Gbit/s)", "Throughput (samples/s)")
    assert ax.get_xscale() == "log" and ax.get_yscale() == "linear"
    assert [tick.get_text() for tick in ax.get_xticklabels()] == ["6.25", "12.5", "25", "100"]  # the swept values
    even = table("cluster.hosts_per_rack", [2, 4, 6, 8])
    sweep_plot(even, "throughput_samples_s", "cluster.hosts_per_rack", tmp_path / "e", "")
    assert drawn[-1].axes[0].get_xscale() == "linear"


def test_labels_and_scales_can_be_set(drawn: list, tmp_path: Path) -> None:
    t = table("cluster.uplink_gbps", [100, 25, 12.5, 6.25])
    sweep_plot(t, "throughput_samples_s", "cluster.uplink_gbps", tmp_path / "s", "", xlabel="Uplink", ylabel="Rate",
               logx=False, logy=True)  # fmt: skip
    ax = drawn[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale(), ax.get_yscale()) == ("Uplink", "Rate", "linear", "log")
    with pytest.raises(ConfigError, match="--logx: the x axis 'workload.model' is not numeric"):
        sweep_plot(table("workload.model", ["a", "b"]), "throughput_samples_s", "workload.model", tmp_path / "m", "",
                   logx=True)  # fmt: skip


def test_another_axis_gives_a_panel_per_value_with_the_policies_styled_alike(drawn: list, tmp_path: Path) -> None:
    t = pd.concat([table("cluster.uplink_gbps", [10, 100]).assign(**{"cluster.placement": p}) for p in ("a", "b")])
    t = t[["point", "key", "cluster.uplink_gbps", "cluster.placement", "seed", "policy", "status",
           "throughput_samples_s"]]  # fmt: skip
    sweep_plot(t, "throughput_samples_s", "cluster.uplink_gbps", tmp_path / "s", "")
    left, right = drawn[0].axes
    assert (left.get_title(), right.get_title()) == ("rank placement: a", "rank placement: b")
    looks = [[(line.get_color(), line.get_linestyle(), line.get_marker()) for line in ax.lines] for ax in (left, right)]
    assert looks[0] == looks[1] and len(set(looks[0])) == 2  # a policy looks the same in every panel


def test_plot_takes_labels_and_scales_for_a_sweep_but_not_for_a_run(
    drawn: list, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.cli.main import main

    table("cluster.uplink_gbps", [100, 25, 12.5, 6.25]).to_csv(tmp_path / "sweep.csv", index=False)
    assert main(["plot", str(tmp_path), "--no-logx", "--logy", "--xlabel", "Uplink", "--ylabel", "Rate"]) == 0
    ax = drawn[0].axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_xscale(), ax.get_yscale()) == ("Uplink", "Rate", "linear", "log")
    assert main(["plot", str(tmp_path)]) == 0
    assert drawn[-1].axes[0].get_xscale() == "log"  # detected
    run = tmp_path / "run"
    run.mkdir()
    assert main(["plot", str(run), "--logx"]) == 2
    assert "--logx: only for a sweep folder" in capsys.readouterr().err


def test_an_axis_named_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="--x: 'seed' is not an axis of this sweep; allowed: workload.model"):
        pick_x(table("workload.model", ["a", "b"]), "seed")
