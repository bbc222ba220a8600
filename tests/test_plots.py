"""The run figures: identical links drawn once, each policy on its own time axis, coinciding curves
kept visible."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from sim.results.plots import accuracy_plot, identical_columns, joined_names, line_styles, utilization_plot


def samples(policy: str, link: str, kind: str, values: list[float], step: float) -> list[dict]:
    return [
        {"policy": policy, "time_s": step * (i + 1), "link": link, "kind": kind, "utilization": v}
        for i, v in enumerate(values)
    ]


def test_identical_uplinks_are_one_line_and_each_policy_keeps_its_own_time_axis(drawn: list) -> None:
    rows = (
        samples("ring", "tor0->core0", "uplink", [0.5, 1.0, 0.0], 1.0)
        + samples("ring", "tor1->core0", "uplink", [0.5, 1.0, 0.0], 1.0)  # the same curve
        + samples("ring", "core0->tor0", "uplink", [0.2, 0.0, 0.0], 1.0)
        + samples("fast", "tor0->core0", "uplink", [1.0, 1.0, 1.0], 0.01)  # done in 30 ms
        + samples("fast", "h0->tor0", "nic", [0.3, 0.6, 0.9], 0.01)
    )
    utilization_plot(pd.DataFrame(rows), Path("unused.png"))
    ring, fast = drawn[0].axes
    assert [line.get_label() for line in ring.lines] == ["tor0->core0 = tor1->core0", "core0->tor0"]
    assert ring.get_xlim() == (0, 3.0) and fast.get_xlim() == pytest.approx((0, 0.03))
    assert [line.get_label() for line in fast.lines] == ["tor0->core0", "NICs (mean)"]


def test_many_distinct_links_become_a_mean_and_a_band(drawn: list) -> None:
    rows = [r for i in range(12) for r in samples("asp", f"l{i}", "uplink", [i / 12, 1 - i / 12], 1.0)]
    utilization_plot(pd.DataFrame(rows), Path("unused.png"))
    (ax,) = drawn[0].axes
    assert [line.get_label() for line in ax.lines] == ["uplink (mean)"]
    assert ax.lines[0].get_ydata().tolist() == pytest.approx([11 / 24, 13 / 24])
    assert len(ax.collections) == 1  # the min-max band


def test_identical_columns_and_their_names() -> None:
    frame = pd.DataFrame({"a": [1.0, 2.0], "b": [1.0, 2.0 + 1e-12], "c": [2.0, 1.0], "d": [1.0, 2.0]})
    assert identical_columns(frame) == [["a", "b", "d"], ["c"]]
    assert joined_names(["a", "b", "c", "d", "e"]) == "a = b = c (+2 identical)"


def test_coinciding_accuracy_curves_get_different_dashes_and_widths(drawn: list) -> None:
    curve = [{"worker": -1, "iteration": i, "time_s": 0.1 * i, "accuracy": 0.1 * i} for i in range(5)]
    frame = pd.DataFrame([{**row, "policy": p} for p in ("asp", "ssp", "ring") for row in curve])
    accuracy_plot(frame, Path("unused.png"))
    ax_time, _ = drawn[0].axes
    styles = {(line.get_linestyle(), line.get_linewidth()) for line in ax_time.lines}
    assert len(styles) == 3  # the same data, three looks: the ones beneath show through
    assert [s["ls"] == "-" for s in line_styles(8)] == [True] + [False] * 7


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
