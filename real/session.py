"""One process of a real run: join the process group, run every policy of the config, and (rank 0)
write the same tables as the simulator after each policy.

Ranks 0..W-1 are the workers (one per GPU of the config's cluster); ranks W.. run parameter-server
shards (as many as the policy that declares the most). The environment gives RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT, as `torchrun` and `syncsim real --nproc` both set them.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import time
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.base import Bucket
from real.accounting import RankReport
from real.backends import backend_for
from real.executor import RankExecutor
from real.groups import ProcessGroups, planned_groups
from real.liveness import Heartbeat
from real.results import ServerReport, assemble, write
from real.server import Evaluation, ShardServer
from real.worker import WorkerSetup, train
from sim.config import Config
from sim.engine import bind_policy
from sim.errors import ConfigError
from sim.numerics.batches import ShardSampler, per_worker_batch
from sim.numerics.optim import FlatOptimizer
from sim.numerics.replica import Replica, bucket_ranges
from sim.numerics.servers import ServerTensors
from sim.validation import OpValidator

PEER_FAILED = 3  # exit code: stopped because another rank failed (real.launch reads it)


class RankFailure(RuntimeError):
    """This rank could not go on because another rank died or hung; the message names it."""


@dataclass(frozen=True)
class Placement:
    """The processes a config needs and the cluster host of each: a worker per GPU, then the shards."""

    hosts: tuple[str, ...]  # per global rank
    workers: int

    @property
    def servers(self) -> int:
        return len(self.hosts) - self.workers

    @property
    def world(self) -> int:
        return len(self.hosts)


def placement(config: Config) -> Placement:
    """Shard s runs on the host the first policy declaring a shard s places it on."""
    from sim.api import prepare

    cluster, plan = prepare(config)
    shard_hosts: list[str] = []
    for i, entry in enumerate(config.policies):
        for spec in bind_policy(entry, i, cluster, plan).servers():
            if spec.shard >= len(shard_hosts):
                shard_hosts.append(spec.host)
    return Placement(tuple(cluster.view.rank_hosts) + tuple(shard_hosts), cluster.world_size)


def require_numerics(config: Config) -> None:
    if not config.numerics_on:
        raise ConfigError(
            "numerics: the real backend trains the model of the numerics: section; add one "
            "(see configs/real_2x2_digits.yaml)"
        )


def main(config: Config, out: Path, timeout_s: float, backend: str = "auto") -> int:
    """Run in every process; returns the process exit code."""
    from sim.api import _prepare

    require_numerics(config)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cluster, plan, task = _prepare(config)
    need = placement(config)
    if world != need.world:
        raise ConfigError(
            f"WORLD_SIZE: this config needs {need.world} processes ({need.workers} workers + {need.servers} "
            f"parameter-server shards), got {world}"
        )
    backend = backend_for(backend)
    torch.set_num_threads(config.numerics.threads)  # type: ignore[union-attr]
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    heartbeat = Heartbeat(rank, world)
    runs: list[Any] = []
    code = 0
    try:
        for index in range(len(config.policies)):
            run = _run_policy(config, index, cluster, plan, task, need, rank, timeout_s, heartbeat, out)
            if rank == 0 and run is not None:
                runs.append(run)
                write(config, cluster, _real_plan(config, plan, cluster), runs, out)
    except RankFailure as exc:
        print(f"rank {rank}: {exc}", file=sys.stderr)
        code = PEER_FAILED
        if rank == 0:
            _keep_partial(config, cluster, plan, task, runs, len(runs), str(exc), out, timeout_s)
    finally:
        heartbeat.close()
        if code == 0:
            dist.destroy_process_group()
    return code


def _keep_partial(
    config: Config,
    cluster: Any,
    plan: Any,
    task: Any,
    runs: list[Any],
    index: int,
    error: str,
    out: Path,
    wait_s: float,
) -> None:
    """Rank 0, after a failure: the policy's rows every surviving worker saved, marked failed."""
    deadline = time.monotonic() + min(wait_s, 10.0)
    pattern = f"{index}-rank*.pkl"
    seen = -1
    while time.monotonic() < deadline:  # the others save theirs as their own timeouts fire
        found = len(list((out / "partial").glob(pattern)))
        if found == seen:
            break
        seen = found
        time.sleep(1.0)
    reports = []
    for path in sorted((out / "partial").glob(pattern)):
        with open(path, "rb") as f:
            reports.append(pickle.load(f))
    entry = config.policies[index]
    run = assemble(entry, task, reports, 0.0)
    run.error = error
    write(config, cluster, _real_plan(config, plan, cluster), [*runs, run], out)


