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
from typing import Any, Optional

import numpy as np
import pandas as pd
import torch

from policies.membership import Membership
from real.accounting import RankReport, account
from real.device_use import DeviceUse, rank_rows, rank_table
from sim.config import Config, PolicyEntry
from sim.engine.run import PolicyRun
from sim.files import atomic_path, atomic_write
from sim.numerics.shards import full_models
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
    entry: PolicyEntry,
    task: Any,
    gathered: Sequence[Any],
    wall_s: float,
    eval_workers: bool = True,
    membership: Optional[Membership] = None,
    predicted_peak_bytes: float = float("nan"),
    simulated_peak_bytes: float = float("nan"),
) -> PolicyRun:
    """`membership`: the ranks live at each step (policies.membership; None: every worker at every step);
    `predicted_peak_bytes`, `simulated_peak_bytes`: the peak memory per worker of the real backend's layout and
    of the simulator's memory model (`real.memory`), for ranks.csv."""
    workers = sorted((r for r in gathered if isinstance(r, RankReport)), key=lambda w: w.rank)
    servers = [r for r in gathered if isinstance(r, ServerReport)]
    run = PolicyRun(entry.display, entry.name)
    run.iterations, run.ops = account(workers)
    run.staleness = [pair for server in servers for pair in server.staleness]
    run.wall_s = wall_s
    ranks = [(w.rank, "worker", w.device_use, w.loss_scale, sum(n for _, n in w.overflows)) for w in workers]
    ranks += [(s.rank, f"parameter-server shard {s.shard}", s.device_use, float("nan"), 0) for s in servers]
    live = [r for r in ranks if r[2] is not None]
    run.devices = rank_rows(entry.display, live, predicted_peak_bytes, simulated_peak_bytes)
    run.sim_time_s = max((row[6] for row in run.iterations), default=0.0)
    if not workers:
        return run
    _full_models(workers)
    first = workers[0]
    run.phases = list(first.phases)
    run.checkpoints = [c.numpy() for c in first.checkpoints]
    params = torch.stack([w.parameters for w in workers])  # type: ignore[misc]
    run.parameters = params.numpy()
    away = membership is not None and membership.changes
    # the iterations the run covered: a worker away for some steps has no rows for them (numerics mode counts
    # them as done)
    final = max((row[0] for row in run.iterations), default=-1) + 1.0 if away else len(run.iterations) / len(workers)
    live = _Live(workers, membership)
    scored = live.at(final)
    serving = servers and first.serving  # the last phase ran servers
    if serving:
        consensus = _servers_model(task.initial, servers, [s.params for s in servers])
    elif first.global_model is not None:  # the policy's global model: every live worker holds the same
        consensus = workers[scored[0]].global_model  # type: ignore[assignment]  # the first live one's
    else:
        consensus = params[scored].mean(dim=0)
    run.scored = "servers" if serving else first.global_tensor or "mean"
    run.consensus = consensus.numpy()
    run.accuracy = _evaluate(task, workers, servers, params, consensus, final, run.sim_time_s, eval_workers, live)
    return run


def _full_models(workers: Sequence[RankReport]) -> None:
    """Sharded workers (`RankReport.owned`): their final parameters and every snapshot all of them took, with
    the elements each does not own taken from their owners (`sim.numerics.shards.full_models`, FSDP's full
    state dict), as numerics mode evaluates them."""
    owned = [w.owned for w in workers]
    if not any(owned):
        return
    if all(w.parameters is not None for w in workers):
        full = full_models(torch.stack([w.parameters for w in workers]), owned)  # type: ignore[misc]
        for w, row in zip(workers, full):
            w.parameters = row
    snapped = [{snap[0]: i for i, snap in enumerate(w.snapshots)} for w in workers]
    for it in set.intersection(*(set(d) for d in snapped)):
        full = full_models(torch.stack([w.snapshots[d[it]][2] for w, d in zip(workers, snapped)]), owned)
        for w, d, row in zip(workers, snapped, full):
            snap = w.snapshots[d[it]]
            w.snapshots[d[it]] = (*snap[:2], row, *snap[3:])


