"""One policy on one cluster and workload: the SimPy run that produces result rows.

This module wires the pieces together: the flow network, collectives and communicators, server
shards, clocks, the workers (`sim/engine/worker.py`), faults and background traffic (`sim/engine/faults.py`) and
the link sampler (`sim/network/sampling.py`). Every policy of a config sees the same compute jitter,
faults and background traffic, all drawn from the config's seed.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Optional

import numpy as np

from policies.base import Policy, SettingError
from policies.lowrank import FactorBuffer
from policies.membership import Absence
from policies.registry import create
from policies.view import ModelInfo
from sim.cluster.routing import Router
from sim.cluster.topology import Cluster
from sim.compute.durations import ComputeModel
from sim.compute.sparse_traffic import shared_traffic
from sim.compute.workload import ComputePlan
from sim.config import Config, PolicyEntry
from sim.engine.clocks import ClockBoard
from sim.engine.collectives import CollectiveRunner, Launched
from sim.engine.communicators import Communicators
from sim.engine.decisions import Decision, run_decisions
from sim.engine.executor import Executor
from sim.engine.faults import FaultContext, LinkEffects, absences_of, background, straggler
from sim.engine.input_pipeline import preparing
from sim.engine.local_op_costs import FactorPricing, LocalOpCosts, local_op_bandwidth
from sim.engine.nccl_plans import nccl_capacity, planner_for
from sim.engine.phase_runner import PhaseRunner
from sim.engine.servers import Shard
from sim.engine.symmetry import HostImages, fill_image_links, host_images, why_not_symmetric
from sim.engine.worker import BlockedTime, IterationRow
from sim.errors import ConfigError, DeadlockError
from sim.kernel.environment import CountingEnvironment
from sim.kernel.gc_quiet import quiet_gc
from sim.memory import MemoryTerms, policy_memory
from sim.nccl.fabrics import fabric_of
from sim.network.flows import Network
from sim.network.sampling import LinkSampler
from sim.network.traces import follow_traces


@dataclass
class PolicyRun:
    """Rows and statistics of one policy's run; `error` is set if it stopped early."""

    label: str
    name: str
    iterations: list[IterationRow] = field(default_factory=list)
    ops: list[tuple] = field(default_factory=list)  # see results.OP_FIELDS
    staleness: list[tuple[int, int]] = field(default_factory=list)  # (rank, staleness) per applied async update
    faults: list[tuple] = field(default_factory=list)  # see sim.engine.faults.FaultRow
    phases: list[tuple] = field(default_factory=list)  # see sim.results.tables.PHASE_FIELDS
    error: Optional[str] = None
    traceback: Optional[str] = None
    events: int = 0
    flows: int = 0
    recomputes: int = 0
    wall_s: float = 0.0
    sim_time_s: float = 0.0
    link_bytes: Optional[np.ndarray] = None
    sampler: Optional[LinkSampler] = None
    accuracy: list[tuple] = field(default_factory=list)  # see sim.numerics.evaluation.AccuracyRow
    parameters: Optional[np.ndarray] = None  # numerics: every replica's final flat parameters (workers x n)
    consensus: Optional[np.ndarray] = None  # numerics: the servers' model, the global tensor, or the replicas' mean
    scored: str = "mean"  # numerics: which model the consensus rows scored (sim.numerics.evaluation.Evaluator.scored)
    checkpoints: list[np.ndarray] = field(default_factory=list)  # numerics: the model at each switch
    devices: list[tuple] = field(default_factory=list)  # real runs: rows of real.device_use.RANK_FIELDS
    memory: Optional[MemoryTerms] = None  # predicted peak memory per GPU (sim.memory)
    decisions: list[Decision] = field(default_factory=list)  # what the run chose for `auto` settings, and why
    images: Optional[HostImages] = None  # host symmetry: rows are host 0's, expanded by sim.results.tables


def model_info(plan: ComputePlan, gradient_type: str = "fp32") -> ModelInfo:
    """`gradient_type`: the workload's resolved `gradient_precision`, the type bucket bytes count in.
    Bucket shapes are the plan's (() when a layer's are not known)."""
    return ModelInfo(
        plan.parameter_bytes,
        tuple(b.nbytes for b in plan.buckets),
        tuple(layout.sparse for layout in plan.layouts),
        gradient_type=gradient_type,
        bucket_shapes=plan.bucket_shapes,
    )


def bind_policy(
    entry: PolicyEntry,
    index: int,
    cluster: Cluster,
    plan: ComputePlan,
    gradient_type: str = "fp32",
    absences: tuple[Absence, ...] = (),
) -> Policy:
    """Create and bind a policy to the cluster with `absences` (workers away for some steps); a setting
    that does not fit the cluster, or a departure the policy cannot follow, becomes a ConfigError."""
    view = replace(cluster.view, absences=absences) if absences else cluster.view
    try:
        policy = create(entry.name, entry.settings)
        policy.bind(view, model_info(plan, gradient_type))
    except SettingError as exc:
        raise ConfigError("\n".join(f"policies[{index}].{field}: {detail}" for field, detail in exc.problems)) from None
    problems = policy.membership_problems(view.membership)
    if problems:
        raise ConfigError("\n".join(f"faults.{field}: {detail} (policies[{index}])" for field, detail in problems))
    for spec in policy.all_servers():
        if spec.host not in cluster.view.hosts:
            raise ConfigError(f"policies[{index}]: server shard {spec.shard} is placed on unknown host {spec.host!r}")
    return policy


