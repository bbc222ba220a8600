"""The sweep figure: a metric against one axis, a line per policy, the spread over seeds as a band.

Rows that share the x value, the policy and every other axis but `seed` are one point of a line:
the line is their mean, the band their min to max. Other axes with several values split the lines
further: each combination of their values is a panel of its own (beyond `MAX_PANELS`, their values
join the labels instead), so nothing is averaged away silently. Axis labels come with units,
log-spaced x values get a log axis, and the legend sits beside the data.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sim.errors import UsageError
from sim.results.labels import label, log_spaced, value_label
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


def sweep_plot(
    table: pd.DataFrame,
    metric: str,
    x: str | None,
    path_stem: Path,
    title: str,
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
    logx: bool | None = None,
    logy: bool = False,
) -> list[Path]:
    """Draw `metric` against axis `x` (lines with the seeds' min-max as bands; grouped bars with error
    bars when `x` is not numeric or None) and write it as PNG, PDF and SVG; returns the files.

    Axes are labelled with `sim.results.labels` (units included) unless `xlabel`/`ylabel` say otherwise;
    x is logarithmic when `logx`, or, left None, when its values are log-spaced (`log_spaced`)."""
    if metric not in table.columns:
        allowed = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
        raise UsageError(f"--metric: no column {metric!r} in the sweep table; allowed: {', '.join(allowed)}")
    ok = table[table["status"] == "ok"] if "status" in table else table
    numeric = x is not None and pd.api.types.is_numeric_dtype(ok[x])
    if logx and not numeric:
        raise UsageError(f"--logx: the x axis {x or 'policy'!r} is not numeric; a log scale needs numbers")
    # other axes that vary within a policy split its line (an axis that only names the policy does not)
    others = [a for a in axes_of(table) if a not in (x, "seed") and ok.groupby("policy")[a].nunique().max() > 1]
    series = []  # (policy, the other axes' values, mean, low, high) per line, indexed by x
    for keys, rows in ok.groupby(["policy", *others], sort=False, dropna=False):
        keys = keys if isinstance(keys, tuple) else (keys,)
        by_x = (rows.groupby(x, sort=True) if x is not None else rows.groupby(lambda _: ""))[metric]
        split = ", ".join(value_label(a, v) for a, v in zip(others, keys[1:]))
        series.append((str(keys[0]), split, by_x.mean(), by_x.min(), by_x.max()))
    seeds = table["seed"].nunique() if "seed" in table else 1
    splits = list(dict.fromkeys(s[1] for s in series))
    panels = splits if len(splits) <= MAX_PANELS else [""]  # beyond that, one panel, the values in the labels
    ncols = 2 if len(panels) == 4 else min(len(panels), 3)
    nrows = -(-len(panels) // ncols)
    fig, grid = figure(nrows, ncols, figsize=(5.0 * ncols + 0.5, 4.0 * nrows), squeeze=False, sharey=True)
    policies = list(dict.fromkeys(s[0] for s in series))
    for ax, panel in zip(grid.flat, panels):
        mine = [s for s in series if len(panels) == 1 or s[1] == panel]
        if numeric:
            _lines(ax, mine, policies, seeds)
            if logx if logx is not None else log_spaced(ok[x]):
                ax.set_xscale("log")
                values = sorted(ok[x].dropna().unique())
                ax.set_xticks(values, [f"{v:g}" for v in values])  # the swept values, not powers of ten
                ax.minorticks_off()
        else:
            _bars(ax, mine, seeds)
        if logy:
            ax.set_yscale("log")
        if panel and len(panels) > 1:
            ax.set_title(panel, fontsize=10)
        ax.set_xlabel(xlabel or (label(x) if x is not None else "Policy"))
        ax.grid(alpha=0.3)
    for ax in grid.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in grid[:, 0]:
        ax.set_ylabel(ylabel or label(metric))
    spread = "band" if numeric else "error bar"
    fig.suptitle(title + (f" ({seeds} seeds: mean, {spread} = min-max)" if seeds > 1 else ""), fontsize=10)
    handles, texts = grid[0, 0].get_legend_handles_labels()  # every panel has every policy
    fig.tight_layout()
    fig.legend(handles, texts, loc="upper left", bbox_to_anchor=(1.0, 0.92), frameon=False, fontsize=9)  # beside
    written = []
    for fmt in FORMATS:
        target = path_stem.with_suffix(f".{fmt}")
        save_figure(fig, target)
        written.append(target)
    return written


MAX_PANELS = 6  # the other axes' value combinations drawn as panels side by side
Series = tuple[str, str, pd.Series, pd.Series, pd.Series]


def _lines(ax: Axes, series: list[Series], policies: list[str], seeds: int) -> None:
    """A colour, line style and marker per policy, the same in every panel; later lines are thinner
    (`line_styles`), so a line drawn over an equal one leaves it showing."""
    styles = line_styles(len(policies), markers=True)
    splits = list(dict.fromkeys(s[1] for s in series))
    banded = False
    for i, (policy, split, mean, low, high) in enumerate(series):
        at = policies.index(policy)
        style = styles[at] if len(splits) == 1 else line_styles(len(series), markers=True)[i]
        color = f"C{at % 10}" if len(splits) == 1 else None
        text = f"{policy}, {split}" if split and len(splits) > 1 else policy
        (line,) = ax.plot(mean.index, mean.values, label=text, color=color, **style)
        if (high > low).any():  # several seeds: their range
            ax.fill_between(mean.index, low.values, high.values, color=line.get_color(), alpha=0.2, linewidth=0)
            banded = True
    if banded:  # the bands, named once
        ax.fill_between([], [], [], color="0.5", alpha=0.3, linewidth=0, label=f"min-max over {seeds} seeds")


def _bars(ax: Axes, series: list[Series], seeds: int) -> None:
    """A group of bars per x value, a bar per line; error bars from the seeds' min to max."""
    groups = list(dict.fromkeys(v for *_, mean, _, _ in series for v in mean.index))
    splits = list(dict.fromkeys(s[1] for s in series))
    width = 0.8 / max(1, len(series))
    barred = False
    for i, (policy, split, mean, low, high) in enumerate(series):
        at = [groups.index(v) + (i - (len(series) - 1) / 2) * width for v in mean.index]
        errors = [(mean - low).to_numpy(), (high - mean).to_numpy()]
        text = f"{policy}, {split}" if split and len(splits) > 1 else policy
        ax.bar(at, mean.values, width * 0.95, yerr=errors if (high > low).any() else None, capsize=3, label=text)
        barred = barred or bool((high > low).any())
    if barred:  # the error bars, named once
        ax.errorbar([], [], yerr=[], color="black", capsize=3, ls="none", label=f"min-max over {seeds} seeds")
    ax.set_xticks(range(len(groups)), [str(g) for g in groups], rotation=15 if len(groups) > 4 else 0)
