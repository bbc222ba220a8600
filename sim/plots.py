"""The PNG that compares policies at a glance: where each iteration's time goes, and throughput."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402


def comparison_plot(summary: pd.DataFrame, iterations: pd.DataFrame, path: Path) -> None:
    ok = summary.dropna(subset=["mean_iteration_s"])
    fig, (ax_time, ax_tput, ax_iter) = plt.subplots(1, 3, figsize=(15, 4.2))
    labels = list(ok["policy"])
    x = range(len(labels))
    ax_time.bar(x, ok["mean_compute_s"] * 1e3, label="compute")
    ax_time.bar(x, ok["mean_exposed_comm_s"] * 1e3, bottom=ok["mean_compute_s"] * 1e3, label="exposed communication")
    ax_time.scatter(x, ok["p99_iteration_s"] * 1e3, color="black", marker="_", s=300, zorder=3, label="p99 iteration")
    ax_time.set_ylabel("ms per iteration (mean)")
    ax_time.set_title("Iteration time")
    ax_time.legend(fontsize=8)
    ax_tput.bar(x, ok["throughput_samples_s"], color="tab:green")
    ax_tput.set_ylabel("samples / s")
    ax_tput.set_title("Throughput")
    for ax in (ax_time, ax_tput):
        ax.set_xticks(list(x), labels, rotation=20, ha="right")
    per_iter = iterations.groupby(["policy", "iteration"], sort=False)["end_s"].max().reset_index()
    for label in labels:
        ends = per_iter[per_iter["policy"] == label]["end_s"].to_numpy()
        ax_iter.plot(range(1, len(ends) + 1), ends, label=label)
    ax_iter.set_xlabel("iteration")
    ax_iter.set_ylabel("simulated time (s)")
    ax_iter.set_title("Progress")
    ax_iter.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
