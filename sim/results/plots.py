"""The PNGs: where iteration time goes and throughput per policy; link utilisation; staleness.

Every figure draws only finite values (`finite_rows`): a NaN or an infinity (a run whose times
overflowed, a table edited by hand) would stop matplotlib (`Axis limits cannot be NaN or Inf`) or vanish
silently, so such rows are left out and a note under the figure says how many and whose.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from sim.files import atomic_path
from sim.results.labels import link_names


def figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (7, 4), **kwargs: Any) -> tuple[Figure, Any]:
    """A figure and its axes (as `plt.subplots` gives them) that pyplot never sees: drawing files
    here neither needs a display nor changes the backend of a notebook that imported syncsim."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **kwargs)


def comparison_plot(
    summary: pd.DataFrame,
    iterations: pd.DataFrame,
    path: Path,
    phases: pd.DataFrame | None = None,
    config_name: str | None = None,
    time_label: str = "simulated time (s)",
) -> None:
    """Where each policy's iteration time goes (stacked components, in greys: `TIME_COLORS`), its
    throughput and its progress, the last two in the policy's own colour (`policy_colors`), so a colour
    means one thing across the figure."""
    ok = summary.dropna(subset=["mean_iteration_s"])
    ms = ok[["mean_compute_s", "mean_comm_s", "mean_wait_s", "p99_iteration_s"]] * 1e3  # as drawn: in ms
    drawn = finite(ms.assign(total=ms.sum(axis=1), tput=ok["throughput_samples_s"]))
    left_out = [f"policy {p}" for p in ok.loc[~drawn, "policy"]]
    ok = ok[drawn]
    iterations, dropped = finite_rows(iterations, ["end_s"])
    left_out += [f"{dropped} iteration end(s)"] if dropped else []
    fig, (ax_time, ax_tput, ax_iter) = figure(1, 3, figsize=(16, 4.4))
    labels = list(ok["policy"])
    colors = policy_colors(len(labels))
    x = range(len(labels))
    bottom = pd.Series(0.0, index=ok.index)
    for column, name in (("mean_compute_s", "compute"), ("mean_comm_s", "communication"), ("mean_wait_s", "wait")):
        ax_time.bar(x, ok[column] * 1e3, bottom=bottom * 1e3, label=name, **TIME_COLORS[name])
        bottom = bottom + ok[column]
    ax_time.scatter(x, ok["p99_iteration_s"] * 1e3, color="black", marker="_", s=300, zorder=3, label="p99 iteration")
    ax_time.set_ylabel("Time per iteration (ms, mean)")
    ax_time.set_title("Iteration time")
    handles = dict(zip(*reversed(ax_time.get_legend_handles_labels())))
    order = ["p99 iteration", "wait", "communication", "compute"]  # top to bottom, as the bars stack
    beside(ax_time, handles=[handles[name] for name in order], labels=order)
    ax_tput.bar(x, ok["throughput_samples_s"], color=colors)
    ax_tput.set_ylabel("Throughput (samples/s)")
    ax_tput.set_title("Throughput")
    for ax in (ax_time, ax_tput):
        ax.set_xticks(list(x), labels, rotation=20, ha="right")
    done = iterations.sort_values("end_s").groupby("policy", sort=False)
    for label, style, color in zip(labels, line_styles(len(labels)), colors):
        rows = done.get_group(label) if label in done.groups else iterations.iloc[:0]
        workers = rows["rank"].nunique() or 1
        steps = pd.RangeIndex(1, len(rows) + 1) / workers
        ax_iter.plot(rows["end_s"], steps, label=label, color=color, **style)
        shade_phases(ax_iter, phases, label, color)
    ax_iter.set_xlabel(time_label[:1].upper() + time_label[1:])
    ax_iter.set_ylabel("Updates per worker")
    ax_iter.set_title("Progress")
    beside(ax_iter)
    footnote(fig, not_finite(left_out))
    save_captioned(fig, path, config_name)


# The time components in greys (wait also hatched): no policy's colour is a grey (`policy_colors`),
# so a bar's colour says either "this policy" or "this part of an iteration", never both.
TIME_COLORS: dict[str, dict[str, Any]] = {
    "compute": {"color": "0.82", "edgecolor": "white", "lw": 0.5},
    "communication": {"color": "0.45", "edgecolor": "white", "lw": 0.5},
    "wait": {"color": "white", "edgecolor": "0.2", "hatch": "////", "lw": 0.5},
}
# matplotlib's default cycle less its grey (tab:gray), which the time components own
POLICY_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
                 "tab:olive", "tab:cyan")  # fmt: skip


