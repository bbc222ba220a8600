"""What sparse collectives do to real tensors, as (index, value) pairs.

A member's sparse tensor is the non-zero elements of its bucket range. Owners follow the op's
`SparseCoding` over element positions in the bucket, or over its blocks when it has a `block` (the
same `owner_of` the simulator sizes messages with), so an element's owner is the same on every
member and on both backends. A coding's block and dense switch change only how messages are laid
out (`real/sparse_codec.py`), not what they sum to.

- Sparse AllToAll: each member sends each owner its pairs there; an owner sums what it receives
  (its own pairs included) and divides by the group size: it now holds the mean of its share.
- Sparse AllGather, partitioned: every member's bucket becomes the union of the owners' shares
  (zero where nobody had a non-zero). Needs the AllToAll before it on the same bucket.
- Sparse AllGather, `partition: none`: every member receives every member's pairs and keeps their
  sum divided by the group size.
- A coding with a `topk` (declared pairs, `sent_pairs`): a member sends exactly k = ceil(topk x size)
  pairs, its non-zeros and then its lowest zero positions, so a zero among the values an Encode kept
  (or one its wire rounded away) does not shrink the message; more than k non-zeros is an error.

The result equals a dense all-reduce mean of the same tensors up to the order of float additions.
Between two or more members, pairs travel with their values in `workload.gradient_precision`
(`on_wire`: every member's pairs, and an owner's reduced share before it is gathered, are rounded
to it; sums and means stay in fp32, as the receivers form them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import torch

from policies.ops import SparseCoding
from policies.tensors import kept
from sim.compute.sparse_traffic import owner_of
from sim.errors import PolicyError
from sim.numerics.replica import through_wire


@dataclass(frozen=True)
class Pairs:
    """Positions (within a bucket range) and values of a sparse tensor."""

    index: torch.Tensor  # int64
    values: torch.Tensor

    @classmethod
    def of(cls, dense: torch.Tensor) -> Pairs:
        index = torch.nonzero(dense, as_tuple=True)[0]
        return cls(index, dense[index])


def sent_pairs(dense: torch.Tensor, coding: SparseCoding) -> Pairs:
    """The pairs a member sends of its region `dense`: its non-zeros, or with a coding's `topk` exactly
    k of them (the non-zeros, padded with zero-valued pairs at the lowest zero positions: the k largest
    magnitudes, ties to the lower position, as `Encode` picks them)."""
    pairs = Pairs.of(dense)
    if coding.topk is None:
        return pairs
    k = kept(coding.topk, dense.numel())
    have = pairs.index.numel()
    if have > k:
        raise PolicyError(
            f"a sparse op declaring {k} pairs per member (coding topk {coding.topk}) met {have} non-zeros in "
            f"{dense.numel()} values: sparsify first (Encode with Codec(topk={coding.topk}))"
        )
    if have == k:
        return pairs
    pad = torch.nonzero(dense == 0, as_tuple=True)[0][: k - have]
    index = torch.sort(torch.cat([pairs.index, pad])).values
    return Pairs(index, dense[index])


def on_wire(pairs: Pairs, wire: Optional[torch.dtype]) -> Pairs:
    """`pairs` as they arrive after travelling with their values in `wire` (None: fp32, as they are)."""
    return pairs if wire is None else Pairs(pairs.index, through_wire(pairs.values, wire))


def owners(index: torch.Tensor, coding: SparseCoding, n: int, size: int) -> torch.Tensor:
    """Owner of each position of a `size`-position range; with a coding's `block` of k, the owner of
    its block (blocks of k positions are the partition's units, as the simulator counts them)."""
    positions = index.cpu().numpy()
    if coding.block is not None and coding.block > 1:
        positions, size = positions // coding.block, -(-size // coding.block)
    return torch.from_numpy(owner_of(positions, coding.partition, n, size)).to(index.device)


def split_by_owner(pairs: Pairs, coding: SparseCoding, n: int, size: int) -> list[Pairs]:
    """A member's pairs, one batch per owner (what its AllToAll sends each member)."""
    who = owners(pairs.index, coding, n, size)
    return [Pairs(pairs.index[who == j], pairs.values[who == j]) for j in range(n)]


def reduce_pairs(received: Sequence[Pairs], size: int, members: int) -> Pairs:
    """Sum pairs by position and divide by `members`: the mean over the group of what was sent."""
    like = received[0].values if received else torch.zeros(0)
    total = torch.zeros(size, dtype=like.dtype, device=like.device)
    for batch in received:
        total.index_add_(0, batch.index, batch.values)
    index = torch.unique(torch.cat([b.index for b in received])) if received else torch.zeros(0, dtype=torch.int64)
    return Pairs(index, total[index] / members)


def scatter(pairs: Sequence[Pairs], size: int, dtype: torch.dtype) -> torch.Tensor:
    """A dense range holding disjoint pairs (zero elsewhere), on the pairs' device."""
    out = torch.zeros(size, dtype=dtype, device=pairs[0].values.device if pairs else None)
    for batch in pairs:
        out[batch.index] = batch.values
    return out
