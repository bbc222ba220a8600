"""The sweep figure: a metric against one axis, a line per policy, the spread over seeds as a band.

Rows that share the x value, the policy and every other axis but `seed` are one point of a line:
the line is their mean, the band their min to max. Other axes with several values split the lines
further (their values join the label), so nothing is averaged away silently.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import UsageError
from sim.results.plots import Axes, figure, line_styles, save_figure

FORMATS = ("png", "pdf", "svg")


def axes_of(table: pd.DataFrame) -> list[str]:
    """The sweep's axis columns: those between `key` and the summary's `policy`."""
    columns = list(table.columns)
    return columns[columns.index("key") + 1 : columns.index("policy")]


def pick_x(table: pd.DataFrame, x: str | None) -> str | None:
    """The x axis: `x` if it is one, else the first numeric axis that varies, else the first that
    varies; None when only seeds vary (the figure is then a bar per policy with the seeds' spread)."""
    axes = [a for a in axes_of(table) if a != "seed"]
    if x is not None:
        if x not in axes:
            raise UsageError(f"--x: {x!r} is not an axis of this sweep; allowed: {', '.join(axes) or '(none)'}")
        return x
    numeric = [a for a in axes if pd.api.types.is_numeric_dtype(table[a]) and table[a].nunique() > 1]
    varied = [a for a in axes if table[a].nunique() > 1]
    return (numeric or varied or [None])[0]


def sweep_plot(table: pd.DataFrame, metric: str, x: str | None, path_stem: Path, title: str) -> list[Path]:
    """Draw `metric` against axis `x` (lines with the seeds' min-max as bands; grouped bars with error
    bars when `x` is not numeric or None) and write it as PNG, PDF and SVG; returns the files."""
    if metric not in table.columns:
        allowed = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
        raise UsageError(f"--metric: no column {metric!r} in the sweep table; allowed: {', '.join(allowed)}")
    ok = table[table["status"] == "ok"] if "status" in table else table
    # other axes that vary within a policy split its line (an axis that only names the policy does not)
    others = [a for a in axes_of(table) if a not in (x, "seed") and ok.groupby("policy")[a].nunique().max() > 1]
    series = []  # (label, mean, low, high) per line, indexed by x
    for keys, rows in ok.groupby(["policy", *others], sort=False, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        label = ", ".join([str(keys[0]), *(f"{a}={v}" for a, v in zip(others, keys[1:]))])
        by_x = (rows.groupby(x, sort=True) if x is not None else rows.groupby(lambda _: ""))[metric]
        series.append((label, by_x.mean(), by_x.min(), by_x.max()))
    seeds = table["seed"].nunique() if "seed" in table else 1
    fig, ax = figure(figsize=(7.5, 4.5))
    if x is not None and pd.api.types.is_numeric_dtype(ok[x]):
        _lines(ax, series)
    else:
        _bars(ax, series)
    ax.set_xlabel(x if x is not None else "policy")
    ax.set_ylabel(metric)
    spread = "band" if x is not None and pd.api.types.is_numeric_dtype(ok[x]) else "error bar"
    ax.set_title(title + (f" ({seeds} seeds: mean, {spread} = min-max)" if seeds > 1 else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    written = []
    for fmt in FORMATS:
        target = path_stem.with_suffix(f".{fmt}")
        save_figure(fig, target)
        written.append(target)
    return written


Series = tuple[str, pd.Series, pd.Series, pd.Series]


def _lines(ax: Axes, series: list[Series]) -> None:
    for (label, mean, low, high), style in zip(series, line_styles(len(series))):
        (line,) = ax.plot(mean.index, mean.values, marker="o", markersize=3, label=label, **style)
        if (high > low).any():  # several seeds: their range
            ax.fill_between(mean.index, low.values, high.values, color=line.get_color(), alpha=0.2, linewidth=0)


def _bars(ax: Axes, series: list[Series]) -> None:
    """A group of bars per x value, a bar per line; error bars from the seeds' min to max."""
    groups = list(dict.fromkeys(v for _, mean, _, _ in series for v in mean.index))
    width = 0.8 / max(1, len(series))
    for i, (label, mean, low, high) in enumerate(series):
        at = [groups.index(v) + (i - (len(series) - 1) / 2) * width for v in mean.index]
        errors = [(mean - low).to_numpy(), (high - mean).to_numpy()]
        ax.bar(at, mean.values, width * 0.95, yerr=errors if (high > low).any() else None, capsize=3, label=label)
    ax.set_xticks(range(len(groups)), [str(g) for g in groups], rotation=15 if len(groups) > 4 else 0)
