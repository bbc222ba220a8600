"""Interactive figures of a sweep for the HTML report (plotly): each summary metric against the sweep's
x axis, a line per policy (and per combination of the other axes), the seeds' min-max as error bars; a
menu switches the metric.

Rows that share the x value, the policy and every other axis but `seed` are one point: its mean, with
the seeds' range around it, as the static sweep figure does (sim/experiments/sweep_plot.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import pandas as pd
import plotly.graph_objects as go

from sim.experiments.sweep_plot import axes_of, pick_x
from sim.report.run_figures import policy_colours
from sim.results.labels import label, log_spaced

# the summary columns a sweep report offers, in the menu's order (those present in the table)
METRICS = (
    "throughput_samples_s",
    "mean_iteration_s",
    "p99_iteration_s",
    "mean_comm_s",
    "mean_wait_s",
    "scaling_efficiency",
    "network_bytes_per_iteration",
    "peak_memory_gib",
    "final_accuracy",
    "time_to_target_s",
)


def _series(table: pd.DataFrame, metric: str, x: Optional[str], groups: Sequence[str]) -> pd.DataFrame:
    """Mean, min and max of `metric` over seeds, per group and x value."""
    keys = [*groups, *([x] if x else [])]
    stats = table.groupby(keys, sort=False, dropna=False)[metric].agg(["mean", "min", "max"]).reset_index()
    return stats.sort_values(keys) if x else stats


def sweep_figure(table: pd.DataFrame, name: str, x: Optional[str] = None) -> go.Figure:
    """The sweep's metrics against axis `x` (the first numeric axis that varies by default), one metric
    shown at a time; `name` (the config's) titles it."""
    x = pick_x(table, x)
    others = [a for a in axes_of(table) if a not in ("seed", x) and table[a].nunique() > 1]
    groups = ["policy", *others]
    colours = policy_colours(list(dict.fromkeys(table["policy"].astype(str))))
    metrics = [m for m in METRICS if m in table and table[m].notna().any()]
    fig = go.Figure()
    counts: list[int] = []  # traces per metric, contiguous in the figure
    for m_index, metric in enumerate(metrics):
        stats = _series(table, metric, x, groups)
        traces = 0
        for key, rows in stats.groupby(groups, sort=False, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            legend = ", ".join(str(k) for k in key)
            hover = f"{legend}: " + "%{y:.4g}" + (f" at {x} = " + "%{x}" if x else "") + "<extra></extra>"
            fig.add_scatter(
                x=rows[x] if x else [legend], y=rows["mean"], name=legend, mode="lines+markers" if x else "markers",
                error_y={"type": "data", "symmetric": False, "array": rows["max"] - rows["mean"],
                         "arrayminus": rows["mean"] - rows["min"]},
                line={"color": colours.get(str(key[0]))}, visible=m_index == 0, hovertemplate=hover,
            )  # fmt: skip
            traces += 1
        counts.append(traces)
    buttons = []  # a menu entry shows its metric's traces and hides the rest
    for i, metric in enumerate(metrics):
        visible = [j == i for j, n in enumerate(counts) for _ in range(n)]
        buttons.append({"label": label(metric), "method": "update", "args": [{"visible": visible},
                        {"yaxis": {"title": {"text": label(metric)}}}]})  # fmt: skip
    fig.update_layout(
        title={"text": f"Sweep {name}: each point the mean over seeds, bars their range", "x": 0.0},
        template="plotly_white",
        height=480,
        updatemenus=[{"buttons": buttons, "x": 1.0, "xanchor": "right", "y": 1.12, "yanchor": "bottom"}],
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0, "font": {"size": 13}},
        margin={"l": 80, "r": 20, "t": 130, "b": 60},
    )
    if x:
        numeric = pd.api.types.is_numeric_dtype(table[x])
        log = numeric and bool(log_spaced(sorted(table[x].dropna().unique())))
        fig.update_xaxes(title_text=label(x), type="log" if log else None)
    if metrics:
        fig.update_yaxes(title_text=label(metrics[0]))
    return fig
