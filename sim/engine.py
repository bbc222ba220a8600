"""One policy on one cluster and workload: the SimPy run that produces result rows.

Each worker is a process: begin_step program, forward, backward in bucket-sized slices (handing
each bucket to the policy as it becomes ready, so communication overlaps the rest of backward),
wait for the bucket programs, end_step program. Compute times come from the workload's plan
scaled by per-(iteration, worker) jitter drawn once from the seed, so every policy in a config sees
exactly the same compute.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import simpy

from policies.base import Bucket, Policy, SettingError
from policies.registry import create
from policies.view import ModelInfo
from sim.clocks import ClockBoard
from sim.collectives import CollectiveRunner
from sim.communicators import Communicators
from sim.config import Config, PolicyEntry
from sim.errors import ConfigError, DeadlockError
from sim.executor import Executor
from sim.network import Network
from sim.routing import Router
from sim.servers import Shard
from sim.topology import Cluster
from sim.workload import ComputePlan, jitter_factors


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that counts the events it processes (for benchmarks and stats)."""

    events_processed = 0

    def step(self) -> None:
        self.events_processed += 1
        super().step()


@dataclass
class PolicyRun:
    """Rows and statistics of one policy's run; `error` is set if it stopped early."""

    label: str
    name: str
    iterations: list[tuple] = field(default_factory=list)  # see results.ITERATION_FIELDS
    ops: list[tuple] = field(default_factory=list)  # see results.OP_FIELDS
    error: Optional[str] = None
    traceback: Optional[str] = None
    events: int = 0
    flows: int = 0
    recomputes: int = 0
    wall_s: float = 0.0
    sim_time_s: float = 0.0
    link_bytes: Optional[np.ndarray] = None


def model_info(plan: ComputePlan) -> ModelInfo:
    return ModelInfo(plan.parameter_bytes, tuple(b.nbytes for b in plan.buckets))


def bind_policy(entry: PolicyEntry, index: int, cluster: Cluster, plan: ComputePlan) -> Policy:
    """Create and bind a policy; a setting that does not fit the cluster becomes a ConfigError."""
    try:
        policy = create(entry.name, entry.settings)
        policy.bind(cluster.view, model_info(plan))
    except SettingError as exc:
        raise ConfigError(f"policies[{index}].{exc.field}: {exc.detail}") from None
    for spec in policy.servers():
        if spec.host not in cluster.view.hosts:
            raise ConfigError(f"policies[{index}]: server shard {spec.shard} is placed on unknown host {spec.host!r}")
    return policy


def run_policy(
    config: Config,
    index: int,
    cluster: Cluster,
    plan: ComputePlan,
    on_progress: Optional[Callable[[int], None]] = None,
) -> PolicyRun:
    entry = config.policies[index]
    policy = bind_policy(entry, index, cluster, plan)
    run = PolicyRun(entry.display, entry.name)
    env = CountingEnvironment()
    net = Network(env, cluster.capacity, cluster.latency)
    router = Router(cluster, config.seed)
    model = config.simulation.collective_model
    runner = CollectiveRunner(env, net, router, cluster.rank_gpus, model)

    group_ids: dict[Any, int] = {}

    def on_collective(op: Any, step: int, issued: float, launched: float) -> None:
        gid = group_ids.setdefault(op.group, len(group_ids))
        run.ops.append((step, -1, type(op).__name__, gid, op.group.size, -1, 1, op.nbytes, issued, launched, env.now))

    def on_op(rank: int, step: int, kind: str, shard: int, count: int, nbytes: float, start: float, end: float) -> None:
        run.ops.append((step, rank, kind, -1, 1, shard, count, nbytes, start, start, end))

    world = cluster.world_size
    comms = Communicators(env, runner, entry.display, on_collective)
    shards = [Shard(env, spec, tuple(range(world))) for spec in policy.servers()]
    clocks = ClockBoard(env, world)
    executor = Executor(
        env, entry.display, cluster.rank_gpus, net, router, comms, shards, clocks, model == "pipelined", on_op
    )
    jitter = jitter_factors(
        config.workload.compute_jitter, config.iterations, world, np.random.default_rng(config.seed)
    )
    finished = [0]
    progress = [0]

    def worker(rank: int) -> Generator[simpy.Event, Any, None]:
        for step in range(config.iterations):
            start = env.now
            yield executor.run(rank, step, policy.begin_step(rank, step))
            scale = jitter[step, rank]
            yield env.timeout(plan.forward_s * scale)
            forward_end = env.now
            programs = []
            for b, bucket in enumerate(plan.buckets):
                yield env.timeout(bucket.backward_s * scale)
                ready = Bucket(b, bucket.nbytes, len(plan.buckets))
                programs.append(executor.run(rank, step, policy.on_gradients(rank, step, ready)))
            compute_end = env.now
            yield env.all_of(programs)
            yield executor.run(rank, step, policy.end_step(rank, step))
            run.iterations.append((step, rank, start, forward_end, compute_end, env.now))
            clocks.tick(rank)
            if on_progress is not None and clocks.slowest > progress[0]:
                on_progress(clocks.slowest - progress[0])
                progress[0] = clocks.slowest
        finished[0] += 1

    for rank in range(world):
        env.process(worker(rank))
    wall = time.perf_counter()
    try:
        env.run()
        if finished[0] < world:
            stuck = comms.waiting()[:5]
            raise DeadlockError(
                f"policy {entry.display!r}: {world - finished[0]} of {world} workers wait forever at t={env.now:.6g}s; "
                + (
                    "; ".join(stuck)
                    if stuck
                    else "no collective is half-entered (a pull or clock wait never answered?)"
                )
            )
    except Exception as exc:  # keep every row computed so far; the caller reports the error
        run.error = f"{type(exc).__name__}: {exc}"
        run.traceback = traceback.format_exc()
    run.wall_s = time.perf_counter() - wall
    run.events, run.flows, run.recomputes = env.events_processed, net.transfers_started, net.recomputes
    run.sim_time_s = env.now
    run.link_bytes = net.link_bytes.copy()
    return run
