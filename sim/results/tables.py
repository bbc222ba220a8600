"""Result rows to pandas DataFrames (the README lists every table and column): one builder per table.

iterations: one row per worker per iteration; iteration_s = compute_s + comm_s + wait_s.
ops: one row per collective (rank -1) and per point-to-point batch or wait.
summary: one row per policy; `status`: ok, `failed: <reason>`, or `interrupted: <what stopped it>`. Its
timings (iteration time, throughput, compute, comm, wait) leave out each worker's first
`warmup_dropped` iterations (`Config.summary_warmup`: a real run's warm-up); its counts keep them.
decisions: one row per choice the simulator made where the config said `auto` (and the bucket plan, NCCL's picks).
links: one row per network link per policy; utilization: link utilisation over time.
staleness: histogram of the staleness of updates applied by asynchronous shards, in updates (others'
updates to the bucket since the pusher read it; not steps: SSP's bound counts steps).
accuracy (numerics mode): held-out loss and accuracy of the consensus model (worker -1) and of each
replica over iterations and simulated time; `scored` says what the consensus is (`mean` of the replicas,
`servers`, or the policy's global tensor such as DiLoCo's `anchor`; sim.numerics.evaluation).
"""

from __future__ import annotations

from itertools import chain

import numpy as np
import pandas as pd

from sim.cluster.topology import GBPS, Cluster
from sim.compute.workload import ComputePlan
from sim.engine.decisions import DECISION_FIELDS
from sim.engine.run import PolicyRun
from sim.engine.symmetry import expand_iterations, expand_ops
from sim.memory.peak import GIB

ITERATION_FIELDS = (
    "iteration", "rank", "start_s", "begin_end_s", "forward_end_s", "compute_end_s", "end_s", "compute_s", "wait_s",
    "phase",
)  # fmt: skip
# one row per phase of a run (policies.phases); switch_s: the idle switch before it (0 for the first)
PHASE_FIELDS = ("phase", "phase_policy", "synchronous", "start_step", "start_s", "end_s", "updates", "switch_s")
# `count` > 1: a rank's concurrent point-to-point ops that travelled as one coupled transfer
# nbytes: the tensor size the op names (a sparse op: its dense size); wire_bytes: what it sent to other
# ranks or shards, over all members of a collective, same-host peers included (links.csv has what
# each network link carried); imbalance: a sparse collective's max / mean bytes received; wire: the
# element type a collective's values travel in (policies.wire), empty for the default type; algorithm,
# protocol, channels: how a collective ran (sim.engine.collectives.Launched; README, "What you get")
OP_FIELDS = (
    "step", "rank", "kind", "group", "group_size", "shard", "count", "nbytes", "issued_s", "launched_s", "finished_s",
    "wire_bytes", "imbalance", "wire", "algorithm", "protocol", "channels",
)  # fmt: skip
# what a row without the last fields gets (a backend that does not record them: the real one)
_OP_DEFAULTS = ("", "", "", 0)
SUMMARY_COLUMNS = (
    "policy",
    "name",
    "status",
    "workers",
    "iterations",
    "updates",
    "warmup_dropped",
    "mean_iteration_s",
    "p50_iteration_s",
    "p99_iteration_s",
    "throughput_samples_s",
    "mean_compute_s",
    "mean_comm_s",
    "mean_wait_s",
    "scaling_efficiency",
    "compute_utilization",
    "min_compute_utilization",
    "network_bytes_per_iteration",
    "peak_memory_gib",
    "mean_staleness",
    "p99_staleness",
    "max_staleness",
    "mean_recv_imbalance",
    "sim_time_s",
    "switches",
    "switch_s",
    "synchronous_s",
    "asynchronous_s",
)
ACCURACY_FIELDS = ("iteration", "time_s", "worker", "train_loss", "loss", "accuracy")
# summary columns added when the config has numerics
ACCURACY_SUMMARY = ("final_accuracy", "best_accuracy", "target_accuracy", "time_to_target_s", "iterations_to_target")
# Utilisation time series are written for every uplink (and custom switch-to-switch link), and for
# NIC links too when there are no more of them than this.
MAX_NIC_SERIES = 128


