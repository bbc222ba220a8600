"""Interactive figures of one run for the HTML report (plotly): hover for values, click a legend entry to
hide or show a policy or a term.

One colour per policy across every figure, and distinct colours for distinct meanings: the three parts
of an iteration (compute, communication, waiting) take colours no policy takes, and throughput is drawn
in its own panel, in a colour of neither. Panels that compare policies share their axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from sim.results.result import Result

GIB = 2.0**30
# the parts of an iteration: colours outside the policies' palette (plotly's Plotly set, below)
PARTS = {"mean_compute_s": ("compute", "#4C72B0"), "mean_comm_s": ("communication", "#DD8452")}
PARTS["mean_wait_s"] = ("waiting", "#8C8C8C")
THROUGHPUT_COLOUR = "#55A868"
MEMORY_TERMS = {
    "parameters_bytes": ("parameters", "#4C72B0"),
    "gradients_bytes": ("gradients", "#DD8452"),
    "optimizer_bytes": ("optimizer state", "#C44E52"),
    "activations_bytes": ("activations", "#8172B3"),
    "buffers_bytes": ("communication buffers", "#937860"),
}


def policy_colours(policies: Sequence[str]) -> dict[str, str]:
    """A colour per policy, in the order given (the summary's), the same in every figure."""
    palette = qualitative.Plotly
    return {policy: palette[i % len(palette)] for i, policy in enumerate(policies)}


def _layout(fig: go.Figure, title: str, height: int) -> go.Figure:
    fig.update_layout(
        title={"text": title, "x": 0.0},
        height=height,
        template="plotly_white",
        # above the plot, right of the title: never over data or an axis title, whatever the height
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1.0, "font": {"size": 13}},
        margin={"l": 80, "r": 20, "t": 90, "b": 60},
        hovermode="closest",
    )
    return fig


def breakdown(summary: pd.DataFrame, time_label: str) -> go.Figure:
    """Per policy: the mean iteration split into compute, communication and waiting (left), and
    throughput (right, its own axis and colour)."""
    labels = summary["policy"].astype(str).tolist()
    fig = make_subplots(
        rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.04, subplot_titles=("mean iteration", "throughput")
    )
    for column, (name, colour) in PARTS.items():
        if column in summary:
            fig.add_bar(
                y=labels, x=summary[column], name=name, orientation="h", marker_color=colour,
                hovertemplate="%{y}: %{x:.4g} s " + name + "<extra></extra>", row=1, col=1,
            )  # fmt: skip
    fig.add_bar(
        y=labels, x=summary["throughput_samples_s"], name="throughput", orientation="h",
        marker_color=THROUGHPUT_COLOUR, hovertemplate="%{y}: %{x:.4g} samples/s<extra></extra>", row=1, col=2,
    )  # fmt: skip
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text=time_label, row=1, col=1)
    fig.update_xaxes(title_text="samples/s", row=1, col=2)
    _layout(fig, "Where an iteration goes, and what it delivers", 160 + 45 * len(labels))
    # beside the panels: above them it would cover the panels' titles
    fig.update_layout(legend={"orientation": "v", "yanchor": "top", "y": 1.0, "xanchor": "left", "x": 1.01})
    return fig


def iteration_times(iterations: pd.DataFrame, colours: dict[str, str]) -> Optional[go.Figure]:
    """Each iteration's time (the slowest rank's), per policy."""
    if iterations.empty or "iteration_s" not in iterations:
        return None
    per = iterations.groupby(["policy", "iteration"], sort=False)["iteration_s"].max().reset_index()
    fig = go.Figure()
    for policy, rows in per.groupby("policy", sort=False):
        fig.add_scatter(
            x=rows["iteration"], y=rows["iteration_s"], mode="lines+markers", name=str(policy),
            line={"color": colours.get(str(policy))},
            hovertemplate=f"{policy}" + ": iteration %{x}, %{y:.4g} s<extra></extra>",
        )  # fmt: skip
    fig.update_xaxes(title_text="iteration")
    fig.update_yaxes(title_text="iteration time (s)", rangemode="tozero")
    return _layout(fig, "Iteration time, iteration by iteration", 380)


