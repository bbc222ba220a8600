"""One process of a real run: join the process group, run every policy of the config, and (rank 0)
write the same tables as the simulator after each policy.

Ranks 0..W-1 are the workers (one per GPU of the config's cluster); ranks W.. run parameter-server
shards (as many as the policy that declares the most). The environment gives RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT, as `torchrun` and `syncsim real --nproc` both set them, and LOCAL_RANK
picks a worker's GPU (real/backends.py: each worker trains on its device; barriers, gathers and the
parameter-server protocol use the gloo control group of real/transport.py). A shard rank, serving
a shard or idle in a policy, computes no gradient: it keeps its task, shard tensors and optimizer
state on the host and never touches a GPU, so it takes no memory or time from the worker whose GPU
it would share.

Every group (the control group, a policy's groups, its decision group) waits at most `--timeout`
for a peer. A policy's groups are set up before its clock starts (real/groups.py: NCCL builds a
communicator on first use, which would otherwise land in step 0) and destroyed when it ends.
"""

from __future__ import annotations

import os
import re
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.base import Bucket
from policies.membership import Membership
from policies.phases import Progress
from real import device_use, partial, transport
from real.accounting import RankReport
from real.backends import backend_for, training_device, workers_per_node
from real.buffers import RankTensors
from real.departures import Departures, Rendezvous
from real.executor import RankExecutor
from real.groups import ProcessGroups, planned_groups
from real.layout import Placement, placement
from real.liveness import Heartbeat
from real.memory import real_peak, simulated_peak_bytes
from real.phases import Decisions, agree_used, restart
from real.placement import on_host, optimizer_on, task_on
from real.precision import PrecisionTask, configure_tf32
from real.results import ServerReport, assemble, write
from real.salvage import keep_partial, real_plan
from real.server import Evaluation, ShardServer
from real.sharding import RangeOptimizer, ShardedState, sharded
from real.worker import WorkerSetup, train
from sim.config import Config
from sim.engine.faults import absences_of
from sim.engine.op_checks import OpValidator
from sim.engine.phase_budget import SharedClaims
from sim.engine.run import bind_policy
from sim.errors import ConfigError
from sim.numerics.batches import ShardSampler, per_worker_batch
from sim.numerics.local_ops import phase_buffers
from sim.numerics.optim import FlatOptimizer
from sim.numerics.replica import Replica, bucket_ranges
from sim.numerics.servers import ServerTensors

PEER_FAILED = 3  # exit code: stopped because another rank failed (real.launch reads it)


class RankFailure(RuntimeError):
    """This rank could not go on because another rank died or hung; the message names it."""


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
    backend_for(backend)  # refused before anything starts: nccl without CUDA
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cluster, plan, task = _prepare(config)
    need = placement(config)
    if world != need.world:
        raise ConfigError(
            f"WORLD_SIZE: this config needs {need.world} processes ({need.workers} workers + {need.servers} "
            f"parameter-server shards), got {world}"
        )
    # and nccl where workers would share a GPU; auto: gloo there
    backend = backend_for(backend, node_workers=workers_per_node(need.workers), note=rank == 0)
    if rank < need.workers:
        device = training_device(int(os.environ.get("LOCAL_RANK", rank)))
    else:  # a parameter-server shard: on the host, no CUDA context (it computes no gradient)
        device = torch.device("cpu")
    torch.set_num_threads(config.numerics.threads)  # type: ignore[union-attr]
    precision = config.workload.precision
    configure_tf32(precision)
    trained = PrecisionTask(task_on(task, device), precision, device)  # evaluation uses `task`, on the host
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    transport.open_control(timeout_s)
    run_id = partial.run_id(transport.control())  # names this run's files in <out>/partial/
    if rank == 0:
        partial.clear(out, keep=run_id)  # an older run's leftovers; ranks write only after a barrier
    heartbeat = Heartbeat(rank, world, roles=need.roles())
    runs: list[Any] = []
    code = 0
    try:
        for index in range(len(config.policies)):
            run = _run_policy(
                config, index, cluster, plan, task, trained, need, rank, timeout_s, heartbeat, out, run_id
            )
            if rank == 0 and run is not None:
                runs.append(run)
                write(config, cluster, real_plan(config, plan, cluster), runs, out)
    except RankFailure as exc:
        print(f"rank {rank} ({need.role(rank)}): {exc}", file=sys.stderr)
        code = PEER_FAILED
        if rank == 0:
            membership = Membership(cluster.world_size, absences_of(config, cluster))  # who is scored when
            keep_partial(config, cluster, plan, task, runs, len(runs), str(exc), out, timeout_s, run_id, membership)
    finally:
        heartbeat.close()
        if code == 0:
            transport.close_control()
            dist.destroy_process_group()
    if code != 0:
        _leave(code)
    return code


