"""Rank 0 turns what every process reported into a `PolicyRun`, and writes the simulator's tables
(every iteration in `iterations.csv`; the summary's timings without each worker's warm-up
iterations, `warmup_iterations`, default 3, as `syncsim validate` compares them), `trace.json` and
figures (those a real run can measure: no per-link tables) plus `parameters.npz` (per policy:
`<label>/workers`, every replica's final flat parameters, `<label>/consensus`, and
`<label>/checkpoint<k>`, the model restarted from at a phased policy's k-th switch), which the
simulator keeps in memory as `PolicyRun.parameters` / `.consensus` / `.checkpoints`."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from real.accounting import RankReport, account
from real.device_use import DeviceUse, rank_rows, rank_table
from sim.config import Config, PolicyEntry
from sim.engine.run import PolicyRun
from sim.files import atomic_path, atomic_write
from sim.results import Result
from sim.results.console import summary_table


@dataclass
class ServerReport:
    shard: int
    params: torch.Tensor  # the shard's copy of the model; only `touched` elements are its own
    touched: torch.Tensor
    staleness: list[tuple[int, int]]
    snapshots: list[tuple[int, float, torch.Tensor]] = field(default_factory=list)  # (iteration, seconds, params)
    device_use: DeviceUse | None = None  # where its tensors lived (real/device_use.py)
    rank: int = -1  # its process's global rank


def assemble(
    entry: PolicyEntry, task: Any, gathered: Sequence[Any], wall_s: float, eval_workers: bool = True
) -> PolicyRun:
    workers = [r for r in gathered if isinstance(r, RankReport)]
    servers = [r for r in gathered if isinstance(r, ServerReport)]
    run = PolicyRun(entry.display, entry.name)
    run.iterations, run.ops = account(workers)
    run.staleness = [pair for server in servers for pair in server.staleness]
    run.wall_s = wall_s
    ranks = [(w.rank, "worker", w.device_use, w.loss_scale, sum(n for _, n in w.overflows)) for w in workers]
    ranks += [(s.rank, f"parameter-server shard {s.shard}", s.device_use, float("nan"), 0) for s in servers]
    run.devices = rank_rows(entry.display, [r for r in ranks if r[2] is not None])
    run.sim_time_s = max((row[6] for row in run.iterations), default=0.0)
    if not workers:
        return run
    first = min(workers, key=lambda w: w.rank)
    run.phases = list(first.phases)
    run.checkpoints = [c.numpy() for c in first.checkpoints]
    params = torch.stack([w.parameters for w in workers])  # type: ignore[misc]
    run.parameters = params.numpy()
    serving = servers and first.serving  # the last phase ran servers
    if serving:
        consensus = _servers_model(task.initial, servers, [s.params for s in servers])
    elif first.global_model is not None:  # the policy's global model: every worker holds the same (worker 0's)
        consensus = first.global_model  # type: ignore[assignment]
    else:
        consensus = params.mean(dim=0)
    run.scored = "servers" if serving else first.global_tensor or "mean"
    run.consensus = consensus.numpy()
    final = len(run.iterations) / max(1, len(workers))
    run.accuracy = _evaluate(task, workers, servers, params, consensus, final, run.sim_time_s, eval_workers)
    return run


def _evaluate(
    task: Any,
    workers: Sequence[RankReport],
    servers: Sequence[ServerReport],
    params: torch.Tensor,
    consensus: torch.Tensor,
    iteration: float,
    now: float,
    eval_workers: bool,
) -> list[tuple]:
    """Held-out loss and accuracy of the consensus (then of every replica, with `eval_workers`) as
    numerics mode reports them: at the start, at each snapshot, and at the end.

    The consensus at a snapshot is the shards' parameters (where every shard took one: phases with
    servers), or the policy's global model (worker 0's `global_tensor` buffer), or else the replicas'
    mean (where every worker took one: synchronous budgets);
    replicas are evaluated where every worker took a snapshot. A row's train loss is the mean
    minibatch loss since the previous row."""
    rows: list[tuple] = []

    def add(
        it: float, t: float, model: torch.Tensor, replicas: Sequence[torch.Tensor], windows: list[list[float]]
    ) -> None:
        losses = [x for w in windows for x in w]
        rows.append((it, t, -1, _mean(losses), *task.evaluate(model)))
        if eval_workers and replicas:
            for w, p, window in zip(workers, replicas, windows):
                rows.append((it, t, w.rank, _mean(window), *task.evaluate(p)))

    initial = task.initial
    add(0.0, 0.0, initial, [initial] * len(workers), [[] for _ in workers])
    taken = [0] * len(workers)  # losses already reported, per worker
    by_worker = [{snap[0]: snap for snap in w.snapshots} for w in workers]
    lead = min(range(len(workers)), key=lambda i: workers[i].rank)
    by_server = [{snap[0]: snap for snap in s.snapshots} for s in servers]
    at_servers = set.intersection(*(set(d) for d in by_server)) if servers else set()
    at_workers = set.intersection(*(set(d) for d in by_worker)) if workers else set()
    for it in sorted(at_servers | at_workers):
        if it in at_servers:
            model = _servers_model(initial, servers, [snaps[it][2] for snaps in by_server])
            t = max(snaps[it][1] for snaps in by_server)
        else:
            held = by_worker[lead][it][4]  # the policy's global model, as numerics mode scores it (worker 0's)
            model = held if held is not None else torch.stack([snaps[it][2] for snaps in by_worker]).mean(dim=0)
            t = max(snaps[it][1] for snaps in by_worker)
        replicas = [snaps[it][2] for snaps in by_worker] if all(it in snaps for snaps in by_worker) else []
        windows = []
        for i, (w, snaps) in enumerate(zip(workers, by_worker)):
            upto = snaps[it][3] if it in snaps else taken[i]
            windows.append(w.losses[taken[i] : upto])
            taken[i] = upto
        add(float(it), t, model, replicas, windows)
    add(iteration, now, consensus, list(params), [w.losses[n:] for w, n in zip(workers, taken)])
    return rows


def _servers_model(
    initial: torch.Tensor, servers: Sequence[ServerReport], params: Sequence[torch.Tensor]
) -> torch.Tensor:
    """The model the shards hold: each shard's `params` on the elements pushed to it, else `initial`."""
    model = initial.clone()
    for server, p in zip(servers, params):
        model[server.touched] = p[server.touched]
    return model


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def write(config: Config, cluster: Any, plan: Any, runs: list[PolicyRun], out: Path) -> None:
    """The tables so far (atomic writes, so a later failure loses nothing already written), then
    `trace.json`, then, once every policy has finished, the figures. `iterations.csv` has every
    iteration; the summary's timings leave out each worker's first `Config.summary_warmup(real=True)`
    (connection set-up, allocator and cache warm-up: what `syncsim validate` drops too). The
    per-link tables are left out: a real run cannot see what each link carried
    (`sim.results.result.UNMEASURED`)."""
    from sim.api import result_of

    result = result_of(config, cluster, plan, runs, measured=True)  # the summary leaves out the warm-up
    result.measured = True
    # the ideal is every worker computing all the time at its *measured* speed (not the sim's model),
    # over the same iterations as the throughput
    ideal = cluster.world_size * plan.batch_size / result.summary["mean_compute_s"]
    result.summary["scaling_efficiency"] = result.summary["throughput_samples_s"] / ideal
    result.write(out, plot=False, trace=False)
    arrays = {f"{run.label}/workers": run.parameters for run in runs if run.parameters is not None}
    arrays.update({f"{run.label}/consensus": run.consensus for run in runs if run.consensus is not None})
    arrays.update({f"{run.label}/checkpoint{k}": c for run in runs for k, c in enumerate(run.checkpoints)})
    with atomic_path(out / "parameters.npz") as tmp:
        np.savez(tmp, **arrays)
    atomic_write(out / "ranks.csv", rank_table([row for run in runs for row in run.devices]).to_csv(index=False))
    # a failed run skips the figures: rank 0 must write its rows before the launcher's deadline
    finished = len(runs) == len(config.policies) and not result.errors
    draw(result, out, figures=finished)