def utilization(table: pd.DataFrame, colours: dict[str, str], time_label: str) -> Optional[go.Figure]:
    """Per policy (a panel each, one shared time axis and one shared 0-1 axis): the mean and the busiest
    link's utilization of each kind of link over time."""
    if table.empty:
        return None
    policies = list(dict.fromkeys(table["policy"].astype(str)))
    fig = make_subplots(
        rows=len(policies), cols=1, shared_xaxes=True, shared_yaxes=True, vertical_spacing=0.06,
        subplot_titles=policies,
    )  # fmt: skip
    kinds = list(dict.fromkeys(table["kind"].astype(str)))
    palette = qualitative.Dark24
    kind_colour = {kind: palette[i % len(palette)] for i, kind in enumerate(kinds)}
    for row, policy in enumerate(policies, start=1):
        rows = table[table["policy"].astype(str) == policy]
        for kind, links in rows.groupby("kind", sort=False):
            by_time = links.groupby("time_s")["utilization"]
            for stat, dash in (("mean", "solid"), ("max", "dot")):
                series = getattr(by_time, stat)()
                fig.add_scatter(
                    x=series.index, y=series.values, mode="lines", name=f"{kind} ({stat})",
                    legendgroup=f"{kind} ({stat})", showlegend=row == 1,
                    line={"color": kind_colour[str(kind)], "dash": dash, "width": 1.5},
                    hovertemplate=f"{policy}, {kind} links, {stat}" + ": %{y:.0%} at %{x:.4g} s<extra></extra>",
                    row=row, col=1,
                )  # fmt: skip
        fig.update_yaxes(range=[0, 1.05], tickformat=".0%", row=row, col=1)
    fig.update_xaxes(title_text=time_label, row=len(policies), col=1)
    title = "Link utilization by kind of link: mean (solid) and the busiest link (dotted)"
    return _layout(fig, title, 110 + 170 * len(policies))


def memory(table: pd.DataFrame) -> Optional[go.Figure]:
    """Per policy: the predicted peak memory per GPU by term, against the GPU's capacity."""
    if table.empty:
        return None
    labels = table["policy"].astype(str).tolist()
    fig = go.Figure()
    for column, (name, colour) in MEMORY_TERMS.items():
        if column in table:
            fig.add_bar(
                y=labels, x=table[column] / GIB, name=name, orientation="h", marker_color=colour,
                hovertemplate="%{y}: %{x:.3g} GiB " + name + "<extra></extra>",
            )  # fmt: skip
    capacity = float(table["capacity_bytes"].max()) / GIB
    fig.add_vline(x=capacity, line_dash="dash", line_color="black", annotation_text=f"GPU: {capacity:.0f} GiB")
    fig.update_layout(barmode="stack")
    fig.update_xaxes(title_text="peak memory per GPU (GiB)")
    return _layout(fig, "Peak memory per GPU, by what holds it", 140 + 45 * len(labels))


def accuracy(table: Optional[pd.DataFrame], colours: dict[str, str], time_label: str) -> Optional[go.Figure]:
    """Numerics mode: the consensus model's test accuracy over time, per policy."""
    if table is None or table.empty or "accuracy" not in table:
        return None
    if "worker" in table:  # the consensus model's rows (worker -1), not each replica's
        table = table[table["worker"] == -1]
    x = "time_s" if "time_s" in table else "iteration"
    fig = go.Figure()
    for policy, rows in table.groupby("policy", sort=False):
        fig.add_scatter(
            x=rows[x], y=rows["accuracy"], mode="lines+markers", name=str(policy),
            line={"color": colours.get(str(policy))},
            hovertemplate=f"{policy}" + ": %{y:.3f} at %{x:.4g}<extra></extra>",
        )  # fmt: skip
    fig.update_xaxes(title_text=time_label if x == "time_s" else "iteration")
    fig.update_yaxes(title_text="test accuracy")
    return _layout(fig, "Time to accuracy", 380)


def run_figures(result: Result) -> list[go.Figure]:
    """Every figure a run's tables support, in the report's order."""
    summary, time_label = result.summary, result.time_label
    colours = policy_colours(summary["policy"].astype(str).tolist())
    figures = [
        breakdown(summary, time_label),
        iteration_times(result.iterations, colours),
        accuracy(result.accuracy, colours, time_label),
        utilization(result.utilization, colours, time_label),
        memory(result.memory),
    ]
    return [fig for fig in figures if fig is not None]
