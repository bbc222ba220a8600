"""A policy's phases (policies.phases) on the simulator: per phase its server shards, clocks,
executor and budget; between phases the switch (stop, checkpoint, restart, idle `switch_cost_s`).

The network, the communicators and the compute model outlive the phases: a switch changes what
the workers run, not the cluster they run on.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import simpy

from policies.base import Policy
from policies.phases import Phase, Progress
from sim.cluster.topology import Cluster
from sim.compute.durations import ComputeModel
from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.engine.clocks import ClockBoard
from sim.engine.executor import Executor
from sim.engine.input_pipeline import HostInput, host_inputs
from sim.engine.phase_budget import PhaseBudget
from sim.engine.servers import Shard
from sim.engine.worker import BlockedTime, WorkerContext, worker


@dataclass
class PhaseRunner:
    env: simpy.Environment
    config: Config
    cluster: Cluster
    plan: ComputePlan
    policy: Policy
    run: Any  # sim.engine.run.PolicyRun: rows, staleness, phases and checkpoints are appended to it
    executor_for: Callable[[list[Shard], ClockBoard, Policy], Executor]  # the phase's shards, clocks, policy
    compute: ComputeModel
    blocked: BlockedTime
    on_iteration: Callable[[], None]
    replicas: Any = None  # numerics mode: sim.numerics.replicas.Replicas
    evaluator: Any = None  # numerics mode: sim.numerics.evaluation.Evaluator
    overlap_slowdown: float = 1.0  # compute under a running collective (sim.engine.worker)
    busy_until: Any = None  # per rank, when its launched collectives end (sim.engine.collectives)
    busy_since: Any = None  # per rank, when its busy_until last grew
    inputs: Any = None  # the running phase's input pipeline per rank (sim.engine.input_pipeline)
    workers: list[simpy.Process] = field(default_factory=list)  # the running phase's worker processes
    ranks: Optional[range] = None  # the ranks simulated (host symmetry: host 0's); None: every rank
    weight: int = 1  # the ranks each simulated one stands for

    def process(self) -> Generator[simpy.Event, Any, None]:
        """Every phase in turn (a SimPy process): it ends when the last phase does."""
        env, world, run = self.env, self.cluster.world_size, self.run
        progress = Progress(0, self.config.iterations * world, world, 0)
        ended: Optional[Phase[Policy]] = None
        while (phase := self.policy.next_phase(progress)) is not None:
            switch = env.now
            if ended is not None:  # stop, checkpoint, restart in the new mode
                if self.replicas is not None:
                    checkpoint = self.replicas.restart(bool(ended.policy.servers()), progress.updates)
                    run.checkpoints.append(checkpoint.numpy().copy())
                yield env.timeout(phase.switch_cost_s)
            if self.replicas is not None:
                self.evaluator.begin_phase(phase.synchronous, progress.step)
                self.replicas.serving = bool(phase.policy.servers())
                self.replicas.global_tensor = phase.policy.global_tensor  # the model this phase evaluates
            budget = self._start(phase, progress)
            begin = env.now
            row = (progress.phases, phase.label, phase.synchronous, progress.step, begin, np.nan, 0, begin - switch)
            run.phases.append(row)  # open until the phase ends: a failed run still names its phases
            yield env.all_of(self.workers)
            run.phases[-1] = (*row[:5], env.now, budget.used, row[7])
            progress = Progress(progress.updates + budget.used, progress.budget, world, progress.phases + 1)
            ended = phase

    def _start(self, phase: Phase[Policy], progress: Progress) -> PhaseBudget:
        """Start every worker on `phase` from where `progress` stands; its budget."""
        env, world, start = self.env, self.cluster.world_size, progress.step
        server = self.replicas.server if self.replicas is not None else None
        shards = [
            Shard(env, spec, tuple(range(world)), self._staleness, server, restarted=start > 0)
            for spec in phase.policy.servers()
        ]
        self.inputs = self._inputs(phase.policy)
        clocks = ClockBoard(env, world, start)
        budget = PhaseBudget(phase, self.policy, progress, clocks, self.weight)
        ctx = WorkerContext(
            env,
            phase.policy,
            self.plan,
            self.executor_for(shards, clocks, phase.policy),
            self.compute,
            clocks,
            budget,
            self.blocked,
            self.run.iterations,
            self.on_iteration,
            self.replicas,
            self.evaluator,
            progress.phases,
            self.overlap_slowdown,
            self.busy_until,
            self.busy_since,
            self.inputs,
        )
        ranks = range(world) if self.ranks is None else self.ranks
        self.workers[:] = [env.process(worker(ctx, rank)) for rank in ranks]
        return budget

    def _inputs(self, policy: Policy) -> Optional[list[HostInput]]:
        """The phase's input pipelines, started empty (a switch restarts every process): one per host,
        or, for an in-graph policy, its client's one pipeline shared by every rank."""
        workload, rank_hosts = self.config.workload, self.cluster.view.rank_hosts
        if policy.one_input_pipeline:
            rank_hosts = ("client",) * len(rank_hosts)
        return host_inputs(
            self.env, rank_hosts, workload.input_samples_s, self.plan.batch_size, workload.input_prefetch_batches
        )

    def _staleness(self, rank: int, key: int, stale: int) -> None:
        self.run.staleness.append((rank, stale))
