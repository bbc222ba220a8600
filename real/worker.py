"""A worker process's training loop for one policy: the real counterpart of `sim/engine/worker.py`.

Per iteration: the begin_step program; the on_forward programs one after another (reads); forward
and backward of the real model on this worker's batch; the on_backward programs one after another
(FSDP's gathers before backward); the on_gradients programs of every bucket concurrently; the local
optimizer step on buckets nobody else updates; the end_step program. Unlike the simulator, backward
is one autograd call, so bucket programs start when the whole gradient is ready rather than
overlapping backward, and backward's reads follow it (the models here are small; docs/real.md).
Under sharded data parallelism the rank frees what it does not own after each iteration and
allocates it again before the next (`real/sharding.py`).

Departures (`faults.departures`, policies.membership): a rank away at a step runs nothing of it (no
hook, no forward or backward, no batch drawn, no optimizer step, no row); it resumes at the step it comes
back at, where the policy's `begin_step` hands it the state it missed, or ends its phase if it never does
(`real/departures.py`, which also says how it waits for the others meanwhile). The live ranks' collectives
run over process groups of the live ranks only, so nobody waits for it.

Evaluation: with a synchronous budget the replica is copied every `eval_every` iterations, for rank 0
to evaluate after the policy (`real/results.py`), as numerics mode evaluates it.

Phases (policies.phases, `real/phases.py`): `train` runs one phase. In a synchronous phase every
worker runs its steps (an adaptive one may end early, decided by all workers alike from gathered
timings); in an asynchronous one (ASP, SSP) workers claim each iteration from shard 0, which hands
out the phase's updates (claims go out one iteration ahead, so a shard busy with pushes never
stalls a worker between iterations, except in adaptive phases, whose claims carry timings).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

import torch

from policies.base import Bucket, Policy
from policies.phases import Timing
from real import device_use
from real import protocol as wire
from real.accounting import RankReport
from real.departures import Departures
from real.executor import RankExecutor
from real.phases import Decisions
from real.placement import host_copy
from real.precision import overflows
from real.sharding import ShardedState


@dataclass
class WorkerSetup:
    rank: int
    policy: Policy  # the phase's policy: its hooks run
    executor: RankExecutor
    buckets: Sequence[Bucket]
    iterations: int  # steps of a synchronous phase
    shard_ranks: Sequence[int]
    clock_rank: Optional[int]
    t0: float
    eval_every: Optional[int] = None  # snapshot the replica every this many iterations (synchronous budgets)
    start: int = 0  # the phase's first step (policies.phases)
    phase: int = 0  # the phase's index
    shared: bool = False  # an asynchronous phase: claim every iteration from the coordinating shard
    adaptive: bool = False  # asynchronous: claims carry timings; synchronous: `decisions` decide
    decisions: Optional[Decisions] = None
    run_iterations: int = 0  # the config's iterations: the last one is evaluated from the final state
    departures: Optional[Departures] = None  # where workers leave and come back: this rank's steps
    sharding: Optional[ShardedState] = None  # sharded data parallelism: what the rank frees between steps


def train(setup: WorkerSetup, report: RankReport) -> int:
    """Run the phase's iterations, appending a row per iteration to `report` as it goes; returns
    how many steps of the phase passed (those this rank was away for included)."""
    s, ex = setup, setup.executor
    policy, rank, replica = s.policy, s.rank, ex.replica
    forward_order = list(s.buckets)[::-1]  # the first layers sit in the last bucket backward produced
    shared = s.shared and s.clock_rank is not None
    ticks: list = []
    crash = crash_point(rank)
    claims = _Claims(s.clock_rank, ex.timeout_s, ahead=not s.adaptive) if shared else None
    step, last, seen = s.start, None, 0
    end_step = s.start + s.iterations
    while True:
        if claims is None and s.departures is not None:  # away: the step starts once it is back (no row before)
            step = s.departures.next_step(policy, step)
        start = time.perf_counter()
        if claims is not None:
            allowed = claims.next(last)
        else:
            allowed = step < end_step
            if allowed and s.decisions is not None and last is not None:
                over, waited = s.decisions.after(last)
                ex.blocked.append((step, start, start + waited))
                allowed = not over
        if not allowed:
            break
        if step == crash:
            fail_now()
        if s.sharding is not None:
            s.sharding.unshard()
        ex.run(step, [(policy.begin_step(rank, step), None)])
        begin_end = time.perf_counter()
        ex.run(step, [(policy.on_forward(rank, step, b), b.index) for b in forward_order], chained=True)
        reads_end = time.perf_counter()
        recomputed = overflows(replica.task)
        replica.forward_done(step)
        compute_end = time.perf_counter()
        if overflows(replica.task) > recomputed:  # fp16: this rank computed the gradient again
            report.overflows.append((step, overflows(replica.task) - recomputed))
        # backward's reads (FSDP's gathers before backward), once the one autograd call has run
        ex.run(step, [(policy.on_backward(rank, step, b), b.index) for b in s.buckets], chained=True)
        ex.run(step, [(policy.on_gradients(rank, step, b), b.index) for b in s.buckets])
        replica.step_done()
        ex.run(step, [(policy.end_step(rank, step), None)])
        end = time.perf_counter()
        if s.clock_rank is not None:
            ticks.append(wire.send(wire.frame(wire.Kind.TICK), s.clock_rank))
        t = s.t0
        row = (step, rank, start - t, begin_end - t, reads_end - t, compute_end - t, end - t, compute_end - reads_end)
        report.rows.append((*row, 0.0, s.phase))
        blocked = ex.blocked[seen:]
        seen = len(ex.blocked)
        last = Timing(rank, step, end - start, sum(b - a for st, a, b in blocked if st == step))
        step += 1
        if claims is None and s.eval_every and step % s.eval_every == 0 and step < s.run_iterations:
            held = policy.global_tensor
            global_model = ex.tensors.store.tensor(held) if held is not None and ex.tensors is not None else None
            snapshot(report, step, end - t, replica.params, len(replica.losses), global_model)
        if s.sharding is not None:
            s.sharding.reshard()
        device_use.iteration_done()
    if s.sharding is not None:
        s.sharding.unshard()  # the owned shards in place for the report (rank 0 gathers the rest)
    ex.drain()  # launched collectives nobody waited for, before the phase's groups serve another
    if s.departures is not None:
        s.departures.finish()
    if s.decisions is not None:
        s.decisions.close()
    for shard in s.shard_ranks:
        ticks.extend(wire.goodbye(shard, replica.params.numel()))
    wait_all(ticks, ex.timeout_s)
    return step - s.start


def wait_all(works: Sequence[Any], timeout_s: float) -> None:
    """Wait for every work within one `timeout_s` in all (one wait each would add up their timeouts)."""
    deadline = time.monotonic() + timeout_s
    for work in works:
        work.wait(timeout=timedelta(seconds=max(deadline - time.monotonic(), 0.001)))


SNAPSHOT_BYTES = 256 * 2**20  # at most this much memory in snapshots per process


def room_for_snapshot(snapshots: Sequence[Any], params: torch.Tensor) -> bool:
    """May a process keep one more copy of `params`? Copies are evaluated after the run, so the timed
    loop pays only for the copy; past SNAPSHOT_BYTES a large model is evaluated at start and end only."""
    return (len(snapshots) + 1) * params.numel() * params.element_size() <= SNAPSHOT_BYTES


def snapshot(
    report: Any, iteration: int, seconds: float, params: torch.Tensor, losses: int, global_model: Any = None
) -> None:
    """Keep a copy of the replica (and how many minibatch losses it had, and the policy's global model
    when it keeps one) for evaluation after the run."""
    if room_for_snapshot(report.snapshots, params):
        held = host_copy(global_model) if global_model is not None else None
        report.snapshots.append((iteration, seconds, host_copy(params), losses, held))


class _Claims:
    """Shared-budget claims. Ahead (plain asynchronous phases): the reply to the next claim travels
    while this iteration runs, so asking costs no round trip to a shard that may be busy with
    pushes. Not ahead (adaptive phases): each claim carries the iteration just finished, which the
    coordinating shard's policy observes before it answers (policies.phases)."""

    def __init__(self, server: int, timeout_s: float, ahead: bool = True) -> None:
        self.server, self.timeout_s, self.ahead = server, timeout_s, ahead
        self._reply: Optional[torch.Tensor] = None
        if ahead:
            self._ask(None)

    def _ask(self, last: Optional[Timing]) -> None:
        self._reply = torch.zeros(1, dtype=torch.int64)
        self._answer = wire.expect(self._reply, self.server, wire.CLAIM_REPLY)  # posted before asking
        self._sent = wire.send(wire.claim(last), self.server)

    def next(self, last: Optional[Timing] = None) -> bool:
        """May this worker run another iteration? (Ahead: the claim after it is already asked.)"""
        if not self.ahead:
            self._ask(last)
        wait_all([self._sent, self._answer], self.timeout_s)
        assert self._reply is not None
        granted = bool(self._reply.item())
        if granted and self.ahead:
            self._ask(None)
        return granted


def crash_point(rank: int) -> int:
    """Where `SYNCSIM_REAL_CRASH=rank:n[:hang]` makes this rank die with exit code 17 (or, with `:hang`,
    freeze by SIGSTOP, heartbeat included, until the launcher kills it): -1 if it names another rank.
    A test-only switch to rehearse failures. A worker fails at step n of any policy; a
    parameter-server shard instead of applying its n-th update (from 0) of a phase it serves: a
    synchronous shard applies one per bucket and round (with one bucket it fails holding round n,
    which every worker pushed, finishing step n, and none can read, to finish step n + 1), an
    asynchronous one one per push."""
    parts = os.environ.get("SYNCSIM_REAL_CRASH", "").split(":")
    if len(parts) < 2:
        return -1
    return int(parts[1]) if int(parts[0]) == rank else -1


def fail_now() -> None:
    """Die without a word, or freeze (`SYNCSIM_REAL_CRASH=...:hang`), as `crash_point` rehearses."""
    if os.environ.get("SYNCSIM_REAL_CRASH", "").endswith(":hang"):
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen, heartbeat included, until someone kills it
    os._exit(17)