def _leave(code: int) -> None:
    """Exit at once after a failure: receives still posted to a dead or frozen peer (a shard's
    receiving threads) would be torn down mid-wait by the interpreter's exit, and abort the process
    (SIGABRT) instead of exiting with `code`."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_policy(
    config: Config,
    index: int,
    cluster: Any,
    plan: Any,
    task: Any,
    trained: Any,
    need: Placement,
    rank: int,
    timeout_s: float,
    heartbeat: Heartbeat,
    out: Path,
    run_id: str,
) -> Optional[Any]:
    """`task` on the host (evaluation); `trained`: this rank's copy on its device, in the workload's
    precision (`real.precision.PrecisionTask`). After a failure a rank saves its report as plain data
    (real/partial.py) for rank 0; a finished policy's reports reach rank 0 through `gather_object`,
    which pickles them, but only between this run's own processes over the control group (no file)."""
    entry = config.policies[index]
    policy = bind_policy(entry, index, cluster, plan, config.workload.wire_precision, absences_of(config, cluster))
    specs = list(policy.all_servers())
    workers = need.workers
    buckets = [Bucket(b, bucket.nbytes, len(plan.buckets)) for b, bucket in enumerate(plan.buckets)]
    planned: list[Any] = []
    for member in policy.phase_policies():
        steps = config.iterations * (workers if member.shared_budget else 1)
        planned += planned_groups(member, workers, steps, buckets)
    groups = ProcessGroups(list({tuple(sorted(g.ranks)): g for g in planned}.values()), timeout_s)
    # adaptive phases gather timings (host tensors) here
    decision_group = dist.new_group(list(range(workers)), backend="gloo", timeout=timedelta(seconds=timeout_s))
    groups.warm_up(rank, trained.device)  # communicator setup, outside the policy's clock
    cfg = config.numerics
    assert cfg is not None
    run = _RankRun(config, entry, policy, trained, plan, buckets, workers, rank, timeout_s, groups, decision_group)
    dist.barrier(group=transport.control())
    device_use.begin(trained.device, watch=rank < workers)  # the peak ranks.csv reports: this policy's
    run.t0 = time.perf_counter()
    wall = time.time()
    try:
        if rank < workers:
            run.worker_setup()
        elif rank - workers < len(specs):
            run.shard_setup(specs[rank - workers])
        run.phases()
    except Exception as exc:
        heartbeat.mark("failed")
        if run.report is not None:  # keep what this rank measured; rank 0 adds it to the results
            run.finish()
            partial.save(out, index, rank, run_id, run.report)
        raise RankFailure(
            f"policy {entry.display!r} stopped ({_first_sentence(exc)}); " + heartbeat.suspects()
        ) from exc
    run.finish()
    gathered: Optional[list[Any]] = [None] * need.world if rank == 0 else None
    dist.gather_object(run.report, gathered, dst=0, group=transport.control())
    dist.barrier(group=transport.control())  # nobody uses the policy's groups any more: free them
    groups.destroy()
    dist.destroy_process_group(decision_group)
    if rank != 0:
        return None
    assert gathered is not None
    wall_s = time.time() - wall
    simulated = simulated_peak_bytes(config, index, cluster, plan, task.size)
    batch = per_worker_batch(cfg.global_batch, workers)
    layout = real_peak(policy, cfg.optimizer, task, [b.nbytes for b in plan.buckets], batch, config.workload.precision)
    membership = policy.bound_view.membership
    return assemble(entry, task, gathered, wall_s, cfg.eval_workers, membership, layout.total, simulated)


