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
    assert "3 seeds: mean, error bar = min-max" in ax.get_title()


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
    assert len(ax.collections) == 2  # a band each


def test_an_axis_named_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="--x: 'seed' is not an axis of this sweep; allowed: workload.model"):
        pick_x(table("workload.model", ["a", "b"]), "seed")
