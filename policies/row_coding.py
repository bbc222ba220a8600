"""How a sparse tensor's non-zero rows travel (`SparseCoding`): the partition of row ids among members,
the index format, blocks, SparCML's dense switch and declared top-k pairs (docs/sparse.md). Collectives,
pushes and pulls of `policies.ops` carry one when their density is sparse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from policies.tensors import check_fraction

PARTITIONS: tuple[str, ...] = ("hash", "contiguous", "none")
INDEX_FORMATS: tuple[str, ...] = ("list", "bitmap", "auto")
INDEX_BYTES: tuple[int, ...] = (4, 8)


@dataclass(frozen=True)
class SparseCoding:
    """How a sparse tensor's non-zero rows travel.

    `partition` says which member (or shard) owns a row: `hash` (a fixed hash of the row id, so every
    owner gets an equal share of the index space whatever the skew, as in Zen), `contiguous` (owner j
    holds the j-th of n equal ranges of row ids, as a range-partitioned parameter server does), or
    `none` (the op moves a member's whole sparse tensor). `index_format`: ids as a `list` of
    `index_bytes`-wide integers, a `bitmap` with one bit per row of the owner's share, or `auto`,
    whichever of the two is smaller for each message.

    `block`: None, the units are the tensor's rows (an embedding row, else one value); k, the units
    are fixed blocks of k consecutive values of the bucket, and a block holding any non-zero moves
    whole with one id (OmniReduce). `dense_switch`: a message that would be larger as (id, value)
    pairs than its owner's whole share of values moves as those values, without ids (SparCML).

    `topk`: None, a member's pairs are its non-zeros as they fall (in simulation, the workload's index
    sets). A fraction in (0, 1] (with `partition: none`, list ids, no block or switch): every member sends
    exactly `kept(topk, values)` (index, value) pairs of its region, whatever is zero among them (an `Encode`
    with `Codec(topk=...)` left at most that many non-zeros), so every backend sizes the message from this
    declaration: k pairs of a gradient value and an `index_bytes` id each (docs/sparse.md).
    """

    partition: str = "hash"
    index_format: str = "list"
    index_bytes: int = 4
    block: Optional[int] = None
    dense_switch: bool = False
    topk: Optional[float] = None

    def __post_init__(self) -> None:
        if self.partition not in PARTITIONS:
            raise ValueError(f"partition {self.partition!r}; allowed: {', '.join(PARTITIONS)}")
        if self.index_format not in INDEX_FORMATS:
            raise ValueError(f"index_format {self.index_format!r}; allowed: {', '.join(INDEX_FORMATS)}")
        if self.index_bytes not in INDEX_BYTES:
            raise ValueError(f"index_bytes {self.index_bytes!r}; allowed: 4, 8")
        if self.block is not None and (
            isinstance(self.block, bool) or not isinstance(self.block, int) or self.block < 1
        ):
            raise ValueError(f"block {self.block!r}; allowed: None (the tensor's rows) or an int >= 1")
        if not isinstance(self.dense_switch, bool):
            raise ValueError(f"dense_switch {self.dense_switch!r}; allowed: True, False")
        if self.topk is not None:
            check_fraction(self.topk, "coding topk")
            if (self.partition, self.index_format, self.block, self.dense_switch) != ("none", "list", None, False):
                raise ValueError(
                    "coding topk: declared pairs need partition none, index_format list, no block, no dense_switch"
                )
