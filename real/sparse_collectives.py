"""Sparse AllToAll and AllGather with torch.distributed: the rules of `sim.numerics.sparse_rules`
(the same helpers, so both backends share the arithmetic) on (index, value) pairs.

Each op is one `PairExchange` on the op's process group: an `all_to_all_single` of int64 sizes
(the float32 slots this member sends each member), then an `all_to_all_single` of the pairs with
those per-member split sizes, so nothing is padded, and a member sends itself nothing. A message
is laid out by `real.sparse_codec.Codec`: positions in the bucket range as `coding.index_bytes`-wide
integers, then the values (or whole blocks with their ids, or an owner's dense share, as the
coding says); ids always travel as a list (a bitmap `index_format` is priced by the simulator
only). Received pairs are put back in the op's member order (`real.groups.group_order`) before
they are reduced, in that order, as numerics mode reduces them. Values travel in the replica's
`wire` type (`workload.gradient_precision`; 2 bytes a value in fp16 or bf16, as the simulator prices
a sparse value): each member's pairs (and an owner's reduced share before the AllGather) are rounded
to it (`sparse_rules.on_wire`, as numerics mode rounds them), packed two values a float32 slot, and
summed in fp32 once received. The bytes reported are the ids' and values' (`Codec.nbytes`), plus
the int64 sizes.

- AllToAll: member j receives the pairs it owns from everyone and keeps their mean (`reduce_pairs`)
  as its share of the bucket in `shares` until the AllGather after it.
- AllGather, partitioned: every member sends its share to everyone; the bucket range becomes the
  union of the shares (`scatter`).
- AllGather, `partition: none`: every member sends its pairs to everyone and keeps their mean.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping, Sequence
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.ops import AllGather, AllToAll, Collective, Payload
from real import transport
from real.groups import group_order
from real.sparse_codec import Codec
from sim.errors import PolicyError
from sim.numerics.replica import Replica
from sim.numerics.sparse_rules import Pairs, on_wire, reduce_pairs, scatter, sent_pairs, split_by_owner

Shares = MutableMapping[Optional[int], Pairs]  # bucket -> the share a sparse AllToAll left this rank


class PairExchange:
    """Send `outgoing[i]` to op member i and receive every member's pairs for this one; `wait` runs
    the two chained calls (sizes, then pairs) and leaves `received` in the op's member order.
    `owner(i, sending)`: whose share the message to (from) member i holds, for the codec."""

    def __init__(
        self,
        outgoing: Sequence[Pairs],
        me: int,
        order: Sequence[int],
        pg: Any,
        codec: Codec,
        owner: Callable[[int, bool], Optional[int]],
    ) -> None:
        self.me, self.order, self.pg, self.codec, self.owner = me, list(order), pg, codec, owner
        self.received: list[Pairs] = list(outgoing)  # each slot but `me` is overwritten by `wait`
        packed: dict[tuple, torch.Tensor] = {}  # an all-gather sends one batch to everyone: pack it once
        self.device = outgoing[me].values.device if outgoing else torch.device("cpu")
        empty = torch.empty(0, dtype=torch.float32, device=self.device)
        self.chunks = [  # torch's member order
            empty
            if i == me
            else packed.setdefault((id(outgoing[i]), owner(i, True)), codec.pack(outgoing[i], owner(i, True)))
            for i in self.order
        ]
        sent = sum(codec.nbytes(c, owner(i, True)) for i, c in zip(self.order, self.chunks) if i != me)
        self.nbytes = sent + 8 * (len(self.order) - 1)  # pairs, then sizes
        self.received_bytes = 0  # set by `wait`
        self.ready = transport.mark(empty)  # CUDA: the packing above, on the issuing stream
        self.reader = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None

    def wait(self) -> bool:
        """Run both calls on the current stream (the executor's: a waiter's own stream, after the
        issuing stream's packing); the received pairs are made there and read on the issuing stream."""
        transport.follow(self.ready)
        splits = torch.tensor([c.numel() for c in self.chunks], dtype=torch.int64, device=self.device)
        incoming = torch.empty_like(splits)
        dist.all_to_all_single(incoming, splits, group=self.pg)
        sizes = incoming.tolist()
        out = torch.empty(sum(sizes), dtype=torch.float32, device=self.device)
        dist.all_to_all_single(out, torch.cat(self.chunks), sizes, splits.tolist(), group=self.pg)
        self.received_bytes = 8 * (len(self.order) - 1)
        for t, chunk in enumerate(out.split(sizes)):
            if self.order[t] != self.me:
                whose = self.owner(self.order[t], False)
                self.received_bytes += self.codec.nbytes(chunk, whose)
                pairs = self.codec.unpack(chunk, whose)
                self.received[self.order[t]] = pairs
                if self.reader is not None:  # the allocator must not reuse them before the reader ran
                    pairs.index.record_stream(self.reader)
                    pairs.values.record_stream(self.reader)
        return True


def start_sparse(
    op: Collective, replica: Replica, bucket: Optional[int], pg: Any, shares: Shares
) -> tuple[Optional[PairExchange], Callable[[], None], int, Callable[[], int]]:
    """(work, finish, bytes sent, bytes received once done) of a sparse op (`op.coding` set); `pg`
    None: a group of one."""
    coding = op.coding
    assert coding is not None
    if op.payload is not Payload.GRADIENTS:
        raise PolicyError(f"policy {replica.policy!r}: sparse ops carry gradients, got {op!r}")
    p, me = op.group.size, op.group.ranks.index(replica.rank)
    data = replica.data(op)
    a, b = replica.range(bucket)
    size = b - a
    wire = getattr(replica, "wire", None) if p > 1 else None  # what the pairs' values travel in
    outgoing: Sequence[Pairs]
    owner: Callable[[int, bool], Optional[int]]  # (member, sending) -> the share the message holds
    if isinstance(op, AllToAll):
        outgoing = split_by_owner(on_wire(sent_pairs(data[a:b], coding), wire), coding, p, size)

        def owner(i: int, sending: bool) -> Optional[int]:
            return i if sending else me

        def finish() -> None:
            shares[bucket] = reduce_pairs(exchange.received, size, p)

    elif isinstance(op, AllGather) and coding.partition == "none":
        outgoing = [on_wire(sent_pairs(data[a:b], coding), wire)] * p

        def owner(i: int, sending: bool) -> Optional[int]:
            return None

        def finish() -> None:
            data[a:b] = scatter([reduce_pairs(exchange.received, size, p)], size, data.dtype)

    elif isinstance(op, AllGather):
        share = shares.pop(bucket, None)
        if share is None:
            raise PolicyError(
                f"policy {replica.policy!r}: {op!r} gathers owners' shares, but no sparse AllToAll on "
                f"bucket {bucket} reduced them first"
            )
        outgoing = [on_wire(share, wire)] * p

        def owner(i: int, sending: bool) -> Optional[int]:
            return me if sending else i

        def finish() -> None:
            data[a:b] = scatter(exchange.received, size, data.dtype)

    else:
        raise PolicyError(
            f"policy {replica.policy!r}: the real backend has no sparse rule for {type(op).__name__} ({op!r}); "
            "sparse ops are AllToAll and AllGather"
        )
    order = group_order(op.group) if pg is not None else [0]
    codec = Codec(coding, 1 if coding.partition == "none" else p, size, wire)
    exchange = PairExchange(outgoing, me, order, pg, codec, owner)
    return (exchange if pg is not None else None), finish, exchange.nbytes, lambda: exchange.received_bytes
