"""Dense collectives with a `wire` type on torch.distributed, leaving the bits numerics mode leaves.

The arithmetic is `sim.numerics.wire_cast`'s, on the same inputs in the same order:
- AllReduce, native type (fp32, bf16, fp16): a ring reduce-scatter adding in the type
  (`RingReduceScatter`, each step's sum rounded), then an all-gather of the reduced chunks in the type;
  every member casts the result back to fp32 and divides by p.
- AllReduce, scaled type (fp8, int8, fp4): every member encodes each of its p chunks (codes and fp32
  scales) and the encoded bytes are all-gathered; each member then decodes every member's chunks, sums
  them in fp32 in member order, encodes and decodes each sum (what the all-gather phase of the
  two-phase protocol hands out) and divides by p. For two members this moves exactly the two-phase
  protocol's bytes; for more it moves (p - 1) encoded tensors instead of 2 (p - 1) / p of one (gloo has no
  all-to-all for the reduce-scatter phase), with the same values.
- ReduceScatter: the ring in a native type; in a scaled type, the all-gathered encoded chunks, of which
  the owner sums its own chunk.
- AllGather: each member's slice travels cast or encoded; every member, the sender included, keeps what
  arrived.
Everything travels as raw bytes (uint8 views), so gloo never needs the low-precision dtype itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.ops import AllGather, AllReduce, Collective, ReduceScatter
from policies.wire import wire_nbytes
from real import transport
from real.groups import group_order
from real.ring import RingReduceScatter
from sim.errors import PolicyError
from sim.numerics.replica import Replica, partition
from sim.numerics.shards import shards
from sim.numerics.wire_cast import NATIVE, codec_sum, decode, encode, encoded_bytes, native, round_trip


class _Blocking:
    """A work whose `wait` runs `steps` (blocking torch.distributed calls) on the waiter's thread."""

    def __init__(self, steps: Callable[[], None], data: torch.Tensor) -> None:
        self.steps, self.ready = steps, transport.mark(data)

    def wait(self, timeout: Optional[Any] = None) -> bool:
        transport.follow(self.ready)
        self.steps()
        return True


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8).flatten()


def _gather(mine: torch.Tensor, sizes: list[int], op: Collective, pg: Any) -> list[torch.Tensor]:
    """All-gather `mine` (uint8); `sizes`: every member's byte count, in the op's member order (gloo
    gathers equal sizes, so shorter buffers are padded). The members' buffers in the op's member order."""
    width = max(sizes)
    padded = mine.new_zeros(width)
    padded[: mine.numel()] = mine
    outs = [mine.new_zeros(width) for _ in sizes]
    dist.all_gather(outs, padded, group=pg)
    by_member: list[torch.Tensor] = [torch.empty(0)] * len(sizes)
    for j, i in enumerate(group_order(op.group)):  # torch's member j is the op's member order[j]
        by_member[i] = outs[j][: sizes[i]]
    return by_member


def _nbytes(n: int, wire: str, block: int) -> int:
    """Bytes n values take as `_encoded` sends them."""
    return n * NATIVE[wire].itemsize if native(wire) else encoded_bytes(n, wire, block)


def _encoded(x: torch.Tensor, wire: str, block: int) -> torch.Tensor:
    return _as_bytes(x.to(NATIVE[wire])) if native(wire) else encode(x, wire, block)


def _decoded(buf: torch.Tensor, n: int, wire: str, block: int) -> torch.Tensor:
    if native(wire):
        return buf.clone().view(NATIVE[wire]).to(torch.float32)
    return decode(buf, n, wire, block)


Issued = tuple[Any, Callable[[], None], int]  # (work, what to do once it finished, bytes this rank sent)


def start_wired(op: Collective, replica: Replica, bucket: Optional[int], pg: Any) -> Issued:
    """Issue dense `op` (with a `wire`, two or more members) for `replica` on process group `pg`: the
    fields of `real.collectives.Started`."""
    wire, block, p = op.wire, op.block, op.group.size
    assert wire is not None
    data = replica.data(op)
    me = op.group.ranks.index(replica.rank)
    if isinstance(op, AllGather):
        enclosing = replica.pop_slice(bucket)
        a, b = enclosing if enclosing is not None else replica.range(bucket)
        parts = shards(a, b, p)
        lo, hi = parts[me]
        mine = _encoded(data[lo:hi].to(torch.float32), wire, block)
        got: list[torch.Tensor] = []

        def gather() -> None:
            got.extend(_gather(mine, [_nbytes(y - x, wire, block) for x, y in parts], op, pg))

        def gathered() -> None:
            for i, (x, y) in enumerate(parts):
                data[x:y] = _decoded(got[i], y - x, wire, block)

        return _Blocking(gather, data), gathered, int(round(wire_nbytes(b - a, wire, block)))
    if not isinstance(op, (AllReduce, ReduceScatter)):
        raise PolicyError(f"policy {replica.policy!r}: the real backend has no rule for {op!r} with a wire")
    a, b = replica.range(bucket)
    reduce_only = isinstance(op, ReduceScatter)  # its chunks are the shards; an all-reduce's as before
    parts = shards(a, b, p) if reduce_only else partition(a, b, [1.0] * p)
    sent = int(round(wire_nbytes(b - a, wire, block)))
    if native(wire):
        ring = RingReduceScatter(data, parts, op.group.ranks, me, pg, NATIVE[wire])
        chunks: list[torch.Tensor] = []

        def ring_then_gather() -> None:
            ring.wait()
            if not reduce_only:
                chunks.extend(_gather(_as_bytes(ring.result), [_nbytes(y - x, wire, block) for x, y in parts], op, pg))

        def done() -> None:
            if reduce_only:
                lo, hi = parts[me]
                data[lo:hi] = ring.result.to(torch.float32).div_(p)
                replica.push_slice(bucket, (lo, hi))
                return
            for c, (x, y) in enumerate(parts):
                data[x:y] = _decoded(chunks[c], y - x, wire, block).div_(p)

        return _Blocking(ring_then_gather, data), done, sent
    mine = torch.cat([encode(data[x:y].to(torch.float32), wire, block) for x, y in parts])
    received: list[torch.Tensor] = []

    def gather_all() -> None:
        received.extend(_gather(mine, [mine.numel()] * p, op, pg))

    def reduced() -> None:
        offsets = [0]
        for x, y in parts:
            offsets.append(offsets[-1] + encoded_bytes(y - x, wire, block))
        owned = [me] if reduce_only else range(p)
        for c in owned:
            x, y = parts[c]
            total = codec_sum([decode(buf[offsets[c] : offsets[c + 1]], y - x, wire, block) for buf in received])
            data[x:y] = (total if reduce_only else round_trip(total, wire, block)).div_(p)
        if reduce_only:
            replica.push_slice(bucket, parts[me])

    return _Blocking(gather_all, data), reduced, sent
