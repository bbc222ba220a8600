"""What each collective op does to one rank's replica, carried out with torch.distributed.

The rules are the simulator's (`sim/numerics/replicas.py`): AllReduce leaves the group mean,
ReduceScatter leaves member i the mean of the i-th slice (and narrows the bucket's later ops to it),
AllGather gathers the slices back. Every call is asynchronous (`async_op=True`); `Started.finish`
runs once the work completes (averaging, copying gathered slices into place). Sparse ops (a
`coding`) exchange (index, value) pairs: `real/sparse_collectives.py`.

Dense gradient ops send values in the replica's `wire` type (`workload.gradient_precision`; fp16 or
bf16, None: fp32), as DDP's fp16/bf16 compress hooks do: the values are cast to it, summed in it by
the collective, cast back, and averaged in fp32; `nbytes` counts what was sent (2 bytes a value in
16 bits). Sparse ops send their pairs' values in `wire` too (`real/sparse_collectives.py`), as do
parameter-server pushes and pulls (`real/protocol.py`). Parameters, control tokens and replicas
without a `wire` (DDP hooks: `real.hooks`) send their own type. An op with its own `wire` runs as
`real/wire_collectives.py` says. `RingReduceScatter` lives in `real/ring.py`; Broadcast (what a worker
joining the run is handed) in `real/broadcast.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.ops import AllGather, AllReduce, Barrier, Broadcast, Collective, Payload, ReduceScatter
from real.broadcast import start_broadcast
from real.groups import group_order
from real.ring import RingReduceScatter
from real.sparse_collectives import Shares, start_sparse
from real.wire_collectives import start_wired
from sim.errors import PolicyError
from sim.numerics.replica import Replica
from sim.numerics.shards import shards


@dataclass
class Started:
    """An issued torch.distributed call: wait on `work`, then call `finish`."""

    work: Any
    finish: Optional[Callable[[], None]]
    nbytes: int  # what this rank contributed (sparse ops: the bytes it sent)
    received: Optional[Callable[[], int]] = None  # sparse ops: the bytes it received, once finished


def start(op: Collective, replica: Replica, bucket: Optional[int], pg: Any, shares: Optional[Shares] = None) -> Started:
    """Issue `op` for `replica` on process group `pg` (the op's group, created up front; None for a
    group of one, where the op's rule applies locally and nothing is sent). `shares`: the rank's
    state between a sparse AllToAll and the AllGather after it (sparse ops need it)."""
    p = op.group.size
    if p == 1:
        pg = None
    if isinstance(op, Barrier) or op.payload is Payload.CONTROL:
        token = torch.zeros(1, device=replica.data(op).device)
        return Started(_call(dist.all_reduce, token, pg), None, 4)
    if isinstance(op, Broadcast):  # a copy of the root's tensor or optimizer state, whatever the payload
        return Started(*start_broadcast(op, replica, bucket, pg))
    if op.coding is not None:
        if shares is None:
            raise PolicyError(f"policy {replica.policy!r}: {op!r} is sparse, which this caller cannot run")
        return Started(*start_sparse(op, replica, bucket, pg, shares))
    if op.wire is not None and pg is not None:
        return Started(*start_wired(op, replica, bucket, pg))
    data = replica.data(op)
    wire = getattr(replica, "wire", None) if op.payload is Payload.GRADIENTS and pg is not None else None
    sent_type = wire or data.dtype
    width_bytes = torch.empty(0, dtype=sent_type).element_size()
    if isinstance(op, AllReduce):
        a, b = replica.range(bucket)
        view = data[a:b]
        if wire is None:
            return Started(_call(dist.all_reduce, view, pg), lambda: view.div_(p), width_bytes * (b - a))
        sent = view.to(wire)

        def averaged() -> None:
            view.copy_(sent)
            view.div_(p)

        return Started(_call(dist.all_reduce, sent, pg), averaged, width_bytes * (b - a))
    order = group_order(op.group)  # torch's member j is the op's member order[j]
    me = op.group.ranks.index(replica.rank)
    if isinstance(op, ReduceScatter):
        a, b = replica.range(bucket)
        parts = shards(a, b, p)
        lo, hi = parts[me]
        ring = RingReduceScatter(data, parts, op.group.ranks, me, pg, wire)

        def scattered() -> None:
            data[lo:hi] = ring.result.to(data.dtype).div_(p)
            replica.push_slice(bucket, (lo, hi))

        return Started(ring if pg is not None else None, scattered, width_bytes * (b - a))
    if isinstance(op, AllGather):
        enclosing = replica.pop_slice(bucket)
        a, b = enclosing if enclosing is not None else replica.range(bucket)
        parts = shards(a, b, p)
        width = max(hi - lo for lo, hi in parts)  # gloo gathers equal sizes: pad the short slices
        lo, hi = parts[me]
        mine = data.new_zeros(width, dtype=sent_type)
        mine[: hi - lo] = data[lo:hi]
        outs = [data.new_zeros(width, dtype=sent_type) for _ in range(p)]

        def gathered() -> None:
            for j, i in enumerate(order):
                x, y = parts[i]
                if i != me:
                    data[x:y] = outs[j][: y - x]

        return Started(_call(dist.all_gather, outs, pg, mine), gathered, width_bytes * width)
    raise PolicyError(
        f"policy {replica.policy!r}: the real backend has no tensor rule for a dense {type(op).__name__} "
        f"({op!r}); AllToAll is defined for sparse tensors only (a `coding`)"
    )


def _call(fn: Callable[..., Any], first: Any, pg: Any, *rest: Any) -> Any:
    """`fn(first, *rest, group=pg, async_op=True)`, or no work at all for a group of one."""
    if pg is None:
        return None
    return fn(first, *rest, group=pg, async_op=True)


__all__ = ["RingReduceScatter", "Started", "start"]