def policy_colors(count: int) -> list[str]:
    """A colour per policy, in order (repeating after nine; the line styles still tell them apart)."""
    return [POLICY_COLORS[i % len(POLICY_COLORS)] for i in range(count)]


def utilization_plot(utilization: pd.DataFrame, path: Path, config_name: str | None = None) -> bool:
    """Link utilisation over time, one panel per policy, all on the same time and utilisation axes (a
    fast policy's bursts look short beside a slow one's because they are). Links whose curves are
    identical (the symmetric uplinks of a balanced scheme) are drawn once and named together (`tor0,
    tor1 ↔ core0`); beyond `MAX_LINES` distinct curves (Zen's directions on four racks) a panel shows
    each kind's mean and min-max band instead. NIC links, if sampled, appear as their mean. A policy
    that sent nothing (`no_sync`) gets no panel, only a note; returns whether a figure was written
    (none when no policy sent anything)."""
    policies = list(dict.fromkeys(utilization["policy"]))
    utilization, dropped = finite_rows(utilization, ["time_s", "utilization"])
    busy = [p for p in policies if (utilization.loc[utilization["policy"] == p, "utilization"] > 0).any()]
    if not busy:
        return False
    fig, axes = figure(len(busy), 1, figsize=(10, 2.4 * len(busy)), squeeze=False, sharex=True, sharey=True)
    for ax, label in zip(axes[:, 0], busy):
        rows = utilization[utilization["policy"] == label]
        network = rows[rows["kind"] != "nic"]
        curves = network.pivot_table(index="time_s", columns="link", values="utilization", sort=False)
        groups = identical_columns(curves)
        if len(groups) <= MAX_LINES:
            for names, style in zip(groups, line_styles(len(groups))):
                ax.plot(curves.index, curves[names[0]].to_numpy(), label=link_names(names), **style)
        else:
            for kind, links in network.groupby("kind", sort=False)["link"]:
                kind_curves = curves[list(dict.fromkeys(links))]
                named = f"{kind} links ({kind_curves.shape[1]})"
                (line,) = ax.plot(kind_curves.index, kind_curves.mean(axis=1), lw=1.2, label=f"{named}: mean")
                ax.fill_between(kind_curves.index, kind_curves.min(axis=1), kind_curves.max(axis=1),
                                color=line.get_color(), alpha=0.25, lw=0, label=f"{named}: min-max")  # fmt: skip
        nics = rows[rows["kind"] == "nic"]
        if len(nics):
            mean = nics.groupby("time_s")["utilization"].mean()
            ax.plot(mean.index, mean.to_numpy(), lw=1.2, color="black", ls="--", label="NICs (mean)")
        ax.set_ylabel("Utilisation")
        ax.set_title(label, fontsize=10, loc="left")
        beside(ax)
    axes[0, 0].set_ylim(0, 1.05)  # shared: every panel's scale
    axes[0, 0].set_xlim(0, utilization.loc[utilization["policy"].isin(busy), "time_s"].max())
    axes[-1, 0].set_xlabel("Simulated time (s)")  # one time axis for all panels, labelled once
    idle = [p for p in policies if p not in busy]
    notes = [f"not shown, no network traffic: {', '.join(idle)}"] if idle else []
    footnote(fig, notes + not_finite([f"{dropped} sample(s)"] if dropped else []))
    save_captioned(fig, path, config_name)
    return True


def finite(values: pd.DataFrame) -> pd.Series:
    """Which rows of `values` (numbers) are finite throughout."""
    return pd.Series(np.isfinite(values.to_numpy(dtype=float)).all(axis=1), index=values.index)


def finite_rows(frame: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, int]:
    """The rows of `frame` whose `columns` are all finite, and how many rows were left out."""
    keep = finite(frame[list(columns)])
    return frame[keep], int((~keep).sum())


def not_finite(left_out: Sequence[str]) -> list[str]:
    """The note for values left out of a figure because they were NaN or infinite."""
    return [f"not drawn, not finite (NaN or infinite): {', '.join(left_out)}"] if left_out else []


def footnote(fig: Figure, lines: Sequence[str]) -> None:
    """Notes under the figure, in grey."""
    if lines:
        fig.text(0.01, 0.0, "\n".join(lines), fontsize=8, color="0.35", va="top")


