"""A worker's training loop as a SimPy process, and how its iterations are accounted.

Per iteration: the policy's begin_step program; forward in bucket-sized slices in forward order,
each waiting for its bucket's on_forward program (run one after another from the start, so reads
overlap forward); backward in bucket-sized slices (each bucket handed to the policy as it becomes
ready, so communication overlaps the rest of backward, unless `plan.overlap_backward` is off: then all
at once when backward ends), each slice first waiting for its bucket's on_backward program (run one after
another from backward's start: FSDP's gathers before backward); then the bucket programs, end_step, and every
`accumulation_steps`-th iteration the optimizer step (compute; a policy that shards it computes its
`optimizer_share`).
A worker away for some steps (`faults.departures`, policies.membership) runs none of them: it waits, with no
rows, until the others start the step it comes back at.
Under the NCCL model backward compute runs `overlap_slowdown` times slower while the rank's collectives
run (NCCL's kernels hold some of the GPU's SMs, sim/nccl/fabrics.py): until `busy_until`, the end the
tuner predicts for the collectives launched so far (contention may make them last longer; collectives
still queued behind them are not counted).

Budgets (`sim/engine/phase_budget.py`): a worker runs one phase of its policy (policies.phases) at a time.
In a synchronous phase every worker runs the phase's steps; in a phase of a policy with
`shared_budget` (ASP, SSP) workers share its updates, so fast workers do more of them, the way
Sync-Switch counts ASP steps.

Breakdown: compute is the time spent in forward and backward slices, the optimizer step and the
policy's local ops (sim/engine/local_op_costs.py; a local op of a bucket program may run beside
backward: their union counts). Of the rest, *wait* is time
blocked on other workers (a collective whose members have not all arrived, a pull whose round is
not applied yet, a clock bound), and *comm* is the remainder: moving bytes with nothing else to do.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, Optional

import simpy
from simpy.events import Timeout

from policies.base import Bucket, Policy
from policies.phases import Timing
from sim.compute.durations import ComputeModel
from sim.compute.workload import ComputePlan
from sim.engine.clocks import ClockBoard
from sim.engine.executor import Executor
from sim.engine.input_pipeline import HostInput
from sim.engine.phase_budget import PhaseBudget
from sim.kernel.environment import AllDone

# (step, rank, start, begin_end, forward_end, compute_end, end, compute_s, wait_s, phase)
IterationRow = tuple[int, int, float, float, float, float, float, float, float, int]


@dataclass
class BlockedTime:
    """Intervals each (rank, step) spent blocked on others; reported by the executor and communicators."""

    intervals: dict[tuple[int, int], list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, rank: int, step: int, start: float, end: float) -> None:
        if end > start:
            self.intervals[(rank, step)].append((start, end))

    def pop_wait(self, rank: int, step: int, start: float, end: float, computing: list[tuple[float, float]]) -> float:
        """Blocked time of (rank, step) within [start, end] outside the `computing` intervals."""
        windows, cursor = [], start
        for a, b in computing:  # the complement of computing inside the iteration
            if a > cursor:
                windows.append((cursor, a))
            cursor = max(cursor, b)
        if end > cursor:
            windows.append((cursor, end))
        merged: list[list[float]] = []
        for a, b in sorted(self.intervals.pop((rank, step), ())):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        return sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in merged for lo, hi in windows)


class SharedTimeouts:
    """One timeout per firing instant for the compute slices of all workers: workers in step (no
    jitter) end their slices at the same instants, and one event resumes them all, in the order they
    asked, as their own timeouts would have."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._pending: dict[float, simpy.Event] = {}

    def after(self, delay: float) -> simpy.Event:
        when = self.env._now + delay  # the instant SimPy fires a timeout of `delay` at (`_now`: no property call)
        event = self._pending.get(when)
        return event if event is not None else self._shared(when, delay)

    def at(self, when: float) -> simpy.Event:
        return self._shared(when, None)

    def _shared(self, when: float, delay: Optional[float]) -> simpy.Event:
        event = self._pending.get(when)
        if event is None:
            event = Timeout(self.env, _delay_to(self.env.now, when) if delay is None else delay)
            self._pending[when] = event
            event.callbacks.append(lambda _ev: self._pending.pop(when))  # before any worker resumes
        return event


