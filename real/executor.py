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

Timing: every collective records (step, group, sequence number, issue and finish time) for the
wait/comm split computed after the run (`real/accounting.py`); pulls and clock waits report the
seconds the server held them, which is time blocked on other workers.

Sparse pushes and pulls (a `coding`) carry (index, value) pairs (`real/protocol.py`): a push the
non-zero elements of its range, a pull the elements the shard's round updated (with the plain sgd
`Replica.pull_ranges` requires, the only ones that changed since this rank's last pull).

Devices: the replica may live on a GPU. Frames and replies are host tensors (real/protocol.py), so
pushes, pulls and clock waits are waited for on the host without any CUDA call; a pull's reply lands
in pinned memory and is copied onto the replica's device as it completes, queued on the current
stream without waiting for it. A collective counts as finished when the device has finished it, not
when the host has enqueued it; before its results are used (`finish`), the current stream waits on
the event the waiter recorded after it (`Stream.wait_event`: no host or device-wide sync).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from policies.ops import Collective, Op, Pull, Push, WaitForClock, step_ops
from real import protocol as wire
from real import transport
from real.collectives import Started, start
from real.groups import ProcessGroups
from real.sparse_collectives import Shares
from real.waiters import Waiters
from sim.engine.op_checks import OpValidator
from sim.numerics.replica import Replica, through_wire

# (step, rank, group key, sequence on the group, op kind, nbytes, issued, finished, bytes received:
# sparse ops only, else -1)
CollectiveRecord = tuple[int, int, tuple[int, ...], int, str, int, float, float, int]
# (step, rank, kind, shard, count, nbytes, issued, finished)
P2PRecord = tuple[int, int, str, int, int, int, float, float]


class RankTimeout(RuntimeError):
    """No communication of this rank completed within the configured timeout."""


@dataclass
class _Slot:
    """One op of one program item on this rank."""

    op: Op
    program: int
    item: int
    bucket: Optional[int]
    issued: float = -1.0
    seq: int = -1  # collectives: position among this rank's calls on the group
    done: bool = False


@dataclass
class _Program:
    items: list[list[_Slot]]
    bucket: Optional[int]
    at: int = 0  # the item running
    started: bool = False  # the current item's point-to-point ops are issued

    @property
    def finished(self) -> bool:
        return self.at >= len(self.items)