def symmetry_decision(
    config: Config, cluster: Cluster, policy: Policy, numerics: bool, images: Optional[HostImages]
) -> Decision:
    """decisions.csv's row for `simulation.host_symmetry`: which path ran, and why."""
    if images is not None:
        return ("simulation.host_symmetry", "one host", f"auto: {images.describe()} (docs/scale.md)")
    if config.simulation.host_symmetry == "off":
        return ("simulation.host_symmetry", "every rank", "off: every rank simulated")
    why = why_not_symmetric(config, cluster, policy, numerics) or "a local group's routes leave its host"
    return ("simulation.host_symmetry", "every rank", f"auto: {why}")


def sampled_links(cluster: Cluster) -> np.ndarray:
    """Every network link (GPU-host links aside)."""
    return np.array([i for i, link in enumerate(cluster.links) if link.kind != "intra"], dtype=np.int64)


def run_policy(
    config: Config,
    index: int,
    cluster: Cluster,
    plan: ComputePlan,
    on_progress: Optional[Callable[[int], None]] = None,
    task: Any = None,
) -> PolicyRun:
    """`task` (a `sim.numerics.tasks.Task`, numerics mode) makes every worker train a real replica."""
    entry = config.policies[index]
    absences = absences_of(config, cluster)
    policy = bind_policy(entry, index, cluster, plan, config.workload.wire_precision, absences)
    run = PolicyRun(entry.display, entry.name, memory=policy_memory(policy, plan, config))
    env = CountingEnvironment()
    router = Router(cluster, config.seed)
    planner, slowdown = None, 1.0
    if config.simulation.network_model == "nccl":
        fabric = fabric_of(cluster.gpu.name, config.simulation.nccl.transport)
        capacity = nccl_capacity(cluster, fabric)
        planner = planner_for(cluster, config.simulation, router, capacity)
        slowdown = fabric.overlap_slowdown(cluster.gpu.sms)
    else:
        capacity = cluster.capacity
    net = Network(env, capacity, cluster.latency, cluster.flow_cap)  # flow_cap: WAN windows (docs/wan.md)
    follow_traces(env, net, cluster.capacity_traces)
    if planner is not None:
        planner.follow(net)  # faults' delays reach NCCL's per-step network latency
    model = config.simulation.collective_model
    world = cluster.world_size
    # on the run at once: the rows of a run that fails part-way are expanded too
    images = run.images = host_images(config, cluster, policy, router, task is not None)
    weight = images.hosts if images is not None else 1
    blocked = BlockedTime()
    progress = {"last": 0.0}
    group_ids: dict[Any, int] = {}
    next_gid = [0]

    def group_id(group: Any) -> int:
        """Groups numbered in the order their first call finishes; a group on host 0 keeps the ids of its
        images on the other hosts after its own (they finish right after it, in host order)."""
        gid = group_ids.get(group)
        if gid is None:
            gid = group_ids[group] = next_gid[0]
            if images is not None and images.is_local(group):
                images.image_gids.add(gid)
                next_gid[0] += images.hosts
            else:
                next_gid[0] += 1
        return gid

    # progress for the deadlock detector: every finished op counts, so that hops of a second each
    # (slow-latency links) are not mistaken for a stall when an iteration takes an hour
    def on_collective(op: Any, step: int, issued: float, launched: float, wire: Launched) -> None:
        progress["last"] = env.now
        gid = group_id(op.group)
        kind = type(op).__name__
        row = (
            step,
            -1,
            kind,
            gid,
            op.group.size,
            -1,
            1,
            op.nbytes,
            issued,
            launched,
            env.now,
            wire.nbytes,
            wire.imbalance,
            op.wire or "",
            wire.algorithm,
            wire.protocol,
            wire.channels,
        )
        run.ops.append(row)

    def on_op(rank: int, step: int, kind: str, shard: int, count: int, nbytes: float, start: float, end: float) -> None:
        progress["last"] = env.now
        run.ops.append(
            (step, rank, kind, -1, 1, shard, count, nbytes, start, start, end, nbytes, float("nan"), "", "", "", 0)
        )

    def on_iteration() -> None:
        progress["last"] = env.now
        if on_progress is not None:
            on_progress(weight)

    replicas = evaluator = None
    if task is not None:
        from sim.numerics.local_ops import phase_buffers
        from sim.numerics.session import attach  # torch is imported only when numerics is on

        replicas, evaluator = attach(
            config,
            task,
            world,
            [b.nbytes for b in plan.buckets],
            entry.display,
            bool(policy.all_servers()),
            buffers=phase_buffers(policy.phase_policies()),
            global_tensor=policy.global_tensor,
        )
        replicas.membership = policy.bound_view.membership
    traffic = shared_traffic(plan.layouts, config.seed) if any(x.sparse for x in plan.layouts) else None
    runner = CollectiveRunner(
        env,
        net,
        router,
        cluster.rank_gpus,
        model,
        traffic,
        planner,
        gradient_type=config.workload.wire_precision,
        memory_bytes_per_s=cluster.gpu.memory_bandwidth_gbs * 1e9,
    )
    comms = Communicators(
        env,
        runner,
        entry.display,
        on_collective,
        blocked.add,
        replicas.collective_done if replicas else None,
        images.quorum if images is not None else None,
    )
    compute = ComputeModel(config, world)

    info = model_info(plan)
    factor_buffers = {b.name: b for p in policy.phase_policies() for b in p.buffers() if isinstance(b, FactorBuffer)}
    gpu = cluster.gpu
    factors = FactorPricing(
        factor_buffers,
        info.bucket_shapes,
        gpu.memory_bandwidth_gbs * 1e9,
        gpu.fp32_tflops * 1e12,
        gpu.costs.launch_us * 1e-6,
    )
    local_costs = LocalOpCosts(
        [b.nbytes for b in plan.buckets],
        info.parameter_ratio,
        local_op_bandwidth(cluster.gpu.memory_bandwidth_gbs, config.cluster.host_memory_gbs),
        factors if factor_buffers else None,
    )

    def executor_for(shards: list[Shard], clocks: ClockBoard, phase_policy: Policy) -> Executor:
        return Executor(
            env,
            entry.display,
            cluster.rank_gpus,
            net,
            router,
            comms,
            shards,
            clocks,
            model == "pipelined",
            on_op,
            blocked.add,
            replicas,
            traffic,
            [buffer.name for buffer in phase_policy.buffers()],
            local_costs,
        )

    phases = PhaseRunner(
        env,
        config,
        cluster,
        plan,
        policy,
        run,
        executor_for,
        compute,
        blocked,
        on_iteration,
        replicas,
        evaluator,
        slowdown,
        runner.busy_until if slowdown != 1.0 else None,
        runner.busy_since if slowdown != 1.0 else None,
        ranks=images.representatives if images is not None else None,
        weight=weight,
    )
    workers = phases.workers
    done = env.process(phases.process())

    def stalled() -> DeadlockError:
        stuck = comms.waiting()[:5]
        waiting = sum(1 for w in workers if w.is_alive)
        return DeadlockError(
            f"policy {entry.display!r}: {waiting} of {world} workers wait forever at t={env.now:.6g}s; "
            + ("; ".join(stuck) if stuck else "no collective is half-entered (a pull or clock wait never answered?)")
        )

    def check_stall() -> None:
        # a long transfer on a slow link, or a slow host loader, is progress, not a deadlock
        if net.finite_transfers or preparing(phases.inputs):
            progress["last"] = env.now
        elif env.now - progress["last"] > config.simulation.stall_timeout_s:
            raise stalled()

    faults = FaultContext(env, net, cluster, router, compute, config.seed, done, check_stall, run.faults)
    effects = LinkEffects(net)
    for i, spec in enumerate(config.faults.stragglers):
        env.process(straggler(faults, i, spec, effects))
    for i, flow in enumerate(config.background):
        env.process(background(faults, i, flow))
    sim_cfg = config.simulation
    sampler = LinkSampler(
        env,
        net,
        sampled_links(cluster),
        sim_cfg.utilization_interval_ms * 1e-3,
        sim_cfg.utilization_samples,
        check_stall,
    )
    env.process(sampler.process(done))
    wall = time.perf_counter()
    try:
        try:
            with quiet_gc():
                env.run(until=done)
        except RuntimeError as exc:
            if done.triggered or "No scheduled events left" not in str(exc):
                raise
            raise stalled() from None  # SimPy ran out of events while workers still wait
    except Exception as exc:  # keep every row computed so far; the caller reports the error
        run.error = f"{type(exc).__name__}: {exc}"
        run.traceback = traceback.format_exc()
    if evaluator is not None:
        replicas.gather_shards()  # sharded replicas hold the full model at the end (FSDP's full state dict)
        if run.error is None:
            evaluator.evaluate(env.now)  # the final model, whatever eval_every
        run.accuracy = evaluator.rows
        run.parameters = replicas.params.numpy().copy()
        run.consensus = replicas.consensus().numpy().copy()
        run.scored = evaluator.scored
    run.wall_s = time.perf_counter() - wall
    sampler.finish()
    run.events, run.flows, run.recomputes = env.events_processed(), net.transfers_started, net.recomputes
    run.sim_time_s = env.now
    run.decisions = run_decisions(config, policy, plan, planner)
    run.link_bytes = net.carried_bytes()
    if images is not None:
        fill_image_links(run.link_bytes, cluster, images)
    run.decisions.append(symmetry_decision(config, cluster, policy, task is not None, images))
    run.sampler = sampler
    return run