class _RankRun:
    """One process's part in one policy: its role (worker, shard, or idle in this policy) through
    every phase of the policy (policies.phases), the switches between them, and its report. `task`
    is on the rank's device (real/placement.py: a worker's GPU if it has one, the host on a shard
    rank); so are its replica or shard tensors."""

    def __init__(
        self,
        config: Config,
        entry: Any,
        policy: Any,
        task: Any,
        plan: Any,
        buckets: list[Bucket],
        workers: int,
        rank: int,
        timeout_s: float,
        groups: ProcessGroups,
        decision_group: Any,
    ) -> None:
        self.config, self.entry, self.policy, self.task, self.plan = config, entry, policy, task, plan
        self.buckets, self.workers, self.rank, self.timeout_s = buckets, workers, rank, timeout_s
        self.groups, self.decision_group = groups, decision_group
        self.cfg = config.numerics
        self.t0 = 0.0
        self.report: Any = None
        self.replica: Optional[Replica] = None
        self.executor: Optional[RankExecutor] = None
        self.spec: Any = None
        self.tensors: Optional[ServerTensors] = None
        self.touched: Optional[torch.Tensor] = None
        self.staleness: list[tuple[int, int]] = []
        self.snapshots: list[Any] = []
        self.sharding: Optional[ShardedState] = None

    def worker_setup(self) -> None:
        cfg, task, workers, rank = self.cfg, self.task, self.workers, self.rank
        self.report = RankReport(rank)
        device = task.initial.device
        what = sharded(self.policy)  # sharded data parallelism: state only for the shards this rank owns
        optimizer = (
            RangeOptimizer(cfg.optimizer)
            if what.optimizer
            else optimizer_on(FlatOptimizer(cfg.optimizer, 1, task.size), device)
        )
        self.replica = Replica(
            cfg,
            task,
            rank,
            task.initial.clone(),
            torch.zeros(task.size, device=device),
            optimizer,  # type: ignore[arg-type]  # a RangeOptimizer steps as a FlatOptimizer does
            0,
            bucket_ranges(task.size, [b.nbytes for b in self.plan.buckets]),
            ShardSampler(
                len(task.data.y_train), workers, rank, per_worker_batch(cfg.global_batch, workers), self.config.seed
            ),
            self.config.iterations,
            self.entry.display,
            sparsity=self.config.workload.sparsity,  # top-k with error feedback, as numerics mode does
            gradient_precision=self.config.workload.wire_precision,  # what dense gradient collectives send
        )
        self.executor = RankExecutor(
            rank, self.entry.display, self.groups, self.replica, [], None, self.timeout_s, OpValidator("", workers, 0)
        )
        self.sharding = ShardedState(self.replica, what) if what.parameters or what.gradients else None
        # every phase's buffers, on the replica's device; they live as long as the replica
        self.executor.tensors = RankTensors(self.replica, phase_buffers(self.policy.phase_policies()))

    def shard_setup(self, spec: Any) -> None:
        self.spec = spec
        self.tensors = ServerTensors(self.cfg, self.task.initial, self.workers, self.config.iterations)
        optimizer_on(self.tensors.optimizer, self.tensors.params.device)
        self.touched = torch.zeros(self.task.size, dtype=torch.bool)  # bookkeeping stays on the host
        self.report = ServerReport(spec.shard, self.tensors.params, self.touched, self.staleness, self.snapshots)
        self.report.rank = self.rank

    def phases(self) -> None:
        """Every phase in turn; between two, the switch every process takes part in."""
        workers = self.workers
        progress = Progress(0, self.config.iterations * workers, workers, 0)
        ended: Any = None
        rows: list[tuple] = []
        while (phase := self.policy.next_phase(progress)) is not None:
            switch = time.perf_counter()
            if ended is not None:
                self._restart(bool(ended.policy.servers()), progress.updates)
                time.sleep(phase.switch_cost_s)  # the modelled checkpoint/restart overhead
            begin = time.perf_counter()
            used = agree_used(self._run_phase(phase, progress))
            rows.append(
                (progress.phases, phase.label, phase.synchronous, progress.step, begin - self.t0,
                 time.perf_counter() - self.t0, used, begin - switch if ended is not None else 0.0)
            )  # fmt: skip
            progress = Progress(progress.updates + used, progress.budget, workers, progress.phases + 1)
            ended = phase
        if isinstance(self.report, RankReport):
            self.report.phases = rows
            self.report.serving = ended is not None and bool(ended.policy.servers())
            self.report.global_tensor = ended.policy.global_tensor if ended is not None else None

    def _run_phase(self, phase: Any, progress: Progress) -> int:
        """This process's part in one phase: the worker-iterations it knows were used."""
        workers, cfg = self.workers, self.cfg
        specs = list(phase.policy.servers())
        shard_ranks = [workers + s.shard for s in specs]
        clock_rank = shard_ranks[0] if shard_ranks else None
        if self.executor is not None:
            ex = self.executor
            ex.shard_ranks, ex.clock_rank = shard_ranks, clock_rank
            buffers = [b.name for b in phase.policy.buffers()]
            ex.validator = OpValidator(
                self.entry.display, workers, len(specs), buffers=buffers, buckets=len(self.buckets)
            )
            decisions = None
            if phase.adaptive and phase.synchronous:
                decisions = Decisions(self.policy, self.decision_group, workers)
            setup = WorkerSetup(
                self.rank, phase.policy, ex, self.buckets, phase.steps(workers), shard_ranks, clock_rank, self.t0,
                cfg.eval_every, progress.step, progress.phases, not phase.synchronous, phase.adaptive, decisions,
                self.config.iterations, self._departures(phase, progress), self.sharding,
            )  # fmt: skip
            ran = train(setup, self.report)
            return ran * workers if phase.synchronous else 0
        if self.spec is None or self.spec.shard >= len(specs):
            return 0  # no shard of this phase runs here
        coordinator = self.rank == clock_rank
        claims = SharedClaims(phase, self.policy, progress) if coordinator and not phase.synchronous else None
        evaluation = Evaluation(cfg.eval_every, len(self.buckets), self.config.iterations, self.t0, progress.updates)
        assert self.tensors is not None
        server = ShardServer(
            specs[self.spec.shard], workers, self.tensors, coordinator, claims, evaluation, self.touched, progress.step,
            timeout_s=self.timeout_s,
        )  # fmt: skip
        server.serve()
        self.staleness += server.staleness
        self.snapshots += server.snapshots
        return claims.claimed if claims is not None else 0

    def _departures(self, phase: Any, progress: Progress) -> Optional[Departures]:
        """This worker's steps where workers leave and come back in a synchronous phase (None: they do not)."""
        membership = phase.policy.bound_view.membership
        if not membership.changes or not phase.synchronous:
            return None
        end = progress.step + phase.steps(self.workers)
        rendezvous = Rendezvous(f"{self.entry.display}/{progress.phases}")
        return Departures(membership, self.rank, end, rendezvous)

    def _restart(self, from_servers: bool, updates: int) -> None:
        """Checkpoint and restart (real/phases.py): every replica and shard takes the model."""
        shard = (self.tensors.params, self.touched) if self.tensors is not None else None
        params = self.replica.params if self.replica is not None else None
        model = restart(self.task.size, self.workers, from_servers, params, shard)  # type: ignore[arg-type]
        if self.replica is not None:
            self.replica.params.copy_(model)
            if self.executor is not None and self.executor.tensors is not None:
                self.executor.tensors.restart(self.replica.params)
            self.report.checkpoints.append(model.clone())
        if self.tensors is not None:
            self.tensors.begin_phase(model, updates)

    def finish(self) -> None:
        """Fill the report with what the executor recorded (times from the policy's start); its
        tensors on the host."""
        ex, report, t0 = self.executor, self.report, self.t0
        if report is None:  # a rank idle in this policy reports nothing
            return
        report.device_use = device_use.measured(self.task.device)
        if isinstance(report, ServerReport):
            report.params = on_host(report.params)
        if ex is None or self.replica is None:
            return
        scale = self.task.loss_scale
        report.loss_scale = scale.scale if scale is not None else float("nan")
        report.blocked = [(s, a - t0, b - t0) for s, a, b in ex.blocked]
        report.collectives = [(*r[:6], r[6] - t0, r[7] - t0, r[8], r[9], r[10] - t0) for r in ex.collectives]
        report.p2p = [(*r[:6], r[6] - t0, r[7] - t0) for r in ex.p2p]
        report.losses = self.replica.losses
        report.parameters = on_host(self.replica.params)
        report.owned = self.replica.owned()  # rank 0 fills in the rest from the owners (real/results.py)
        if report.global_tensor is not None and ex.tensors is not None:
            report.global_model = on_host(ex.tensors.store.tensor(report.global_tensor))


def _first_sentence(exc: BaseException) -> str:
    """gloo's messages start with a source path and end with advice; keep what happened."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = re.sub(r"^\[[^\]]*\.(cc|cpp|h):\d+\]\s*", "", text)
    return text.split(". This is typically")[0][:200]