def _per_policy(runs: list[PolicyRun], rows_of, columns, expand=None) -> pd.DataFrame:  # type: ignore[no-untyped-def]
    """`expand(frame, images)`: a run on one host's ranks (sim/engine/symmetry.py) made every host's."""
    frames = []
    for run in runs:
        df = pd.DataFrame(rows_of(run), columns=list(columns))
        if expand is not None and run.images is not None:
            df = expand(df, run.images)
        df.insert(0, "policy", run.label)
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["policy", *columns])


def iterations_frame(runs: list[PolicyRun], cluster: Cluster, batch_size: int) -> pd.DataFrame:
    df = _per_policy(runs, lambda run: sorted(run.iterations), ITERATION_FIELDS, expand_iterations)
    df.insert(3, "host", [cluster.view.rank_hosts[r] for r in df["rank"]])
    labels = {(run.label, row[0]): row[1] for run in runs for row in run.phases}
    names = {run.label: run.name for run in runs}
    df["phase_policy"] = [labels.get((p, i), names.get(p, p)) for p, i in zip(df["policy"], df["phase"])]
    df["iteration_s"] = df["end_s"] - df["start_s"]
    df["comm_s"] = (df["iteration_s"] - df["compute_s"] - df["wait_s"]).clip(lower=0.0)
    df["samples"] = batch_size
    return df


def phases_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    """Every phase of every run: which policy ran, from when to when, and the switch before it."""
    df = _per_policy(runs, lambda run: run.phases, PHASE_FIELDS)
    for run in runs:  # a phase still open when a run failed ends with it
        rows = (df["policy"] == run.label) & df["end_s"].isna()
        df.loc[rows, "end_s"] = run.sim_time_s
    return df


def phase_summary(run: PolicyRun) -> dict[str, float]:
    """Switches, their idle time, and the time spent in synchronous and asynchronous phases."""
    phases = run.phases or []
    span = [(run.sim_time_s if np.isnan(row[5]) else row[5]) - row[4] for row in phases]  # open: to the end
    return {
        "switches": max(0, len(phases) - 1),
        "switch_s": float(sum(row[7] for row in phases)),
        "synchronous_s": float(sum(t for t, row in zip(span, phases) if row[2])),
        "asynchronous_s": float(sum(t for t, row in zip(span, phases) if not row[2])),
    }


def _op_rows(run: PolicyRun) -> list[tuple]:
    """A run's op rows; rows without the last fields (a backend that does not record them) get empty ones."""
    rows = run.ops
    if rows and len(rows[0]) < len(OP_FIELDS):
        tail = _OP_DEFAULTS[len(rows[0]) - len(OP_FIELDS) :]
        return [row + tail for row in rows]
    return rows


def ops_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    df = _per_policy(runs, _op_rows, OP_FIELDS, expand_ops)
    df["duration_s"] = df["finished_s"] - df["launched_s"]
    return df


def decisions_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    """What each run chose for the config's `auto` settings and why (sim.engine.decisions)."""
    return _per_policy(runs, lambda run: run.decisions, DECISION_FIELDS)


FAULT_FIELDS = ("what", "targets", "effect", "value", "start_s", "end_s")


def faults_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    """Straggler occurrences and background windows as they happened in each run (end inf: to the end)."""
    df = _per_policy(runs, lambda run: sorted(run.faults, key=lambda row: (row[4], row[1])), FAULT_FIELDS)
    for run in runs:  # open-ended windows end with the run
        rows = (df["policy"] == run.label) & ~np.isfinite(df["end_s"].astype(float))
        df.loc[rows, "end_s"] = run.sim_time_s
    return df


