"""The point-to-point messages of one program item to parameter-server shards (`Push`, `Pull`,
`WaitForClock`), as calls in flight for the rank executor (real/executor.py) to launch.

Sparse pushes and pulls (a `coding`) carry (index, value) pairs (`real/protocol.py`): a push the
non-zero elements of its range, a pull the elements the shard's round updated (with the plain sgd
`Replica.pull_ranges` requires, the only ones that changed since this rank's last pull).

Frames and replies are host tensors (real/protocol.py), so they are waited for on the host without
any CUDA call; a pull's reply lands in pinned memory and is copied onto the replica's device as it
completes, queued on the current stream without waiting for it. The seconds a shard held a pull or
clock wait are time blocked on other workers (`blocked`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Optional

import torch

from policies.ops import Pull, Push, WaitForClock
from real import protocol as wire
from real.slots import Flight, Slot
from sim.numerics.replica import Replica, through_wire

Blocked = list[tuple[int, float, float]]  # (step, start, end)


def item_messages(
    step: int,
    bucket: Optional[int],
    slots: Sequence[Slot],
    replica: Replica,
    shard_ranks: Sequence[int],
    clock_rank: Optional[int],
    policy: str,
    blocked: Blocked,
) -> list[Flight]:
    """The item's messages, sent (their receives posted first): one flight per push, pull and clock wait."""
    now = time.perf_counter()
    pushes = [s for s in slots if isinstance(s.op, Push)]
    pulls = [s for s in slots if isinstance(s.op, Pull)]
    clocks = [s for s in slots if isinstance(s.op, WaitForClock)]
    flights: list[Flight] = []
    if pushes:
        updates = replica.push_updates(bucket, [s.op for s in pushes], servers=bool(shard_ranks))  # type: ignore[misc]
        for slot, update in zip(pushes, updates):
            op = slot.op
            assert isinstance(op, Push)
            if op.coding is None:
                message = wire.push(op.key, update.a, update.b, update.values, replica.wire)
            else:  # a shard's posted receive holds a whole model's values
                room = replica.params.numel()
                index_bytes = op.coding.index_bytes
                message = wire.sparse_push(op.key, update.a, update.b, update.values, index_bytes, room, replica.wire)
            slot.issued = now
            sent = wire.push_bytes(message)
            flights.append(Flight(slot, [wire.send(message, shard_ranks[op.shard])], None, sent))
    if pulls:
        ranges = replica.pull_ranges(bucket, [s.op for s in pulls])  # type: ignore[misc]
        for slot, (a, b) in zip(pulls, ranges):
            op = slot.op
            assert isinstance(op, Pull)
            src = shard_ranks[op.shard]
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
            flight = Flight(slot, works, None, wire.value_bytes(b - a, on_wire))
            flight.finish = _pulled(replica, blocked, step, slot, a, b, reply, flight if index_bytes else None)
            flights.append(flight)
    for slot in clocks:
        if clock_rank is None:
            raise RuntimeError(
                f"policy {policy!r}: WaitForClock needs parameter-server shards on the real backend "
                "(shard 0 keeps the clocks)"
            )
        held = torch.empty(1)
        op = slot.op
        assert isinstance(op, WaitForClock)
        works = [
            wire.expect(held, clock_rank, wire.CLOCK_REPLY),
            wire.send(wire.frame(wire.Kind.WAIT_CLOCK, value=op.min_clock), clock_rank),
        ]
        slot.issued = now
        flights.append(Flight(slot, works, _held(blocked, step, slot), 0))
    return flights


def _held(blocked: Blocked, step: int, slot: Slot) -> Callable[[], None]:
    """A clock wait's finish: the rank was blocked on the others from its issue until now."""

    def finish() -> None:
        blocked.append((step, slot.issued, time.perf_counter()))

    return finish


def _pulled(
    replica: Replica,
    blocked: Blocked,
    step: int,
    slot: Slot,
    a: int,
    b: int,
    reply: torch.Tensor,
    sparse: Optional[Flight] = None,
) -> Callable[[], None]:
    """Copy the reply into place; `sparse`: the flight of a sparse pull, whose bytes the reply sets."""

    def finish() -> None:
        params = replica.params  # copies onto a GPU are queued on the current stream, not waited for
        if sparse is None:
            values, held = wire.read_dense_reply(reply, b - a, replica.wire)
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
            blocked.append((step, slot.issued, slot.issued + held))

    return finish
