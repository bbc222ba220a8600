"""Rank 0 turns what every process reported into a `PolicyRun`, and writes the simulator's tables plus
`parameters.npz` (per policy: `<label>/workers`, every replica's final flat parameters, and
`<label>/consensus`), which the simulator keeps in memory as `PolicyRun.parameters` / `.consensus`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from real.accounting import RankReport, account
from sim.config import Config, PolicyEntry
from sim.engine import PolicyRun


@dataclass
class ServerReport:
    shard: int
    params: torch.Tensor  # the shard's copy of the model; only `touched` elements are its own
    touched: torch.Tensor
    staleness: list[tuple[int, int]]


def assemble(entry: PolicyEntry, task: Any, gathered: Sequence[Any], wall_s: float) -> PolicyRun:
    workers = [r for r in gathered if isinstance(r, RankReport)]
    servers = [r for r in gathered if isinstance(r, ServerReport)]
    run = PolicyRun(entry.display, entry.name)
    run.iterations, run.ops = account(workers)
    run.staleness = [pair for server in servers for pair in server.staleness]
    run.wall_s = wall_s
    run.sim_time_s = max((row[6] for row in run.iterations), default=0.0)
    if not workers:
        return run
    params = torch.stack([w.parameters for w in workers])  # type: ignore[misc]
    run.parameters = params.numpy()
    consensus = params.mean(dim=0)
    if servers:
        consensus = task.initial.clone()
        for server in servers:
            consensus[server.touched] = server.params[server.touched]
    run.consensus = consensus.numpy()
    run.accuracy = _evaluate(
        task, workers, params, consensus, len(run.iterations) / max(1, len(workers)), run.sim_time_s
    )
    return run


def _evaluate(
    task: Any,
    workers: Sequence[RankReport],
    params: torch.Tensor,
    consensus: torch.Tensor,
    iteration: float,
    now: float,
) -> list[tuple]:
    """Held-out loss and accuracy at the start and the end (the consensus, then every replica)."""
    loss0, acc0 = task.evaluate(task.initial)
    losses = [x for w in workers for x in w.losses]
    rows = [(0.0, 0.0, -1, float("nan"), loss0, acc0)]
    loss, acc = task.evaluate(consensus)
    rows.append((iteration, now, -1, float(np.mean(losses)) if losses else float("nan"), loss, acc))
    for w, p in zip(workers, params):
        loss, acc = task.evaluate(p)
        rows.append((iteration, now, w.rank, float(np.mean(w.losses)) if w.losses else float("nan"), loss, acc))
    return rows


def write(config: Config, cluster: Any, plan: Any, runs: list[PolicyRun], out: Path) -> None:
    """The tables so far (atomic writes, so a later failure loses nothing already written)."""
    from sim.api import result_of

    result = result_of(config, cluster, plan, runs)
    # the ideal is every worker computing all the time at its *measured* speed (not the sim's model)
    frame = result.iterations.groupby("policy")["compute_s"].mean()
    ideal = cluster.world_size * plan.batch_size / result.summary["policy"].map(frame)
    result.summary["scaling_efficiency"] = result.summary["throughput_samples_s"] / ideal
    result.write(out, plot=False, trace=False)
    arrays = {f"{run.label}/workers": run.parameters for run in runs if run.parameters is not None}
    arrays.update({f"{run.label}/consensus": run.consensus for run in runs if run.consensus is not None})
    tmp = out / "parameters.tmp.npz"
    np.savez(tmp, **arrays)
    tmp.replace(out / "parameters.npz")
