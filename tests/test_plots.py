"""The run figures: identical links drawn once, every policy on the same axes, coinciding curves kept
visible, a colour meaning one thing, legends beside the data."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim.results.plots import accuracy_plot, identical_columns, line_styles, save_figure, utilization_plot


def samples(policy: str, link: str, kind: str, values: list[float], step: float) -> list[dict]:
    return [
        {"policy": policy, "time_s": step * (i + 1), "link": link, "kind": kind, "utilization": v}
        for i, v in enumerate(values)
    ]


def test_identical_uplinks_are_one_line_and_every_policy_shares_the_time_and_utilisation_axes(drawn: list) -> None:
    rows = (
        samples("ring", "tor0->core0", "uplink", [0.5, 1.0, 0.0], 1.0)
        + samples("ring", "tor1->core0", "uplink", [0.5, 1.0, 0.0], 1.0)  # the same curve
        + samples("ring", "core0->tor0", "uplink", [0.2, 0.0, 0.0], 1.0)
        + samples("fast", "tor0->core0", "uplink", [1.0, 1.0, 1.0], 0.01)  # done in 30 ms
        + samples("fast", "h0->tor0", "nic", [0.3, 0.6, 0.9], 0.01)
    )
    utilization_plot(pd.DataFrame(rows), Path("unused.png"))
    ring, fast = drawn[0].axes
    assert [line.get_label() for line in ring.lines] == ["tor0, tor1 → core0", "core0 → tor0"]
    assert ring.get_shared_x_axes().joined(ring, fast) and ring.get_shared_y_axes().joined(ring, fast)
    assert ring.get_xlim() == fast.get_xlim() == (0, 3.0)  # the fast policy's 30 ms are 1% of the slow one's 3 s
    assert ring.get_ylim() == fast.get_ylim() == (0, 1.05)
    assert [line.get_label() for line in fast.lines] == ["tor0 → core0", "NICs (mean)"]


def test_many_distinct_links_become_a_mean_and_a_band(drawn: list) -> None:
    rows = [r for i in range(12) for r in samples("asp", f"l{i}", "uplink", [i / 12, 1 - i / 12], 1.0)]
    utilization_plot(pd.DataFrame(rows), Path("unused.png"))
    (ax,) = drawn[0].axes
    assert [line.get_label() for line in ax.lines] == ["uplink links (12): mean"]
    assert ax.lines[0].get_ydata().tolist() == pytest.approx([11 / 24, 13 / 24])
    assert len(ax.collections) == 1  # the min-max band, named in the legend
    assert legend_texts(ax) == ["uplink links (12): mean", "uplink links (12): min-max"]


def test_zens_eight_directions_on_four_racks_are_a_mean_and_a_band_not_eight_lines(drawn: list) -> None:
    """Four racks on one core: 8 uplink directions, each a slightly different curve (as Zen's hashed
    partitions give). Beyond `MAX_LINES` = 4 distinct curves a panel draws their mean and min-max band;
    two directions (two racks) are still drawn one by one."""
    from sim.results.plots import MAX_LINES

    links = [f"tor{r}->core0" for r in range(4)] + [f"core0->tor{r}" for r in range(4)]
    rows = [r for i, link in enumerate(links) for r in samples("zen", link, "uplink", [0.5 + i / 100, 0.25], 1.0)]
    utilization_plot(pd.DataFrame(rows), Path("unused.png"))
    (ax,) = drawn[0].axes
    assert MAX_LINES < 8 and legend_texts(ax) == ["uplink links (8): mean", "uplink links (8): min-max"]
    assert ax.lines[0].get_ydata().tolist() == pytest.approx([0.5 + 3.5 / 100, 0.25])  # mean of i = 0..7
    band = ax.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.25) and band.max() == pytest.approx(0.57)  # min-max across the 8
    two = [r for i, link in enumerate(links[::4]) for r in samples("zen", link, "uplink", [0.5 + i / 100, 0.25], 1.0)]
    utilization_plot(pd.DataFrame(two), Path("unused.png"))
    assert legend_texts(drawn[1].axes[0]) == ["tor0 → core0", "core0 → tor0"]


def test_identical_columns() -> None:
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [1.0, 2.0 + 1e-12], "c": [2.0, 1.0], "d": [1.0, 2.0]})
    assert identical_columns(frame) == [["a", "b", "d"], ["c"]]


def legend_texts(ax) -> list[str]:  # type: ignore[no-untyped-def]
    return [t.get_text() for t in ax.get_legend().get_texts()]


def test_a_bidirectional_pair_is_one_compact_label_in_a_legend_beside_the_data(drawn: list) -> None:
    both = [0.5, 1.0, 0.0]
    rows = [r for link in ("tor0->core0", "core0->tor0", "tor1->core0", "core0->tor1")
            for r in samples("ring", link, "uplink", both, 1.0)]  # fmt: skip
    utilization_plot(pd.DataFrame(rows), Path("unused.png"))
    (ax,) = drawn[0].axes
    assert legend_texts(ax) == ["tor0, tor1 ↔ core0"]
    anchor = ax.get_legend().get_bbox_to_anchor().transformed(ax.transAxes.inverted())
    assert anchor.x0 > 1.0  # right of the axes, over no data
    assert ax.get_ylabel() == "Utilisation" and ax.get_xlabel() == "Simulated time (s)"


def test_a_policy_without_traffic_gets_no_panel_only_a_note(drawn: list) -> None:
    rows = (
        samples("no_sync", "tor0->core0", "uplink", [0.0, 0.0], 1.0)
        + samples("no_sync", "h0->tor0", "nic", [0.0, 0.0], 1.0)
        + samples("ring", "tor0->core0", "uplink", [0.5, 1.0], 1.0)
    )
    assert utilization_plot(pd.DataFrame(rows), Path("unused.png")) is True
    (ax,) = drawn[0].axes
    assert ax.get_title(loc="left") == "ring"
    assert [t.get_text() for t in drawn[0].texts] == ["not shown, no network traffic: no_sync"]
    quiet = pd.DataFrame(samples("no_sync", "tor0->core0", "uplink", [0.0, 0.0], 1.0))
    assert utilization_plot(quiet, Path("unused.png")) is False and len(drawn) == 1  # nothing to draw


def test_a_run_with_only_no_sync_writes_no_utilization_figure(tmp_path: Path) -> None:
    from helpers import star, synthetic

    from sim import simulate

    files = simulate({**synthetic(star(4), [{"name": "no_sync"}], 10.0, compute_ms=5.0), "iterations": 2}).plot(
        tmp_path
    )
    assert [f.name for f in files] == ["comparison.png"] and not (tmp_path / "utilization.png").exists()


@pytest.mark.filterwarnings("ignore:Tight layout not applied")  # too wide a legend for tight_layout alone
def test_a_legend_outside_the_axes_is_saved_whole(tmp_path: Path) -> None:
    from matplotlib.image import imread

    from sim.results.plots import figure

    fig, ax = figure(figsize=(4, 3))
    ax.plot([0, 1], [0, 1], label="a rather long legend entry that sits right of the axes")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    save_figure(fig, tmp_path / "f.png")
    height, width = imread(tmp_path / "f.png").shape[:2]
    assert width / height > 4 / 3 + 0.3  # the canvas grew to hold the legend rather than cutting it off


def test_shaded_asynchronous_phases_and_switches_are_in_the_legend(drawn: list) -> None:
    curve = [{"worker": -1, "iteration": i, "time_s": 0.1 * i, "accuracy": 0.1 * i} for i in range(5)]
    frame = pd.DataFrame([{**row, "policy": p} for p in ("ps", "switch") for row in curve])
    phases = pd.DataFrame(
        [
            {"policy": "switch", "phase": 0, "synchronous": True, "start_s": 0.0, "end_s": 0.2, "switch_s": 0.0},
            {"policy": "switch", "phase": 1, "synchronous": False, "start_s": 0.21, "end_s": 0.4, "switch_s": 0.01},
        ]
    )
    accuracy_plot(frame, Path("unused.png"), target=0.3, phases=phases)
    _, ax_iter = drawn[0].axes
    assert legend_texts(ax_iter) == ["ps", "switch", "switch: asynchronous phase", "switch: switch", "target"]


def test_coinciding_accuracy_curves_get_different_dashes_and_widths(drawn: list) -> None:
    curve = [{"worker": -1, "iteration": i, "time_s": 0.1 * i, "accuracy": 0.1 * i} for i in range(5)]
    frame = pd.DataFrame([{**row, "policy": p} for p in ("asp", "ssp", "ring") for row in curve])
    accuracy_plot(frame, Path("unused.png"))
    ax_time, _ = drawn[0].axes
    styles = {(line.get_linestyle(), line.get_linewidth()) for line in ax_time.lines}
    assert len(styles) == 3  # the same data, three looks: the ones beneath show through
    assert [s["ls"] == "-" for s in line_styles(8)] == [True] + [False] * 7
    assert len({s["marker"] for s in line_styles(8, markers=True)}) == 8


def test_the_search_and_validation_figures_name_their_config(drawn: list) -> None:
    from sim.results.plots import search_plot

    table = pd.DataFrame({"fraction": [1.0, 0.5], "final_accuracy": [0.9, 0.89], "sim_time_s": [10.0, 6.0],
                          "passes": [True, True], "chosen": [False, True]})  # fmt: skip
    search_plot(table, 0.9, 0.02, Path("unused.png"), "search-run")
    pytest.importorskip("torch")
    from real.validate import Validation, plot
    from sim.bundled import measured

    v = Validation.read(measured("validate_2x2"))
    plot(v.table, Path("unused.png"), v.calibrated_config().name)
    assert [fig._suptitle.get_text() for fig in drawn] == ["config: search-run", "config: validate-2x2"]


def test_drawing_leaves_pyplot_and_its_backend_alone(tmp_path: Path) -> None:
    """A notebook that imports syncsim keeps its inline backend, and saved figures stay out of
    pyplot's list of open figures (nothing to close, nothing shown twice)."""
    import subprocess
    import sys

    script = f"""
import matplotlib
matplotlib.use("svg")
import matplotlib.pyplot as plt
import sim.results.plots, sim.experiments.sweep_plot
from sim import simulate
from helpers import star, synthetic
simulate({{**synthetic(star(4), [{{"name": "ring"}}], 10.0, compute_ms=5.0), "iterations": 2}}).plot({str(tmp_path)!r})
assert matplotlib.get_backend() == "svg", matplotlib.get_backend()
assert plt.get_fignums() == [], plt.get_fignums()
"""
    tests = Path(__file__).parent
    env = {"PYTHONPATH": f"{tests}:{tests.parent}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "comparison.png").stat().st_size > 1000


def comparison(policies: list[str]):  # type: ignore[no-untyped-def]
    """The comparison figure of `policies`, each with the same made-up times, as drawn (no file)."""
    from sim.results.plots import comparison_plot

    row = {"mean_iteration_s": 0.1, "p99_iteration_s": 0.12, "throughput_samples_s": 640.0,
           "mean_compute_s": 0.05, "mean_comm_s": 0.04, "mean_wait_s": 0.01}  # fmt: skip
    summary = pd.DataFrame([{"policy": p, **row} for p in policies])
    ends = [{"policy": p, "rank": 0, "end_s": 0.1 * (i + 1)} for p in policies for i in range(3)]
    return comparison_plot, summary, pd.DataFrame(ends)


def test_a_colour_means_a_policy_or_a_time_component_never_both(drawn: list) -> None:
    from matplotlib.colors import to_rgba

    policies = [f"p{i}" for i in range(10)]  # more policies than colours: they repeat, greys never appear
    plot, summary, ends = comparison(policies)
    plot(summary, ends, Path("unused.png"))
    ax_time, ax_tput, ax_iter = drawn[0].axes
    components = {to_rgba(bar.get_facecolor()) for bar in ax_time.patches}
    throughput = [to_rgba(bar.get_facecolor()) for bar in ax_tput.patches]
    progress = [to_rgba(line.get_color()) for line in ax_iter.lines]
    assert len(components) == 3 and not components & set(throughput)
    assert throughput == progress  # a policy's bar and its progress line: one colour
    assert len(set(throughput[:9])) == 9 and throughput[9] == throughput[0]


def test_the_time_legend_reads_as_the_bars_stack_and_sits_beside_the_data(drawn: list) -> None:
    plot, summary, ends = comparison(["ring", "ps"])
    plot(summary, ends, Path("unused.png"))
    fig = drawn[0]
    fig.draw_without_rendering()  # lays out the legends
    for ax in fig.axes[::2]:  # the iteration-time and progress panels have legends
        legend = ax.get_legend()
        assert legend.get_texts()[0].get_fontsize() >= 9
        box, panel = legend.get_window_extent(), ax.get_window_extent()
        assert box.x0 >= panel.x1  # entirely right of the axes: it covers no bar and no line
    assert legend_texts(fig.axes[0]) == ["p99 iteration", "wait", "communication", "compute"]
    assert legend_texts(fig.axes[2]) == ["ring", "ps"]


def test_the_search_figure_keeps_its_legend_off_the_points_and_says_the_verdict(drawn: list) -> None:
    from sim.results.plots import search_plot

    table = pd.DataFrame({"fraction": [1.0, 0.5, 0.25], "final_accuracy": [0.9, 0.89, 0.8],
                          "sim_time_s": [10.0, 6.0, 5.0], "passes": [True, True, False],
                          "chosen": [False, True, False]})  # fmt: skip
    search_plot(table, 0.9, 0.02, Path("unused.png"), notes=["the pick 50.00% against full BSP: NOT distinguishable"])
    fig = drawn[0]
    fig.draw_without_rendering()
    ax_acc = fig.axes[0]
    assert legend_texts(ax_acc) == ["passes", "falls short", "within tolerance", "smallest passing"]
    assert ax_acc.get_legend().get_window_extent().x0 >= ax_acc.get_window_extent().x1
    assert [t.get_text() for t in fig.texts] == ["the pick 50.00% against full BSP: NOT distinguishable"]


NOT_FINITE = [float("inf"), float("-inf"), float("nan")]


@pytest.mark.parametrize("bad", NOT_FINITE)
def test_non_finite_link_samples_are_left_out_and_noted(bad: float, drawn: list) -> None:
    rows = samples("ring", "tor0->core0", "uplink", [0.5, 1.0, 0.25], 1.0)
    rows[1]["time_s"] = bad  # set_xlim(0, inf) raised "Axis limits cannot be NaN or Inf"
    rows.append({**rows[0], "time_s": 4.0, "utilization": bad})
    assert utilization_plot(pd.DataFrame(rows), Path("unused.png")) is True
    (ax,) = drawn[0].axes
    assert ax.lines[0].get_xdata().tolist() == [1.0, 3.0] and ax.get_xlim() == (0, 3.0)
    assert [t.get_text() for t in drawn[0].texts] == ["not drawn, not finite (NaN or infinite): 2 sample(s)"]


@pytest.mark.parametrize("bad", [*NOT_FINITE, 1e308])  # 1e308 s is infinite once drawn in ms
def test_a_policy_with_non_finite_times_is_left_out_of_the_comparison_and_named(bad: float, drawn: list) -> None:
    from sim.results.plots import comparison_plot

    row = {"mean_iteration_s": 0.1, "p99_iteration_s": 0.12, "throughput_samples_s": 640.0,
           "mean_compute_s": 0.05, "mean_comm_s": 0.04, "mean_wait_s": 0.01}  # fmt: skip
    summary = pd.DataFrame([{"policy": "ring", **row}, {"policy": "ps", **row, "mean_comm_s": bad}])
    ends = [{"policy": p, "rank": 0, "end_s": 0.1 * (i + 1)} for p in ("ring", "ps") for i in range(3)]
    ends[1]["end_s"] = float("inf")
    comparison_plot(summary, pd.DataFrame(ends), Path("unused.png"))
    ax_time, ax_tput, ax_iter = drawn[0].axes
    assert [t.get_text() for t in ax_tput.get_xticklabels()] == ["ring"]
    assert ax_iter.lines[0].get_xdata().tolist() == pytest.approx([0.1, 0.3])
    note = "not drawn, not finite (NaN or infinite): policy ps, 1 iteration end(s)"
    assert [t.get_text() for t in drawn[0].texts] == [note]


def test_non_finite_staleness_and_accuracy_rows_are_left_out(drawn: list) -> None:
    from sim.results.plots import staleness_plot

    staleness = pd.DataFrame({"policy": ["asp"] * 3, "staleness": [0, 1, float("inf")], "updates": [3, 1, 1]})
    staleness_plot(staleness, Path("unused.png"))
    curve = [{"worker": -1, "iteration": i, "time_s": 0.1 * i, "accuracy": 0.1 * i, "policy": "ps"} for i in range(3)]
    curve[2]["accuracy"] = float("nan")
    accuracy_plot(pd.DataFrame(curve), Path("unused.png"))
    assert drawn[0].axes[0].lines[0].get_ydata().tolist() == [0.75, 0.25]  # shares of the 4 finite rows' updates
    assert drawn[1].axes[0].lines[0].get_xdata().tolist() == [0.0, 0.1]
    assert [t.get_text() for t in drawn[0].texts] == ["not drawn, not finite (NaN or infinite): 1 row(s)"]
    assert [t.get_text() for t in drawn[1].texts] == ["not drawn, not finite (NaN or infinite): 1 evaluation(s)"]