@dataclass
class _Flight:
    slot: _Slot
    works: list[Any]
    finish: Optional[Callable[[], None]]
    nbytes: int
    error: Optional[BaseException] = None
    finished: float = 0.0
    received: Optional[Callable[[], int]] = None
    device: Optional[torch.device] = None  # a collective's: the device its tensors are on
    event: Optional[Any] = None  # CUDA: recorded once the works finished (`transport.complete`)


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

    def run(self, step: int, programs: Sequence[tuple[Iterable[Any], Optional[int]]], chained: bool = False) -> None:
        """Run `(program, bucket)` pairs to completion (concurrently, or one after another)."""
        staged: list[_Program] = []
        queues: dict[tuple[int, ...], deque[_Slot]] = {}
        for p, (program, bucket) in enumerate(programs):
            items = []
            for i, item in enumerate(program):
                ops = step_ops(item)
                slots = []
                for op in ops:
                    self.validator.check(self.rank, step, op)
                    slot = _Slot(op, p, i, bucket)
                    slots.append(slot)
                    if isinstance(op, Collective):
                        queues.setdefault(tuple(sorted(op.group.ranks)), deque()).append(slot)
                items.append(slots)
            if items:
                staged.append(_Program(items, bucket))
        if not staged:
            return
        in_flight = 0
        while True:
            active = [prog for prog in staged if not prog.finished]
            if not active:
                return
            if chained:
                active = active[:1]
            in_flight += self._issue(step, active, queues)
            if in_flight == 0:
                raise RuntimeError(f"rank {self.rank}: programs of {self.policy!r} cannot proceed (a bug)")
            for flight in self._wait():
                in_flight -= 1
                self._complete(step, flight)
            for prog in staged:
                while not prog.finished and all(s.done for s in prog.items[prog.at]):
                    prog.at += 1
                    prog.started = False

    # ----------------------------------------------------------------------------- issuing
    def _issue(self, step: int, active: list[_Program], queues: dict[tuple[int, ...], deque[_Slot]]) -> int:
        issued = 0
        progress = True
        while progress:
            progress = False
            for prog in active:
                if prog.finished:
                    continue
                slots = prog.items[prog.at]
                if not prog.started:
                    prog.started = True
                    issued += self._issue_p2p(step, prog.bucket, slots)
                    progress = True
                for slot in slots:
                    if slot.issued >= 0 or not isinstance(slot.op, Collective):
                        continue
                    key = tuple(sorted(slot.op.group.ranks))
                    if queues[key][0] is slot and key not in self._busy:
                        queues[key].popleft()
                        self._issue_collective(step, slot, key)
                        issued += 1
                        progress = True
        return issued

    def _issue_collective(self, step: int, slot: _Slot, key: tuple[int, ...]) -> None:
        op = slot.op
        assert isinstance(op, Collective)
        self.replica.arrive(op, slot.bucket)
        slot.seq = self._sequence.get(key, 0)
        self._sequence[key] = slot.seq + 1
        slot.issued = time.perf_counter()
        self._busy.add(key)
        pg = self.groups.get(op.group) if op.group.size > 1 else None
        started: Started = start(op, self.replica, slot.bucket, pg, self.shares)
        works = [started.work] if started.work is not None else []
        self._launch(_Flight(slot, works, started.finish, started.nbytes, received=started.received))

    def _issue_p2p(self, step: int, bucket: Optional[int], slots: list[_Slot]) -> int:
        replica, now = self.replica, time.perf_counter()
        pushes = [s for s in slots if isinstance(s.op, Push)]
        pulls = [s for s in slots if isinstance(s.op, Pull)]
        clocks = [s for s in slots if isinstance(s.op, WaitForClock)]
        if pushes:
            updates = replica.push_updates(bucket, [s.op for s in pushes], servers=bool(self.shard_ranks))
            for slot, update in zip(pushes, updates):
                op = slot.op
                assert isinstance(op, Push)
                if op.coding is None:
                    message = wire.push(op.key, update.a, update.b, update.values, replica.wire)
                else:  # a shard's posted receive holds a whole model's values
                    room = replica.params.numel()
                    index_bytes = op.coding.index_bytes
                    message = wire.sparse_push(
                        op.key, update.a, update.b, update.values, index_bytes, room, replica.wire
                    )
                slot.issued = now
                sent = wire.push_bytes(message)
                self._launch(_Flight(slot, [wire.send(message, self.shard_ranks[op.shard])], None, sent))
        if pulls:
            ranges = replica.pull_ranges(bucket, [s.op for s in pulls])
            for slot, (a, b) in zip(pulls, ranges):
                op = slot.op
                assert isinstance(op, Pull)
                src = self.shard_ranks[op.shard]
                index_bytes = op.coding.index_bytes if op.coding is not None else 0
                on_wire = replica.wire
                if index_bytes:
                    size = wire.pull_reply_floats(a, b, index_bytes, on_wire)
                else:
                    size = wire.dense_reply_floats(b - a, on_wire)
                reply = torch.empty(size, pin_memory=replica.params.is_cuda)  # pinned: copied in without a sync
                works = [  # the reply's receive first, so the shard's answer finds it posted
                    wire.expect(reply, src, wire.REPLY_BASE + op.key),
                    wire.send(wire.frame(wire.Kind.PULL, op.key, a, b, value=index_bytes, wire=on_wire), src),
                ]
                slot.issued = now
                flight = _Flight(slot, works, None, wire.value_bytes(b - a, on_wire))
                flight.finish = self._pulled(step, slot, a, b, reply, flight if index_bytes else None)
                self._launch(flight)
        for slot in clocks:
            if self.clock_rank is None:
                raise RuntimeError(
                    f"policy {self.policy!r}: WaitForClock needs parameter-server shards on the real backend "
                    "(shard 0 keeps the clocks)"
                )
            held = torch.empty(1)
            op = slot.op
            assert isinstance(op, WaitForClock)
            works = [
                wire.expect(held, self.clock_rank, wire.CLOCK_REPLY),
                wire.send(wire.frame(wire.Kind.WAIT_CLOCK, value=op.min_clock), self.clock_rank),
            ]
            slot.issued = now
            self._launch(_Flight(slot, works, lambda s=slot: self._blocked_for(step, s.issued), 0))
        return len(pushes) + len(pulls) + len(clocks)

    def _pulled(
        self, step: int, slot: _Slot, a: int, b: int, reply: torch.Tensor, sparse: Optional[_Flight] = None
    ) -> Callable[[], None]:
        """Copy the reply into place; `sparse`: the flight of a sparse pull, whose bytes the reply sets."""

        def finish() -> None:
            params = self.replica.params  # copies onto a GPU are queued on the current stream, not waited for
            if sparse is None:
                values, held = wire.read_dense_reply(reply, b - a, self.replica.wire)
                params[a:b].copy_(values, non_blocking=True)
            else:
                got = wire.read_pull_reply(reply)
                if got.index is None:
                    params[a:b].copy_(got.values, non_blocking=True)
                else:  # the rows the round changed; the others hold what earlier pulls (rounded) left
                    if got.wire is not None:  # rounded too, as numerics mode leaves the whole range
                        params[a:b] = through_wire(params[a:b], got.wire)
                    index = got.index.to(params.device, non_blocking=True)
                    params[a + index] = got.values.to(params.device, non_blocking=True)
                held, sparse.nbytes = got.held, got.nbytes
            if held > 0:
                self.blocked.append((step, slot.issued, slot.issued + held))

        return finish

    def _blocked_for(self, step: int, since: float) -> None:
        self.blocked.append((step, since, time.perf_counter()))

    # ----------------------------------------------------------------------------- completion
    def _launch(self, flight: _Flight) -> None:
        if not flight.works:
            flight.finished = time.perf_counter()
            with self._cv:
                self._done.append(flight)
            return
        if isinstance(flight.slot.op, Collective):  # point-to-point frames and replies are host tensors
            flight.device = self.replica.params.device
        self._waiters.submit(lambda: self._await(flight), lambda: self._report(flight))

    def _await(self, flight: _Flight) -> None:
        """On a waiter thread: wait until the flight's works finished (on the device, for a collective)."""
        try:
            flight.event = transport.complete(flight.works, flight.device)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            flight.error = exc
        flight.finished = time.perf_counter()

    def _report(self, flight: _Flight) -> None:
        with self._cv:
            self._done.append(flight)
            self._cv.notify()

    def _wait(self) -> list[_Flight]:
        with self._cv:
            if not self._cv.wait_for(lambda: bool(self._done), timeout=self.timeout_s):
                raise RankTimeout(
                    f"rank {self.rank}: no communication of policy {self.policy!r} completed in {self.timeout_s:g} s"
                )
            out = list(self._done)
            self._done.clear()
        return out

    def _complete(self, step: int, flight: _Flight) -> None:
        if flight.error is not None:
            raise flight.error
        if flight.event is not None:  # the results were written on other streams: read them after those
            torch.cuda.current_stream(flight.device).wait_event(flight.event)
        if flight.finish is not None:
            flight.finish()
        slot = flight.slot
        slot.done = True
        op = slot.op
        if isinstance(op, Collective):
            key = tuple(sorted(op.group.ranks))
            self._busy.discard(key)
            kind = type(op).__name__
            received = flight.received() if flight.received is not None else -1
            record = (step, self.rank, key, slot.seq, kind, flight.nbytes, slot.issued, flight.finished, received)
            self.collectives.append(record)
        else:
            kind = {Push: "push", Pull: "pull", WaitForClock: "wait_clock"}[type(op)]
            shard = getattr(op, "shard", -1)
            self.p2p.append((step, self.rank, kind, shard, 1, flight.nbytes, slot.issued, flight.finished))
