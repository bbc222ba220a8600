"""Broadcast (policies.ops) with torch.distributed: what a worker joining the run is handed (policies.membership).

The rule is numerics mode's `TensorStore.take_from` (sim/numerics/local_ops.py): every member other than
`root` ends with the root's values over the op's region. A tensor broadcast is one `dist.broadcast` of the
region of the buffer (the parameters, or `tensor`) from the root's global rank over the group's process
group. A state broadcast (`state`: a policy-owned optimizer's key) copies every state tensor the root holds
under that key: a joiner that never stepped that optimizer does not know their names or types, so the
root first broadcasts (name, type, length) for each (`broadcast_object_list`; None when it holds no state
yet, and then the others drop theirs), then each tensor's region. Those calls run one after another on
whichever thread waits for the work (a waiter's, `real/executor.py`), and the members apply the rule on
the main thread once it has finished, through `take_from` itself on the root's state as received. gloo
broadcasts CUDA tensors too (it cannot send or receive them point to point, which a broadcast does not
need).

What a broadcast records as its bytes is the region of the tensor, or the op's `nbytes` for state (all of
the state, as the policy declares it): the same on every member, as the simulator's op rows count it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.ops import Broadcast
from real import transport
from sim.numerics.local_ops import Range, TensorStore

# (name, dtype name, length) of each state tensor the root holds under the op's key; None: it holds none
Header = Optional[list[tuple[str, str, int]]]


@dataclass
class HeldState:
    """What a state Broadcast acts on: a rank's store (its optimizers' state) over the op's `region`."""

    store: TensorStore
    region: Range
    rank: int
    policy: str


def start_broadcast(
    op: Broadcast, target: Any, bucket: Optional[int], pg: Any
) -> tuple[Any, Optional[Callable[[], None]], int]:
    """Issue `op` for `target` (the replica or a `BufferView` for a tensor, a `HeldState` for `op.state`) on
    process group `pg` (None: a group of one, where the root keeps what it has): (work, finish, bytes)."""
    if op.state is not None:
        if pg is None:
            return None, None, int(op.nbytes)
        work = StateBroadcast(op, target, pg)
        return work, work.apply, int(op.nbytes)
    data = target.data(op)
    a, b = target.range(bucket)
    view = data[a:b]  # a contiguous slice: broadcast writes it in place on every member but the root
    nbytes = view.element_size() * (b - a)
    if pg is None:
        return None, None, nbytes
    return dist.broadcast(view, src=op.root, group=pg, async_op=True), None, nbytes


class StateBroadcast:
    """A state Broadcast as a work: `wait` runs the header and tensor broadcasts (on the caller's thread and,
    on CUDA, its current stream); `apply` (the main thread, after it) hands what arrived to `take_from`."""

    def __init__(self, op: Broadcast, target: HeldState, pg: Any) -> None:
        self.op, self.target, self.pg = op, target, pg
        self.root = op.root == target.rank
        a, b = target.region
        held = target.store.states.get(op.state) if self.root else None  # type: ignore[arg-type]
        self.sending = {name: t[a:b] for name, t in held.items()} if held is not None else None
        self.header: Header = (
            [(name, str(t.dtype).removeprefix("torch."), t.numel()) for name, t in held.items()]
            if held is not None
            else None
        )
        self.received: dict[str, torch.Tensor] = {}
        like = target.store.tensor("parameters")
        self.device = like.device
        self.ready = transport.mark(like)  # CUDA: the state as the issuing stream last wrote it

    def wait(self, timeout: Any = None) -> bool:
        """The root's header, then each of its state tensors' region, in header order."""
        transport.follow(self.ready)
        box: list[Header] = [self.header]
        dist.broadcast_object_list(box, src=self.op.root, group=self.pg)
        self.header = box[0]
        a, b = self.target.region
        for name, dtype, length in self.header or ():
            if self.root:
                region = self.sending[name]  # type: ignore[index]
            else:  # the root's whole tensor, zeros outside the region (take_from reads the region only)
                full = self.received[name] = torch.zeros(length, dtype=getattr(torch, dtype), device=self.device)
                region = full[a:b]
            dist.broadcast(region, src=self.op.root, group=self.pg)
        return True

    def apply(self) -> None:
        """The rule, on a member other than the root: `take_from` the root's state as it arrived."""
        if self.root:
            return
        for tensor in self.received.values():
            if tensor.is_cuda:  # allocated on the waiter's stream, read on this one: keep it until that is done
                tensor.record_stream(torch.cuda.current_stream(tensor.device))
        key = self.op.state
        source = _Received({} if self.header is None else {key: self.received})  # type: ignore[dict-item]
        self.target.store.take_from(source, self.op, [self.target.region])  # type: ignore[arg-type]


@dataclass
class _Received:
    """The root's store as `TensorStore.take_from` reads it for a state Broadcast: its optimizers' state."""

    states: dict[str, dict[str, torch.Tensor]]