def _shared_compute(duration: float, busy: float, slowdown: float) -> float:
    """How long `duration` of compute takes when, for the first `busy` seconds, it runs `slowdown` times slower."""
    if duration * slowdown <= busy:
        return duration * slowdown
    return duration + busy * (1.0 - 1.0 / slowdown)


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """`intervals` sorted and merged where they overlap."""
    merged: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _delay_to(now: float, when: float) -> float:
    """The delay whose sum with `now`, rounded as SimPy adds it, is exactly `when` (so slices added
    one by one end where one timeout per slice would have)."""
    delay = when - now
    for _ in range(64):
        at = now + delay
        if at == when:
            break
        delay = math.nextafter(delay, math.inf if at < when else -math.inf)
    return max(delay, 0.0)


@dataclass
class WorkerContext:
    env: simpy.Environment
    policy: Policy
    plan: ComputePlan
    executor: Executor
    compute: ComputeModel
    clocks: ClockBoard
    budget: PhaseBudget
    blocked: BlockedTime
    rows: list[IterationRow]
    on_iteration: Callable[[], None]
    numerics: Any = None  # sim.numerics.replicas.Replicas: real tensors (numerics mode)
    evaluator: Any = None  # sim.numerics.evaluation.Evaluator
    phase: int = 0  # the phase's index in the run
    overlap_slowdown: float = 1.0  # compute runs this many times slower while the rank's collectives run
    busy_until: Optional[list[float]] = None  # per rank, when its running collectives end (None: no contention)
    busy_since: Optional[list[float]] = None  # per rank, when its `busy_until` last grew
    inputs: Optional[list[HostInput]] = None  # per rank, its host's input pipeline (None: data never waits)
    timers: SharedTimeouts = field(init=False)
    starts: StepStarts = field(init=False)

    def __post_init__(self) -> None:
        self.timers = SharedTimeouts(self.env)
        self.starts = StepStarts(self.env)


