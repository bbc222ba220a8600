"""Runs policy programs on one rank with torch.distributed: the real counterpart of `sim/engine/executor.py`.

Semantics match the simulator's. A program is a list of items run one after another; the ops of an
item run concurrently. Programs handed over together run concurrently (gradient buckets), or one
after another (`chained`, the forward reads). Collectives are enqueued per group in program order
when the programs are handed over, and a rank issues a group's next collective to torch only after
the group's previous one completed, so every member issues the same calls in the same order whatever
the timing, and one group runs one collective at a time (as on one NCCL communicator, and as the
simulator models it; gloo alone would run them side by side on its worker threads). Every call is
asynchronous; persistent waiter threads (`real/waiters.py`: an idle one takes each call, a new one
starts only when all are busy) block until it completes and wake the main thread, so one slow group
never holds back another's progress. On a GPU that holds for the device too: a waiter waits for a
collective on a CUDA stream of its own (`transport.complete`), never on the stream the training
computes on and after which NCCL orders every later collective, and it synchronizes that stream
alone, not the device.

Tensor-side ops (`policies.tensors`, `real/buffers.py`): local ops (`Combine`, `OptimizerStep`,
`Encode`) run on the main thread when their program item starts, in program order, on the rank's
`RankTensors` (on a GPU, queued on the current stream like the training's kernels); they are recorded
nowhere. A collective acts on its `buffer` over its hook's region, or on a fragment's ranges laid end
to end. A collective with a `handle` is launched: its item ends as soon as the item starts, the call
still goes out in its group's order (the queues outlive one `run`, so a launch may go out during a
later step's programs), and `Wait(handle)` ends once the call has completed and its result is written
back. As in the simulator (sim/engine/communicators.py), a launched call is not waited for from its
launch: its record carries the step and time its Wait began (before the call completed), and the
time from then until its last member issued it is blocked time (`real/accounting.py`); the rest of
the Wait is communication. `drain` finishes the launches nobody waited
for (a phase's last steps) before the phase ends.

Timing: every collective records (step, group, sequence number, issue and finish time) for the
wait/comm split computed after the run (`real/accounting.py`); pulls and clock waits report the
seconds the server held them, which is time blocked on other workers.

Pushes, pulls and clock waits to parameter-server shards are built by `real/messages.py`.

Devices: the replica may live on a GPU. Frames and replies are host tensors (real/protocol.py), so
pushes, pulls and clock waits are waited for on the host without any CUDA call. A collective counts
as finished when the device has finished it, not when the host has enqueued it; before its results
are used (`finish`), the current stream waits on the event the waiter recorded after it
(`Stream.wait_event`: no host or device-wide sync).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from policies.ops import Broadcast, Collective, LocalOp, Op, Pull, Push, Wait, WaitForClock, step_ops
from real import transport
from real.buffers import Narrowed, RankTensors
from real.collectives import Started, start
from real.groups import ProcessGroups
from real.messages import item_messages
from real.slots import CollectiveRecord, Flight, P2PRecord, Slot, Staged
from real.sparse_collectives import Shares
from real.waiters import Waiters
from sim.engine.op_checks import OpValidator
from sim.errors import PolicyError
from sim.numerics.replica import Replica


class RankTimeout(RuntimeError):
    """No communication of this rank completed within the configured timeout."""


@dataclass
class RankExecutor:
    rank: int
    policy: str
    groups: ProcessGroups
    replica: Replica
    shard_ranks: Sequence[int]  # global rank of each server shard
    clock_rank: Optional[int]  # the shard that keeps clocks
    timeout_s: float
    validator: OpValidator
    collectives: list[CollectiveRecord] = field(default_factory=list)
    p2p: list[P2PRecord] = field(default_factory=list)
    blocked: list[tuple[int, float, float]] = field(default_factory=list)  # (step, start, end)
    shares: Shares = field(default_factory=dict)  # sparse AllToAll results awaiting their AllGather
    _sequence: dict[tuple[int, ...], int] = field(default_factory=dict)
    _busy: set[tuple[int, ...]] = field(default_factory=set)  # groups with a call in flight
    _done: deque = field(default_factory=deque)
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _waiters: Waiters = field(default_factory=lambda: Waiters("syncsim-wait"))
    tensors: Optional[RankTensors] = None  # the policy's buffers beside the replica's (made on first use)
    # per group, collectives whose turn has not come, in program order (launched ones outlive a `run`)
    _queues: dict[tuple[int, ...], deque[Slot]] = field(default_factory=dict)
    _launched: dict[str, Slot] = field(default_factory=dict)  # handle -> its collective, until its Wait
    _in_flight: int = 0  # calls and messages launched and not yet completed

    def run(self, step: int, programs: Sequence[tuple[Iterable[Any], Optional[int]]], chained: bool = False) -> None:
        """Run `(program, bucket)` pairs to completion (concurrently, or one after another)."""
        staged: list[Staged] = []
        for p, (program, bucket) in enumerate(programs):
            items = []
            for i, item in enumerate(program):
                ops = step_ops(item)
                slots = []
                for op in ops:
                    self.validator.check(self.rank, step, op)
                    slot = Slot(op, p, i, bucket, step=step)
                    slots.append(slot)
                    if isinstance(op, Collective):
                        self._queues.setdefault(tuple(sorted(op.group.ranks)), deque()).append(slot)
                items.append(slots)
            if items:
                staged.append(Staged(items, bucket))
        self._poll()  # launched calls that finished, or whose group is free, since the last run
        while True:
            for prog in staged:
                while not prog.finished and all(s.done for s in prog.items[prog.at]):
                    prog.at += 1
                    prog.started = False
            active = [prog for prog in staged if not prog.finished]
            if not active:
                return
            if chained:
                active = active[:1]
            if self._issue(step, active):
                continue  # local ops and finished waits may have ended items without a message
            self._await_one()

    def drain(self) -> None:
        """Finish every launched collective (those no Wait came for: a phase's last launches), so
        that every member has completed them before the phase's groups are used again or freed."""
        while self._queues or self._in_flight:
            if not self._issue_collectives():
                self._await_one()
        self._launched.clear()

    def _poll(self) -> None:
        """Complete what has finished and issue what may go out, without blocking."""
        with self._cv:
            done = list(self._done)
            self._done.clear()
        for flight in done:
            self._complete(flight.slot.step, flight)
        self._issue_collectives()

    def _await_one(self) -> None:
        """Block until at least one call or message completes, and complete them."""
        if self._in_flight == 0:
            raise RuntimeError(f"rank {self.rank}: programs of {self.policy!r} cannot proceed (a bug)")
        for flight in self._wait():
            self._complete(flight.slot.step, flight)

    # ----------------------------------------------------------------------------- issuing
    def _issue(self, step: int, active: list[Staged]) -> bool:
        """Start the active programs' current items and issue what may go out; whether anything did."""
        progress = False
        for prog in active:
            if prog.finished:
                continue
            slots = prog.items[prog.at]
            if not prog.started:
                prog.started = True
                progress = True
                self._start_item(step, prog.bucket, slots)
            for slot in slots:
                if isinstance(slot.op, Wait) and not slot.done and slot.launched is not None:
                    if slot.launched.completed:
                        slot.done, progress = True, True
        return self._issue_collectives() or progress

    def _start_item(self, step: int, bucket: Optional[int], slots: list[Slot]) -> None:
        """An item starts: its local ops run (in order), its collectives may go out (a launched one's
        slot is done at once), its Waits find their launch, its messages go out."""
        for slot in slots:
            op = slot.op
            if isinstance(op, LocalOp):
                try:
                    self._tensors().apply(op, bucket)
                except (KeyError, ValueError) as exc:
                    raise self._fail(step, op, _message(exc)) from exc
                slot.done = True
            elif isinstance(op, Collective):
                slot.ready = True
                if op.handle is not None:
                    self._launch_handle(step, slot, op.handle)
            elif isinstance(op, Wait):
                launched = self._launched.pop(op.handle, None)
                if launched is None:
                    raise self._fail(
                        step, op, f"no collective launched with handle {op.handle!r} awaits a Wait on this rank"
                    )
                slot.launched, slot.done = launched, launched.completed
                if not launched.completed:  # blocked time until its last member issues it (`account`)
                    launched.waited = (step, time.perf_counter())
        messages = item_messages(
            step, bucket, slots, self.replica, self.shard_ranks, self.clock_rank, self.policy, self.blocked
        )
        for flight in messages:
            self._launch(flight)

    def _launch_handle(self, step: int, slot: Slot, handle: str) -> None:
        earlier = self._launched.get(handle)
        if earlier is not None:
            raise self._fail(
                step, slot.op, f"handle {handle!r} was launched at step {earlier.step} and not waited for; Wait for "
                "it before launching it again",
            )  # fmt: skip
        self._launched[handle] = slot
        slot.done = True
        if isinstance(slot.op, Collective):  # the worker reached the op: a parameter op steps the optimizer now
            self.replica.arrive(slot.op, slot.bucket)

    def _issue_collectives(self) -> bool:
        """Issue each group's next collective if its item has started and the group is free."""
        issued = False
        for key in list(self._queues):
            queue = self._queues[key]
            if key in self._busy or not queue[0].ready:
                continue
            slot = queue.popleft()
            if not queue:
                del self._queues[key]
            self._issue_collective(slot, key)
            issued = True
        return issued

    def _issue_collective(self, slot: Slot, key: tuple[int, ...]) -> None:
        op = slot.op
        assert isinstance(op, Collective)
        if op.handle is None:  # a launched op took its optimizer step when the worker reached it
            self.replica.arrive(op, slot.bucket)
        try:
            on_buffers = op.tensor or op.fragment or isinstance(op, Broadcast) and op.state is not None
            target = self._tensors().target(op, slot.bucket) if on_buffers else self.replica
        except (KeyError, ValueError) as exc:
            raise self._fail(slot.step, op, _message(exc)) from exc
        slot.seq = self._sequence.get(key, 0)
        self._sequence[key] = slot.seq + 1
        slot.issued = time.perf_counter()
        self._busy.add(key)
        pg = self.groups.get(op.group) if op.group.size > 1 else None
        started: Started = start(op, target, slot.bucket, pg, self.shares)
        works = [started.work] if started.work is not None else []
        finish = started.finish
        if isinstance(target, Narrowed):
            finish = _then(finish, target.write_back)
        self._launch(Flight(slot, works, finish, started.nbytes, received=started.received))

    def _tensors(self) -> RankTensors:
        if self.tensors is None:
            self.tensors = RankTensors(self.replica)
        return self.tensors

    def _fail(self, step: int, op: Op, why: str) -> PolicyError:
        return PolicyError(f"policy {self.policy!r} yielded {op!r} on rank {self.rank} at step {step}: {why}")

    # ----------------------------------------------------------------------------- completion
    def _launch(self, flight: Flight) -> None:
        self._in_flight += 1
        if not flight.works:
            flight.finished = time.perf_counter()
            with self._cv:
                self._done.append(flight)
            return
        if isinstance(flight.slot.op, Collective):  # point-to-point frames and replies are host tensors
            flight.device = self.replica.params.device
        self._waiters.submit(lambda: self._await(flight), lambda: self._report(flight))

    def _await(self, flight: Flight) -> None:
        """On a waiter thread: wait until the flight's works finished (on the device, for a collective)."""
        try:
            flight.event = transport.complete(flight.works, flight.device)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            flight.error = exc
        flight.finished = time.perf_counter()

    def _report(self, flight: Flight) -> None:
        with self._cv:
            self._done.append(flight)
            self._cv.notify()

    def _wait(self) -> list[Flight]:
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._done), timeout=self.timeout_s):
                raise RankTimeout(
                    f"rank {self.rank}: no communication of policy {self.policy!r} completed in {self.timeout_s:g} s"
                )
            out = list(self._done)
            self._done.clear()
        return out

    def _complete(self, step: int, flight: Flight) -> None:
        if flight.error is not None:
            raise flight.error
        if flight.event is not None:  # the results were written on other streams: read them after those
            torch.cuda.current_stream(flight.device).wait_event(flight.event)
        self._in_flight -= 1
        if flight.finish is not None:
            flight.finish()
        slot = flight.slot
        slot.done = slot.completed = True
        step = slot.step if slot.step >= 0 else step
        op = slot.op
        if isinstance(op, Collective):
            key = tuple(sorted(op.group.ranks))
            self._busy.discard(key)
            kind = type(op).__name__
            received = flight.received() if flight.received is not None else -1
            since = slot.waited if isinstance(op, Collective) and op.handle is not None else (step, slot.issued)
            record = (
                step,
                self.rank,
                key,
                slot.seq,
                kind,
                flight.nbytes,
                slot.issued,
                flight.finished,
                received,
                *since,
            )
            self.collectives.append(record)
        else:
            kind = {Push: "push", Pull: "pull", WaitForClock: "wait_clock"}[type(op)]
            shard = getattr(op, "shard", -1)
            self.p2p.append((step, self.rank, kind, shard, 1, flight.nbytes, slot.issued, flight.finished))


def _then(first: Optional[Callable[[], None]], second: Callable[[], None]) -> Callable[[], None]:
    def both() -> None:
        if first is not None:
            first()
        second()

    return both


def _message(exc: Exception) -> str:
    """A KeyError's or ValueError's own text (str() of a KeyError quotes it)."""
    return str(exc.args[0]) if exc.args else type(exc).__name__
