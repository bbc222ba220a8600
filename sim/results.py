"""Result tables (DESIGN.md §5): flat rows in, pandas DataFrames and files out.

`iterations`: one row per worker per iteration. `ops`: one row per collective (rank -1) and per
point-to-point op or wait. `summary`: one row per policy. Files are written atomically, so a crash
while writing never leaves half a table, and `write` can be called again as more policies finish.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from sim.config import Config, dump_config
from sim.engine import PolicyRun
from sim.topology import Cluster
from sim.workload import ComputePlan

ITERATION_FIELDS = ("iteration", "rank", "start_s", "forward_end_s", "compute_end_s", "end_s")
# `count` > 1: a rank's concurrent point-to-point ops that travelled as one coupled transfer
OP_FIELDS = (
    "step",
    "rank",
    "kind",
    "group",
    "group_size",
    "shard",
    "count",
    "nbytes",
    "issued_s",
    "launched_s",
    "finished_s",
)
SUMMARY_COLUMNS = (
    "policy",
    "name",
    "status",
    "workers",
    "iterations",
    "mean_iteration_s",
    "p50_iteration_s",
    "p99_iteration_s",
    "throughput_samples_s",
    "mean_compute_s",
    "mean_exposed_comm_s",
    "scaling_efficiency",
    "network_bytes_per_iteration",
    "sim_time_s",
)


def iterations_frame(runs: list[PolicyRun], cluster: Cluster, batch_size: int) -> pd.DataFrame:
    frames = []
    for run in runs:  # policies in config order, rows by (iteration, rank) within each
        df = pd.DataFrame(run.iterations, columns=list(ITERATION_FIELDS)).sort_values(["iteration", "rank"])
        df.insert(0, "policy", run.label)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["policy", *ITERATION_FIELDS])
    df = pd.concat(frames, ignore_index=True)
    df.insert(3, "host", [cluster.view.rank_hosts[r] for r in df["rank"]])
    df["iteration_s"] = df["end_s"] - df["start_s"]
    df["compute_s"] = df["compute_end_s"] - df["start_s"]
    df["exposed_comm_s"] = df["end_s"] - df["compute_end_s"]
    df["samples"] = batch_size
    return df


def ops_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    frames = []
    for run in runs:
        df = pd.DataFrame(run.ops, columns=list(OP_FIELDS))
        df.insert(0, "policy", run.label)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["policy", *OP_FIELDS])
    df = pd.concat(frames, ignore_index=True)
    df["duration_s"] = df["finished_s"] - df["launched_s"]
    return df


def summary_frame(runs: list[PolicyRun], iterations: pd.DataFrame, cluster: Cluster, plan: ComputePlan) -> pd.DataFrame:
    nic_links = np.array([link.kind == "nic" for link in cluster.links])
    rows = []
    for run in runs:
        df = iterations[iterations["policy"] == run.label]
        row: dict[str, object] = {
            "policy": run.label,
            "name": run.name,
            "status": "ok" if run.error is None else f"failed: {run.error}",
            "workers": cluster.world_size,
        }
        done = int(df.groupby("rank")["iteration"].count().min()) if len(df) else 0
        row["iterations"] = done
        if len(df):
            times = df["iteration_s"].to_numpy()
            span = df["end_s"].max() - df["start_s"].min()
            throughput = df["samples"].sum() / span if span > 0 else float("inf")
            ideal = cluster.world_size * plan.batch_size / plan.compute_s if plan.compute_s > 0 else float("inf")
            row.update(
                mean_iteration_s=float(times.mean()),
                p50_iteration_s=float(np.percentile(times, 50)),
                p99_iteration_s=float(np.percentile(times, 99)),
                throughput_samples_s=float(throughput),
                mean_compute_s=float(df["compute_s"].mean()),
                mean_exposed_comm_s=float(df["exposed_comm_s"].mean()),
                scaling_efficiency=float(throughput / ideal) if np.isfinite(ideal) else float("nan"),
            )
        if run.link_bytes is not None and done:
            # bytes leaving hosts' NICs; NIC links are duplex pairs, so count the host->switch side
            sent = sum(
                b
                for b, link, is_nic in zip(run.link_bytes, cluster.links, nic_links)
                if is_nic and cluster.graph.nodes[link.src]["kind"] in ("host", "server")
            )
            row["network_bytes_per_iteration"] = float(sent / done)
        row["sim_time_s"] = run.sim_time_s
        rows.append(row)
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))


@dataclass
class Result:
    """Everything one `simulate` call produced; tables are pandas DataFrames."""

    config: Config
    summary: pd.DataFrame
    iterations: pd.DataFrame
    ops: pd.DataFrame
    runs: list[PolicyRun] = field(default_factory=list)

    @property
    def errors(self) -> dict[str, str]:
        return {run.label: run.error for run in self.runs if run.error is not None}

    def write(self, out_dir: str | os.PathLike[str], *, plot: bool = True, trace: Optional[bool] = None) -> Path:
        """Write summary.csv, iterations.csv, ops.csv, config.yaml, trace.json and comparison.png."""
        from sim.plots import comparison_plot
        from sim.trace import chrome_trace

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        _atomic_write(out / "config.yaml", dump_config(self.config))
        _atomic_write(out / "summary.csv", self.summary.to_csv(index=False))
        _atomic_write(out / "iterations.csv", self.iterations.to_csv(index=False))
        _atomic_write(out / "ops.csv", self.ops.to_csv(index=False))
        if self.config.simulation.trace if trace is None else trace:
            _atomic_write(out / "trace.json", chrome_trace(self, self.config.simulation.trace_max_events))
        if plot and len(self.summary):
            comparison_plot(self.summary, self.iterations, out / "comparison.png")
        failed = [run for run in self.runs if run.error is not None]
        if failed:  # the summary says why in one line; the full traceback is for bug reports
            _atomic_write(out / "errors.txt", "\n".join(f"== {run.label}\n{run.traceback}" for run in failed))
        elif (out / "errors.txt").exists():
            (out / "errors.txt").unlink()
        return out


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
