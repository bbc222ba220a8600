"""The sweep figure: a metric against one axis, a line per policy, the spread over seeds as a band.

Rows that share the x value, the policy and every other axis but `seed` are one point of a line:
the line is their mean, the band their min to max. Other axes with several values split the lines
further (their values join the label), so nothing is averaged away silently.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import ConfigError
from sim.plots import plt, save_figure

FORMATS = ("png", "pdf", "svg")


def axes_of(table: pd.DataFrame) -> list[str]:
    """The sweep's axis columns: those between `key` and the summary's `policy`."""
    columns = list(table.columns)
    return columns[columns.index("key") + 1 : columns.index("policy")]


def pick_x(table: pd.DataFrame, x: str | None) -> str:
    axes = [a for a in axes_of(table) if a != "seed"]
    if x is not None:
        if x not in axes:
            raise ConfigError(f"--x: {x!r} is not an axis of this sweep; allowed: {', '.join(axes) or '(none)'}")
        return x
    numeric = [a for a in axes if pd.api.types.is_numeric_dtype(table[a]) and table[a].nunique() > 1]
    varied = [a for a in axes if table[a].nunique() > 1]
    if not (numeric or varied):
        raise ConfigError("--x: the sweep has no axis with several values (only seeds?)")
    return (numeric or varied)[0]


def sweep_plot(table: pd.DataFrame, metric: str, x: str, path_stem: Path, title: str) -> list[Path]:
    """Draw `metric` against axis `x` and write it as PNG, PDF and SVG; returns the files."""
    if metric not in table.columns:
        allowed = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
        raise ConfigError(f"--metric: no column {metric!r} in the sweep table; allowed: {', '.join(allowed)}")
    ok = table[table["status"] == "ok"] if "status" in table else table
    # other axes that vary within a policy split its line (an axis that only names the policy does not)
    others = [a for a in axes_of(table) if a not in (x, "seed") and ok.groupby("policy")[a].nunique().max() > 1]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for keys, rows in ok.groupby(["policy", *others], sort=False, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        label = ", ".join([str(keys[0]), *(f"{a}={v}" for a, v in zip(others, keys[1:]))])
        by_x = rows.groupby(x, sort=True)[metric]
        mean, low, high = by_x.mean(), by_x.min(), by_x.max()
        (line,) = ax.plot(mean.index, mean.values, marker="o", markersize=3, label=label)
        if (high > low).any():  # several seeds: their range
            ax.fill_between(mean.index, low.values, high.values, color=line.get_color(), alpha=0.2, linewidth=0)
    seeds = table["seed"].nunique() if "seed" in table else 1
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.set_title(f"{title}" + (f" ({seeds} seeds: mean, band = min-max)" if seeds > 1 else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    written = []
    for fmt in FORMATS:
        target = path_stem.with_suffix(f".{fmt}")
        save_figure(fig, target, close=False)
        written.append(target)
    plt.close(fig)
    return written