def beside(ax: Axes, **kwargs: Any) -> None:
    """The axes' legend to their right, outside the data (saving with a tight bounding box keeps it whole)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=LEGEND_SIZE, **kwargs)


LEGEND_SIZE = 9  # points: the tick labels' size less one, read at the saved 150 dpi
MAX_LINES = 4  # distinct link curves a utilisation panel draws one by one (more overlap into a tangle)


def identical_columns(curves: pd.DataFrame) -> list[list[str]]:
    """The columns grouped by equal values (to 1e-9), in first-seen order."""
    groups: dict[bytes, list[str]] = {}
    for name in curves.columns:
        key = curves[name].round(9).fillna(-1.0).to_numpy().tobytes()
        groups.setdefault(key, []).append(str(name))
    return list(groups.values())


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")


def line_styles(count: int, markers: bool = False) -> list[dict]:
    """Styles that keep coinciding curves visible: only the first line is solid; each later one is
    thinner and dashed, so one drawn over another leaves the first showing through its gaps. With
    `markers`, each also gets its own marker shape (for curves sampled at few points)."""
    dashes = ["-", (0, (6, 2)), (0, (4, 2, 1, 2)), (0, (1, 1.5)), (0, (8, 3, 1, 3, 1, 3)), (0, (3, 3))]
    pick = [0, *(1 + i % (len(dashes) - 1) for i in range(count - 1))]
    styles = [{"ls": dashes[d], "lw": max(1.0, 3.0 - 0.4 * i)} for i, d in enumerate(pick[:count])]
    if markers:
        for i, style in enumerate(styles):
            style.update(marker=MARKERS[i % len(MARKERS)], markersize=max(3.0, 7.0 - 0.5 * i))
    return styles


def staleness_plot(staleness: pd.DataFrame, path: Path, config_name: str | None = None) -> None:
    staleness, dropped = finite_rows(staleness, ["staleness", "updates"])
    fig, ax = figure(figsize=(7, 3.5))
    groups = list(staleness.groupby("policy", sort=False))
    for (label, rows), style in zip(groups, line_styles(len(groups))):
        counts = rows.groupby("staleness")["updates"].sum()
        ax.step(counts.index, counts / counts.sum(), where="mid", label=label, **style)
    ax.set_xlabel("Staleness (updates by others since the worker's last pull)")
    ax.set_ylabel("Share of updates")
    beside(ax)
    footnote(fig, not_finite([f"{dropped} row(s)"] if dropped else []))
    save_captioned(fig, path, config_name)


def accuracy_plot(
    accuracy: pd.DataFrame,
    path: Path,
    target: float | None = None,
    phases: pd.DataFrame | None = None,
    config_name: str | None = None,
    time_label: str = "simulated time (s)",
) -> None:
    """Consensus accuracy of every policy against time (`time_label`) and against iterations."""
    consensus, dropped = finite_rows(accuracy[accuracy["worker"] < 0], ["time_s", "iteration", "accuracy"])
    fig, (ax_time, ax_iter) = figure(1, 2, figsize=(12, 4.2), sharey=True)
    groups = list(consensus.groupby("policy", sort=False))
    for (label, rows), style in zip(groups, line_styles(len(groups))):  # coinciding curves stay visible
        (line,) = ax_time.plot(rows["time_s"], rows["accuracy"], label=label, **style)
        shade_phases(ax_time, phases, str(label), line.get_color())
        ax_iter.plot(rows["iteration"], rows["accuracy"], label=label, color=line.get_color(), **style)
    for ax, xlabel in (
        (ax_time, time_label[:1].upper() + time_label[1:]),
        (ax_iter, "Iterations (updates per worker)"),
    ):
        if target is not None:
            ax.axhline(target, color="grey", ls=":", lw=1, label="target")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    ax_time.set_ylabel("Held-out accuracy (consensus model)")
    ax_time.set_title("Time to accuracy")
    ax_iter.set_title("Accuracy per iteration")
    handles, labels = ax_time.get_legend_handles_labels()  # with the shaded phases, which only ax_time has
    unique = dict(zip(labels, handles))
    beside(ax_iter, handles=list(unique.values()), labels=list(unique.keys()))
    footnote(fig, not_finite([f"{dropped} evaluation(s)"] if dropped else []))
    save_captioned(fig, path, config_name)


def search_plot(
    table: pd.DataFrame,
    reference: float,
    tolerance: float,
    path: Path,
    config_name: str | None = None,
    notes: Sequence[str] = (),
) -> None:
    """Sync-Switch's offline search: final accuracy and time to finish against the BSP fraction, as
    means over the seeds with min-max bars where the table has them (`search.csv`); `notes` (whether
    the pick can be told from its neighbours) go under the figure."""
    rows, dropped = finite_rows(table.sort_values("fraction"), ["fraction", "final_accuracy", "sim_time_s"])
    x = rows["fraction"] * 100
    fig, (ax_acc, ax_time) = figure(1, 2, figsize=(12, 4))
    ax_acc.plot(x, rows["final_accuracy"], color="grey", lw=1)
    _spread_bars(ax_acc, rows, "final_accuracy")
    for passes, color, name in ((True, "tab:green", "passes"), (False, "tab:red", "falls short")):
        mine = rows[rows["passes"] == passes]
        ax_acc.scatter(mine["fraction"] * 100, mine["final_accuracy"], color=color, zorder=3, label=name)
    ax_acc.axhspan(reference - tolerance, reference, color="tab:green", alpha=0.1, lw=0, label="within tolerance")
    chosen = rows[rows["chosen"]]
    ax_acc.scatter(chosen["fraction"] * 100, chosen["final_accuracy"], s=160, facecolors="none", edgecolors="black",
                   label="smallest passing")  # fmt: skip
    ax_acc.set_ylabel(f"final accuracy (consensus)\n{_seeds_said(rows)}")
    beside(ax_acc)
    ax_time.plot(x, rows["sim_time_s"], marker="o")
    _spread_bars(ax_time, rows, "sim_time_s")
    ax_time.set_ylabel(f"time to finish (simulated s)\n{_seeds_said(rows)}")
    for ax in (ax_acc, ax_time):
        ax.set_xscale("log", base=2)
        ax.set_xticks(x, [f"{v:g}%" for v in x])
        ax.minorticks_off()
        ax.set_xlabel("BSP share of training")
        ax.grid(alpha=0.3)
    wrapped = [part for note in notes for part in textwrap.wrap(note, 160, subsequent_indent="    ")]
    footnote(fig, wrapped + not_finite([f"{dropped} fraction(s)"] if dropped else []))
    save_captioned(fig, path, config_name)


def _seeds_said(rows: pd.DataFrame) -> str:
    """How many seeds each point averages, as an axis label says it: "1 seed", "mean of 3 seeds"."""
    counts = sorted({int(n) for n in rows["seeds"]}) if "seeds" in rows else []
    if not counts:  # a table from before the count was saved
        return "mean over seeds"
    if counts == [1]:
        return "1 seed"
    said = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    bars = ", bars: min-max" if {"final_accuracy_min", "final_accuracy_max"} <= set(rows) else ""
    return f"mean of {said} seeds{bars}"


def _spread_bars(ax: Axes, rows: pd.DataFrame, column: str) -> None:
    """Min-max error bars around the means of `column`, where the table has its min and max."""
    if {f"{column}_min", f"{column}_max"} <= set(rows):
        mean = rows[column]
        below, above = (mean - rows[f"{column}_min"]).clip(lower=0), (rows[f"{column}_max"] - mean).clip(lower=0)
        ax.errorbar(rows["fraction"] * 100, mean, yerr=[below, above], fmt="none", ecolor="0.3", capsize=4, lw=1)


def shade_phases(ax: Axes, phases: pd.DataFrame | None, label: str, color: str) -> None:
    """A policy that switched (Sync-Switch): its asynchronous phases shaded, its switches dotted, both
    named once in the legend."""
    if phases is None:
        return
    rows = phases[phases["policy"] == label]
    if len(rows) < 2:
        return
    shaded = switched = False
    for row in rows.itertuples(index=False):
        if not row.synchronous:
            name = "_" if shaded else f"{label}: asynchronous phase"  # `_`: not in the legend
            ax.axvspan(row.start_s, row.end_s, color=color, alpha=0.08, lw=0, label=name)
            shaded = True
        if row.phase > 0:
            ax.axvline(
                row.start_s - row.switch_s, color=color, ls=":", lw=1, label="_" if switched else f"{label}: switch"
            )
            switched = True


def save_captioned(fig: Figure, path: Path, config_name: str | None = None) -> None:
    """`save_figure`, with the config's name as a caption."""
    if config_name:  # every figure says which config it shows
        fig.suptitle(f"config: {config_name}", x=0.01, ha="left", fontsize=9, color="0.35")
    save_figure(fig, path)


def save_figure(fig: Figure, path: Path) -> None:
    """Through a temporary that keeps the extension (savefig picks the format from it: png, pdf, svg):
    never half a file."""
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=150, bbox_inches="tight")  # tight: legends placed outside the axes stay whole