def _int_columns(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Two int64 columns from a list of pairs (without a Python object per value)."""
    flat = np.fromiter(chain.from_iterable(pairs), dtype=np.int64, count=2 * len(pairs))
    return flat[0::2], flat[1::2]


def staleness_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    """How many applied updates had each staleness, per policy and pushing rank."""
    frames = []
    for run in runs:
        if run.staleness:
            rank, stale = _int_columns(run.staleness)
            low, span = int(stale.min()), int(stale.max() - stale.min()) + 1
            keys, updates = np.unique(rank * span + (stale - low), return_counts=True)  # sorted by (rank, staleness)
            counts = {"rank": keys // span, "staleness": keys % span + low, "updates": updates}
            frames.append(pd.DataFrame({"policy": run.label, **counts}))
    columns = ["policy", "rank", "staleness", "updates"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)


def accuracy_frame(runs: list[PolicyRun]) -> pd.DataFrame:
    df = _per_policy(runs, lambda run: run.accuracy, ACCURACY_FIELDS)
    scored = df["policy"].map({run.label: run.scored for run in runs})
    df.insert(3, "model", np.where(df["worker"] < 0, "consensus", "worker"))
    df.insert(4, "scored", np.where(df["worker"] < 0, scored, "replica"))
    return df


def accuracy_summary(run: PolicyRun, target: float | None) -> dict[str, float]:
    """Final and best consensus accuracy, and the first evaluation that reached `target`."""
    rows = [row for row in run.accuracy if row[2] < 0]
    out = dict.fromkeys(ACCURACY_SUMMARY, float("nan"))
    if not rows:
        return out
    out["final_accuracy"] = rows[-1][5]
    out["best_accuracy"] = max(row[5] for row in rows)
    if target is not None:
        out["target_accuracy"] = target
        hit = next((row for row in rows if row[5] >= target), None)
        if hit is not None:
            out["iterations_to_target"], out["time_to_target_s"] = hit[0], hit[1]
    return out


def compute_utilization(iterations: pd.DataFrame) -> dict[str, float]:
    """The share of its time each worker spent computing (its iterations' compute over their time, which
    is the span from its first start to its last end unless it was away for some steps): the mean over
    workers and the lowest."""
    per_rank = iterations.groupby("rank").agg(compute=("compute_s", "sum"), span=("iteration_s", "sum"))
    span = per_rank["span"]
    busy = (per_rank["compute"] / span)[span > 0]
    if busy.empty:
        return {"compute_utilization": float("nan"), "min_compute_utilization": float("nan")}
    return {"compute_utilization": float(busy.mean()), "min_compute_utilization": float(busy.min())}


def summary_frame(
    runs: list[PolicyRun],
    iterations: pd.DataFrame,
    cluster: Cluster,
    plan: ComputePlan,
    target_accuracy: float | None = None,
    numerics: bool = False,
    warmup: int = 0,
) -> pd.DataFrame:
    """One row per run; the timings over each worker's iterations from `warmup` on (all of them
    where none would be left: a run that failed early), and `warmup_dropped` says which."""
    rows = []
    for run in runs:
        df = iterations[iterations["policy"] == run.label]
        status = "ok" if run.error is None else f"failed: {run.error}"
        row: dict[str, object] = {"policy": run.label, "name": run.name, "status": status}
        row["workers"] = cluster.world_size
        counts = df.groupby("rank")["iteration"].count()
        row["iterations"] = int(counts.min()) if len(counts) == cluster.world_size else 0
        row["updates"] = len(df)
        steady = df[df["iteration"] >= warmup]
        dropped = warmup if len(steady) else 0
        steady = steady if len(steady) else df
        row["warmup_dropped"] = dropped
        if len(steady):
            span = steady["end_s"].max() - steady["start_s"].min()
            throughput = steady["samples"].sum() / span if span > 0 else float("inf")
            ideal = cluster.world_size * plan.batch_size / plan.compute_s if plan.compute_s > 0 else float("inf")
            times = steady["iteration_s"].to_numpy()
            row.update(
                mean_iteration_s=float(times.mean()),
                p50_iteration_s=float(np.percentile(times, 50)),
                p99_iteration_s=float(np.percentile(times, 99)),
                throughput_samples_s=float(throughput),
                mean_compute_s=float(steady["compute_s"].mean()),
                mean_comm_s=float(steady["comm_s"].mean()),
                mean_wait_s=float(steady["wait_s"].mean()),
                scaling_efficiency=float(throughput / ideal) if np.isfinite(ideal) else float("nan"),
            )
            row.update(compute_utilization(steady))
            row["network_bytes_per_iteration"] = _host_egress(run, cluster) * cluster.world_size / len(df)
        if run.memory is not None:
            row["peak_memory_gib"] = run.memory.total / GIB
        if run.staleness:
            stale = _int_columns(run.staleness)[1]
            row.update(
                mean_staleness=float(stale.mean()),
                p99_staleness=float(np.percentile(stale, 99)),
                max_staleness=int(stale.max()),
            )
        imbalance = [op[12] for op in run.ops if op[1] == -1 and not np.isnan(op[12])]
        if imbalance:  # sparse collectives: max / mean bytes their members received
            row["mean_recv_imbalance"] = float(np.mean(imbalance))
        row["sim_time_s"] = run.sim_time_s
        row.update(phase_summary(run))
        if numerics:
            row.update(accuracy_summary(run, target_accuracy))
        rows.append(row)
    return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS) + (list(ACCURACY_SUMMARY) if numerics else []))


def with_unfinished(summary: pd.DataFrame, unfinished: list[tuple[str, str]], status: str) -> pd.DataFrame:
    """`summary` plus a row per (label, name) in `unfinished` whose `status` says why it has no results
    (an interrupted run: every configured policy appears in summary.csv)."""
    if not unfinished:
        return summary
    rows = pd.DataFrame(
        [{"policy": label, "name": name, "status": status} for label, name in unfinished], columns=summary.columns
    )
    return pd.concat([summary, rows], ignore_index=True) if len(summary) else rows


def steady_figures(iterations: pd.DataFrame, warmup: int = 0) -> dict[str, dict[str, float]]:
    """Per policy, over iterations >= `warmup`: the mean iteration time and the throughput (samples
    over the span from the first start to the last end)."""
    rows = iterations[iterations["iteration"] >= warmup]
    out = {}
    for policy, df in rows.groupby("policy", sort=False):
        span = df["end_s"].max() - df["start_s"].min()
        out[str(policy)] = {
            "mean_iteration_s": float(df["iteration_s"].mean()),
            "throughput_samples_s": float(df["samples"].sum() / span) if span > 0 else float("nan"),
        }
    return out


def _host_egress(run: PolicyRun, cluster: Cluster) -> float:
    """Bytes that left hosts through their NICs (the host-to-network side of each duplex NIC)."""
    if run.link_bytes is None:
        return float("nan")
    kinds = cluster.graph.nodes
    return float(
        sum(
            carried
            for carried, link in zip(run.link_bytes, cluster.links)
            if link.kind == "nic" and kinds[link.src]["kind"] in ("host", "server")
        )
    )


LINK_COLUMNS = ["policy", "link", "kind", "capacity_gbps", "bytes", "mean_utilization", "peak_utilization"]


def links_frame(runs: list[PolicyRun], cluster: Cluster) -> pd.DataFrame:
    """Per network link: bytes carried, mean utilisation over the run, peak over sample intervals."""
    rows = []
    for run in runs:
        if run.sampler is None or run.link_bytes is None:
            continue
        _, util = run.sampler.utilization()
        peaks = util.max(axis=0) if len(util) else np.full(len(run.sampler.links), np.nan)
        for i, peak in zip(run.sampler.links, peaks):
            link = cluster.links[i]
            carried = float(run.link_bytes[i])
            mean = carried / (run.sim_time_s * link.capacity) if run.sim_time_s > 0 else float("nan")
            rows.append((run.label, f"{link.src}->{link.dst}", link.kind, link.capacity / GBPS, carried, mean, peak))
    return pd.DataFrame(rows, columns=LINK_COLUMNS)


def utilization_frame(runs: list[PolicyRun], cluster: Cluster) -> pd.DataFrame:
    frames = []
    for run in runs:
        if run.sampler is None:
            continue
        times, util = run.sampler.utilization()
        kinds = np.array([cluster.links[i].kind for i in run.sampler.links])
        keep = kinds != "nic" if (kinds == "nic").sum() > MAX_NIC_SERIES else np.ones(len(kinds), dtype=bool)
        names = [f"{cluster.links[i].src}->{cluster.links[i].dst}" for i in run.sampler.links[keep]]
        df = pd.DataFrame(util[:, keep], columns=names)
        df.insert(0, "time_s", times)
        long = df.melt(id_vars="time_s", var_name="link", value_name="utilization")
        long.insert(0, "policy", run.label)
        long.insert(3, "kind", long["link"].map(dict(zip(names, kinds[keep]))))
        frames.append(long)
    columns = ["policy", "time_s", "link", "kind", "utilization"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