def draw(result: Result, out: Path, figures: bool = True) -> None:
    """`trace.json` and (with `figures`) the figures of tables already written: a failure here is
    reported in one line and loses no table."""
    from sim.results.trace import chrome_trace

    step = "trace.json"
    try:
        if result.config.simulation.trace:
            atomic_write(out / "trace.json", chrome_trace(result, result.config.simulation.trace_max_events))
        step = "the figures"
        if figures:
            result.plot(out)
    except Exception as exc:  # noqa: BLE001 - the tables are what matters; say what is missing and go on
        print(f"rank 0: {step} not written ({type(exc).__name__}: {exc}); the tables are", file=sys.stderr)


def print_real_results(out: Path) -> None:
    """A real run's summary table and what its folder holds (`syncsim real`, or rank 0 under torchrun)."""
    summary = out / "summary.csv"
    if not summary.exists():
        return
    print(summary_table(pd.read_csv(summary)))
    figures = ", ".join(sorted(p.stem for p in out.glob("*.png")))
    print(
        f"\nresults: {out}/ (summary, iterations, phases, ops, staleness, accuracy, ranks: .csv; parameters.npz"
        + ("; trace.json" if (out / "trace.json").exists() else "")
        + (f"; figures: {figures}" if figures else "")
        + ")",
        flush=True,
    )