class _Live:
    """Which workers (positions in the rank-ordered reports) an evaluation after `iteration` iterations
    scores: those that trained step `iteration - 1`, as numerics mode scores them (every one without
    `membership`)."""

    def __init__(self, workers: Sequence[RankReport], membership: Optional[Membership]) -> None:
        self.position = {w.rank: i for i, w in enumerate(workers)}
        self.membership = membership if membership is not None and membership.changes else None

    def at(self, iteration: float) -> list[int]:
        if self.membership is None or iteration < 1:
            return list(self.position.values())
        ranks = self.membership.live(int(iteration) - 1)
        return [self.position[r] for r in ranks if r in self.position]


def _evaluate(
    task: Any,
    workers: Sequence[RankReport],
    servers: Sequence[ServerReport],
    params: torch.Tensor,
    consensus: torch.Tensor,
    iteration: float,
    now: float,
    eval_workers: bool,
    live: _Live,
) -> list[tuple]:
    """Held-out loss and accuracy of the consensus (then of every replica, with `eval_workers`) as
    numerics mode reports them: at the start, at each snapshot, and at the end.

    Only the workers `live` at an evaluated iteration (that trained its last step) are scored, and
    waited for: a worker away then took no snapshot. The consensus at a snapshot is the shards'
    parameters (where every shard took one: phases with servers), or the policy's global model (the
    first live worker's `global_tensor` buffer), or else the live replicas' mean (where every live
    worker took one: synchronous budgets); replicas are evaluated where every live worker took a
    snapshot. A row's train loss is the mean minibatch loss since the previous row."""
    rows: list[tuple] = []
    taken = [0] * len(workers)  # losses already reported, per worker

    def add(it: float, t: float, model: torch.Tensor, scored: Sequence[int], replicas: Sequence[torch.Tensor]) -> None:
        windows = []
        for i in scored:  # each scored worker's losses since its last row, up to this snapshot (the end: all)
            upto = by_worker[i][it][3] if it in by_worker[i] else len(workers[i].losses) if final else taken[i]
            windows.append(workers[i].losses[taken[i] : upto])
            taken[i] = upto
        rows.append((it, t, -1, _mean([x for w in windows for x in w]), *task.evaluate(model)))
        if eval_workers and replicas:
            for i, p, window in zip(scored, replicas, windows):
                rows.append((it, t, workers[i].rank, _mean(window), *task.evaluate(p)))

    initial = task.initial
    by_worker = [{snap[0]: snap for snap in w.snapshots} for w in workers]
    final = False
    add(0.0, 0.0, initial, live.at(0), [initial] * len(workers))
    by_server = [{snap[0]: snap for snap in s.snapshots} for s in servers]
    at_servers = set.intersection(*(set(d) for d in by_server)) if servers else set()
    snapped = set().union(*(set(d) for d in by_worker))
    at_workers = {it for it in snapped if all(it in by_worker[i] for i in live.at(it))}
    for it in sorted(at_servers | at_workers):
        scored = live.at(it)
        if it in at_servers:
            model = _servers_model(initial, servers, [snaps[it][2] for snaps in by_server])
            t = max(snaps[it][1] for snaps in by_server)
        else:  # the policy's global model, as numerics mode scores it (the first live worker's)
            held = by_worker[scored[0]][it][4]
            model = held if held is not None else torch.stack([by_worker[i][it][2] for i in scored]).mean(dim=0)
            t = max(by_worker[i][it][1] for i in scored)
        replicas = [by_worker[i][it][2] for i in scored] if all(it in by_worker[i] for i in scored) else []
        add(float(it), t, model, scored, replicas)
    final = True
    scored = live.at(iteration)
    add(iteration, now, consensus, scored, [params[i] for i in scored])
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