class StepStarts:
    """When the first worker started each step: a worker that was away (faults.departures) comes back
    as the others start the step it joins at."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self._started: set[int] = set()
        self._waiting: dict[int, simpy.Event] = {}

    def started(self, step: int) -> None:
        if step not in self._started:
            self._started.add(step)
            waiting = self._waiting.pop(step, None)
            if waiting is not None:
                waiting.succeed()

    def wait(self, step: int) -> simpy.Event:
        if step in self._started:
            event = simpy.Event(self.env)
            event.succeed()
            return event
        return self._waiting.setdefault(step, simpy.Event(self.env))


def _away(ctx: WorkerContext, rank: int, step: int) -> Generator[simpy.Event, Any, Optional[int]]:
    """`rank` is away at `step`: wait until the others start the step it comes back at, which is
    returned (None: it does not come back within the phase, and retires)."""
    back = ctx.policy.bound_view.membership.next_live(rank, step)
    if back is None or back >= ctx.budget.start + ctx.budget.steps:
        return None
    yield ctx.starts.wait(back)
    if ctx.evaluator is not None:
        ctx.evaluator.skipped(rank, back - step)
    return back


def worker(ctx: WorkerContext, rank: int) -> Generator[simpy.Event, Any, None]:
    env, policy, plan, executor, compute = ctx.env, ctx.policy, ctx.plan, ctx.executor, ctx.compute
    numerics = ctx.numerics
    n_buckets = len(plan.buckets)
    buckets = [Bucket(b, bucket.nbytes, n_buckets) for b, bucket in enumerate(plan.buckets)]
    reads_before_forward = type(policy).on_forward is not Policy.on_forward  # the base hook reads nothing
    reads_before_backward = type(policy).on_backward is not Policy.on_backward
    optimizer_s = plan.optimizer_s * policy.optimizer_share
    backward = [bucket.backward_s for bucket in plan.buckets]
    overlap = plan.overlap_backward
    after, segment, run, on_gradients = ctx.timers.after, compute.segment, executor.run, policy.on_gradients
    step = ctx.budget.start
    last: Optional[Timing] = None
    membership = policy.bound_view.membership
    while True:
        if membership.changes:
            if not membership.is_live(rank, step):
                back = yield from _away(ctx, rank, step)
                if back is None:
                    break
                step = back
            ctx.starts.started(step)
        start = env.now
        allowed = ctx.budget.claim(rank, step, last)
        if isinstance(allowed, simpy.Event):  # an adaptive phase's decision point: waits for others
            allowed = yield allowed
            ctx.blocked.add(rank, step, start, env.now)
        if not allowed:
            break
        computing: list[tuple[float, float]] = []
        if ctx.inputs is not None:  # the batch from the host's loaders
            ready = env.now
            yield ctx.inputs[rank].take()
            ctx.blocked.add(rank, step, ready, env.now)
        yield executor.run(rank, step, policy.begin_step(rank, step))
        begin_end = env.now
        factor = compute.iteration_factor(rank)
        forward_order = buckets[::-1]  # the first layers sit in the last bucket backward produced
        if reads_before_forward:
            reads = executor.run_in_turn(
                rank, step, [policy.on_forward(rank, step, b) for b in forward_order], [b.index for b in forward_order]
            )
        else:
            reads = [executor.settled] * len(forward_order)
        if compute.steady and all(ready is executor.settled for ready in reads):
            # nothing to wait for and nothing to stretch a segment: the slices end where SimPy's clock
            # would put them, one after another, so one event at the end of forward will do
            end = env.now
            for bucket in forward_order:
                a, end = end, end + compute.segment(rank, plan.buckets[bucket.index].forward_s, factor)
                computing.append((a, end))
            yield ctx.timers.at(end)
        else:
            for bucket, ready in zip(forward_order, reads):
                yield ready
                a = env._now
                yield Timeout(env, compute.segment(rank, plan.buckets[bucket.index].forward_s, factor))
                computing.append((a, env._now))
        forward_end = env.now
        if numerics is not None:  # the parameters forward used are settled: the real gradient
            numerics.forward_done(rank, step)
        programs = []
        syncs = plan.syncs_gradients(step)  # False: an inner micro-batch under no_sync, its gradient kept
        steady = compute.steady  # no straggler: a slice lasts backward_s x factor (x 1.0, as `segment` gives)
        busy_until, busy_since, slowdown = ctx.busy_until, ctx.busy_since, ctx.overlap_slowdown
        gathers = (
            executor.run_in_turn(rank, step, [policy.on_backward(rank, step, b) for b in buckets], range(n_buckets))
            if reads_before_backward
            else None
        )
        for i, (bucket, backward_s) in enumerate(zip(buckets, backward)):
            if gathers is not None and gathers[i] is not executor.settled:
                yield gathers[i]  # the bucket's parameters, gathered again for its backward
            a = env._now  # (the `now` property is a call; this runs per rank and bucket)
            duration = backward_s * factor if steady else segment(rank, backward_s, factor)
            if busy_until is None:
                yield after(duration)
            else:  # NCCL's kernels hold some SMs meanwhile
                busy = busy_until[rank]
                yield after(_shared_compute(duration, busy - a, slowdown) if busy > a else duration)
                if busy_until[rank] != busy and busy_since[rank] == a:
                    # a collective of this rank launched at the instant the slice began, handled after the
                    # slice began: it slows the slice as it would had it been handled first
                    yield ctx.timers.at(a + _shared_compute(duration, busy_until[rank] - a, slowdown))
            computing.append((a, env._now))
            if overlap and syncs:
                programs.append(run(rank, step, on_gradients(rank, step, bucket), bucket.index))
        if not overlap and syncs:  # every bucket once backward ends, in the order backward closed them
            programs = [run(rank, step, on_gradients(rank, step, bucket), bucket.index) for bucket in buckets]
        compute_end = env.now
        yield AllDone(env, programs)
        if numerics is not None:
            numerics.step_done(rank, step)
        yield executor.run(rank, step, policy.end_step(rank, step))
        if plan.updates_after(step):  # the optimizer step, once the accumulated gradients are in
            a = env._now
            yield Timeout(env, segment(rank, optimizer_s, factor))
            computing.append((a, env._now))
        end = env.now
        if executor.launches.computing:  # local ops ran in some step (only policies that issue them)
            computing = _union(computing + executor.launches.computing.pop((rank, step), []))
        compute_s = sum(b - a for a, b in computing)
        wait = ctx.blocked.pop_wait(rank, step, start, end, computing)
        ctx.rows.append((step, rank, start, begin_end, forward_end, compute_end, end, compute_s, wait, ctx.phase))
        last = Timing(rank, step, end - start, wait)
        ctx.budget.finished(last)
        ctx.clocks.tick(rank)
        if ctx.evaluator is not None:
            ctx.evaluator.iteration_done(env.now, rank)
        ctx.on_iteration()
        step += 1
    ctx.clocks.retire(rank)