def _run_policy(
    config: Config,
    index: int,
    cluster: Any,
    plan: Any,
    task: Any,
    need: Placement,
    rank: int,
    timeout_s: float,
    heartbeat: Heartbeat,
    out: Path,
) -> Optional[Any]:
    entry = config.policies[index]
    policy = bind_policy(entry, index, cluster, plan)
    specs = list(policy.servers())
    workers = need.workers
    buckets = [Bucket(b, bucket.nbytes, len(plan.buckets)) for b, bucket in enumerate(plan.buckets)]
    steps = config.iterations * (workers if policy.shared_budget else 1)
    groups = ProcessGroups(planned_groups(policy, workers, steps, buckets))
    shard_ranks = [workers + s.shard for s in specs]
    clock_rank = shard_ranks[0] if shard_ranks else None
    cfg = config.numerics
    assert cfg is not None
    report: Any = None
    dist.barrier()
    t0 = time.perf_counter()
    wall = time.time()
    try:
        if rank < workers:
            report = RankReport(rank)
            replica = Replica(
                cfg,
                task,
                rank,
                task.initial.clone(),
                torch.zeros(task.size),
                FlatOptimizer(cfg.optimizer, 1, task.size),
                0,
                bucket_ranges(task.size, [b.nbytes for b in plan.buckets]),
                ShardSampler(
                    len(task.data.y_train), workers, rank, per_worker_batch(cfg.global_batch, workers), config.seed
                ),
                config.iterations,
                entry.display,
            )
            executor = RankExecutor(
                rank,
                entry.display,
                groups,
                replica,
                shard_ranks,
                clock_rank,
                timeout_s,
                OpValidator(entry.display, workers, len(specs)),
            )
            setup = WorkerSetup(
                rank, policy, executor, buckets, config.iterations, shard_ranks, clock_rank, t0, cfg.eval_every
            )
            try:
                train(setup, report)
            finally:
                report.blocked = [(s, a - t0, b - t0) for s, a, b in executor.blocked]
                report.collectives = [(*r[:6], r[6] - t0, r[7] - t0) for r in executor.collectives]
                report.p2p = [(*r[:6], r[6] - t0, r[7] - t0) for r in executor.p2p]
                report.losses = replica.losses
                report.parameters = replica.params
        elif rank - workers < len(specs):
            spec = specs[rank - workers]
            tensors = ServerTensors(cfg, task.initial, workers, config.iterations)
            budget = config.iterations * workers if policy.shared_budget else None
            evaluation = Evaluation(cfg.eval_every, len(buckets), config.iterations, t0)
            server = ShardServer(spec, workers, tensors, rank == clock_rank, budget, evaluation)
            server.serve()
            report = ServerReport(spec.shard, tensors.params, server.touched, server.staleness, server.snapshots)
    except Exception as exc:
        heartbeat.mark("failed")
        if report is not None:  # keep what this rank measured; rank 0 adds it to the results
            partial = out / "partial"
            partial.mkdir(parents=True, exist_ok=True)
            with open(partial / f"{index}-rank{rank}.pkl", "wb") as f:
                pickle.dump(report, f)
        raise RankFailure(
            f"policy {entry.display!r} stopped ({_first_sentence(exc)}); " + heartbeat.suspects()
        ) from exc
    gathered: Optional[list[Any]] = [None] * need.world if rank == 0 else None
    dist.gather_object(report, gathered, dst=0)
    dist.barrier()
    if rank != 0:
        return None
    assert gathered is not None
    return assemble(entry, task, gathered, time.time() - wall, cfg.eval_workers)


def _first_sentence(exc: BaseException) -> str:
    """gloo's messages start with a source path and end with advice; keep what happened."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)
    return text.split(". This is typically")[0][:200]


def _real_plan(config: Config, plan: Any, cluster: Any) -> Any:
    """The plan the tables use: a worker's real batch is the numerics batch, not the workload's."""
    assert config.numerics is not None
    return replace(plan, batch_size=per_worker_batch(config.numerics.global_batch, cluster.world_size))
