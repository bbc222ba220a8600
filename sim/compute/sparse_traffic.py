"""Bytes on the wire of sparse ops, from the real index sets of `sim.compute.sparsity`.

`Census` counts, for one (iteration, bucket) and a set of members, the non-zero rows (and their
value bytes) each member holds in each owner's partition, and the same for the union over members
(what owners hold after reducing). `SparseTraffic` turns a census and a `SparseCoding` into message
sizes: a message carries its rows' values plus their ids, as a list (`index_bytes` per row) or a
bitmap (one bit per row of the owner's share of the space), or whichever is smaller (`auto`).
A coding with a `block` counts fixed blocks of values instead of rows (`sim.compute.sparse_blocks`);
one with `dense_switch` caps a message at its owner's whole share of values, sent without ids.
A coding with a `topk` declares its pairs instead (`declared_bytes`): k = ceil(topk x values) pairs
per member, whatever the workload's index sets. The closed forms in docs/sparse.md follow from these rules.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from policies.ops import SparseCoding
from policies.tensors import kept
from sim.compute.sparse_blocks import block_count, block_mask, block_values
from sim.compute.sparsity import BucketLayout, IndexSets

_CHUNK = 1 << 22
# censuses kept (least recently used first out): small arrays, so that policies simulated one after
# another over the same iterations and buckets count each once
_CACHE_BYTES = 64 << 20


def hash_owner(rows: np.ndarray, owners: int) -> np.ndarray:
    """Owner of each row id under hash partitioning: Fibonacci multiply-shift hashing, the top 32
    bits of id x 2^64/phi scaled to [0, owners). Consecutive or popular ids land on different
    owners, every owner gets an equal share of the id space, and it costs four passes."""
    x = rows.astype(np.uint64)
    x *= np.uint64(0x9E3779B97F4A7C15)
    x >>= np.uint64(32)
    x *= np.uint64(owners)
    x >>= np.uint64(32)
    return x.view(np.int64)


def owner_of(rows: np.ndarray, partition: str, owners: int, space: int) -> np.ndarray:
    """Owner of each row id of a `space`-row bucket: hash, contiguous (equal ranges), or none (0)."""
    if partition == "none" or owners == 1:
        return np.zeros(len(rows), dtype=np.int64)
    if partition == "hash":
        return hash_owner(rows, owners)
    return (rows * owners) // space


def share_rows(space: int, owners: int, partition: str) -> int:
    """Rows of the space one owner's bitmap covers (an equal share: Zen's hash is balanced by design)."""
    return space if partition == "none" else -(-space // owners)


@dataclass(frozen=True)
class Census:
    """Non-zero rows per (member, owner) and of the members' union per owner, with value bytes."""

    rows: np.ndarray  # [member, owner]
    values: np.ndarray  # [member, owner] bytes of values
    union_rows: np.ndarray  # [owner]
    union_values: np.ndarray  # [owner]
    share: int  # rows one owner's bitmap covers

    @property
    def nbytes(self) -> int:
        return self.rows.nbytes + self.values.nbytes + self.union_rows.nbytes + self.union_values.nbytes


class SparseTraffic:
    """Censuses of a run's index sets (cached per iteration and bucket), and message sizes."""

    def __init__(self, sets: IndexSets) -> None:
        self.sets = sets
        self._cache: OrderedDict[tuple, Census] = OrderedDict()
        self._cached_bytes = 0
        self._dense: dict[tuple, np.ndarray] = {}
        self._shares: dict[tuple, np.ndarray] = {}  # (bucket, partition, owners) -> value bytes per owner
        self._blocks: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # -> (owner, value bytes) per block

    @property
    def layouts(self) -> tuple[BucketLayout, ...]:
        return self.sets.buckets

    def census(
        self, step: int, bucket: int, members: tuple[int, ...], partition: str, owners: int, block: int | None = None
    ) -> Census:
        """Counts of rows, or with `block` of blocks of that many values (a coding's `block`)."""
        key = (step, bucket, members, partition, owners, block)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        if block is None:
            census = self._count(step, bucket, members, partition, owners)
        else:
            census = self._count_blocks(step, bucket, members, partition, owners, block)
        self._cache[key] = census
        self._cached_bytes += census.nbytes
        while self._cached_bytes > _CACHE_BYTES and len(self._cache) > 1:
            self._cached_bytes -= self._cache.popitem(last=False)[1].nbytes
        return census

    def _count(self, step: int, bucket: int, members: tuple[int, ...], partition: str, owners: int) -> Census:
        layout = self.layouts[bucket]
        space, vb = layout.rows, layout.value_bytes
        n = len(members)
        rows = np.zeros((n, owners), dtype=np.int64)
        values = np.zeros((n, owners))
        union_rows = np.zeros(owners, dtype=np.int64)
        union_values = np.zeros(owners)
        for s, seg in enumerate(layout.segments):
            row_bytes = float(seg.width * vb)
            if seg.kind == "dense":
                counts = self._dense_counts(bucket, s, partition, owners, space)
                rows += counts
                values += counts * row_bytes
                union_rows += counts
                union_values += counts * row_bytes
                continue
            mask = np.zeros(seg.rows, dtype=bool)
            for i, rank in enumerate(members):
                local = self.sets.rows(step, bucket, s, rank)
                assert local is not None
                mask[local] = True
                counts = np.bincount(owner_of(local + seg.offset, partition, owners, space), minlength=owners)
                rows[i] += counts
                values[i] += counts * row_bytes
            counts = np.zeros(owners, dtype=np.int64)
            if partition == "none" or owners == 1:  # owner 0 holds the whole union: its size is the count
                counts[0] = np.count_nonzero(mask)
            else:
                for lo in range(0, seg.rows, _CHUNK):  # in chunks: the union may hold most of the rows
                    union = np.flatnonzero(mask[lo : lo + _CHUNK]) + (seg.offset + lo)
                    counts += np.bincount(owner_of(union, partition, owners, space), minlength=owners)
            union_rows += counts
            union_values += counts * row_bytes
        return Census(rows, values, union_rows, union_values, share_rows(space, owners, partition))

    def _count_blocks(
        self, step: int, bucket: int, members: tuple[int, ...], partition: str, owners: int, block: int
    ) -> Census:
        units = block_count(self.layouts[bucket], block)
        owner, size = self._block_owners(bucket, partition, owners, block)
        rows = np.zeros((len(members), owners), dtype=np.int64)
        values = np.zeros((len(members), owners))
        union = np.zeros(units, dtype=bool)
        for i, rank in enumerate(members):
            mask = block_mask(self.sets, step, bucket, rank, block)
            union |= mask
            rows[i] = np.bincount(owner[mask], minlength=owners)
            values[i] = np.bincount(owner[mask], weights=size[mask], minlength=owners)
        union_rows = np.bincount(owner[union], minlength=owners)
        union_values = np.bincount(owner[union], weights=size[union], minlength=owners)
        return Census(rows, values, union_rows, union_values, share_rows(units, owners, partition))

    def _block_owners(self, bucket: int, partition: str, owners: int, block: int) -> tuple[np.ndarray, np.ndarray]:
        """Owner and value bytes of every block of a bucket."""
        key = (bucket, partition, owners, block)
        if key not in self._blocks:
            layout = self.layouts[bucket]
            units = block_count(layout, block)
            owner = owner_of(np.arange(units, dtype=np.int64), partition, owners, units)
            self._blocks[key] = (owner, block_values(layout, block))
        return self._blocks[key]

    def share_values(self, bucket: int, partition: str, owners: int, block: int | None = None) -> np.ndarray:
        """Per owner, the bytes of every value of its share, zeros included: what it moves dense."""
        if block is not None:
            owner, size = self._block_owners(bucket, partition, owners, block)
            return np.bincount(owner, weights=size, minlength=owners)
        key = (bucket, partition, owners)
        if key not in self._shares:
            layout = self.layouts[bucket]
            total = np.zeros(owners)
            for s, seg in enumerate(layout.segments):
                counts = self._dense_counts(bucket, s, partition, owners, layout.rows)
                total += counts * float(seg.width * layout.value_bytes)
            self._shares[key] = total
        return self._shares[key]

    def _dense_counts(self, bucket: int, segment: int, partition: str, owners: int, space: int) -> np.ndarray:
        key = (bucket, segment, partition, owners)
        if key not in self._dense:
            seg = self.layouts[bucket].segments[segment]
            counts = np.zeros(owners, dtype=np.int64)
            for lo in range(seg.offset, seg.offset + seg.rows, _CHUNK):
                chunk = np.arange(lo, min(lo + _CHUNK, seg.offset + seg.rows), dtype=np.int64)
                counts += np.bincount(owner_of(chunk, partition, owners, space), minlength=owners)
            self._dense[key] = counts
        return self._dense[key]


@lru_cache(maxsize=1)
def shared_traffic(layouts: tuple[BucketLayout, ...], seed: int) -> SparseTraffic:
    """The traffic of `layouts` drawn with `seed`, kept for the next run that asks for the same: a
    config's policies, simulated one after another, then count each census once (a census depends
    on nothing but the index sets and its key)."""
    return SparseTraffic(IndexSets(layouts, seed))


def message_bytes(
    values: np.ndarray, rows: np.ndarray, share: int, coding: SparseCoding, dense: np.ndarray | None = None
) -> np.ndarray:
    """Bytes of messages carrying `rows` rows (`values` bytes of values) from an owner's share;
    `dense`: the bytes of that share's values, a cap under the coding's `dense_switch`."""
    listed = rows * float(coding.index_bytes)
    bitmap = np.full(np.shape(rows), float(-(-share // 8)))
    if coding.index_format == "list":
        index = listed
    elif coding.index_format == "bitmap":
        index = bitmap
    else:
        index = np.minimum(listed, bitmap)
    sizes = np.asarray(values, dtype=float) + index
    if coding.dense_switch and dense is not None:
        return np.minimum(sizes, dense)
    return sizes


def exchange_matrix(census: Census, coding: SparseCoding, dense: np.ndarray | None = None) -> np.ndarray:
    """AllToAll: bytes member i sends member j (the rows j owns); a member keeps its own share.
    `dense`: per owner, its share's value bytes (`SparseTraffic.share_values`)."""
    sizes = message_bytes(census.values, census.rows, census.share, coding, dense)
    np.fill_diagonal(sizes, 0.0)
    return sizes


def gather_sizes(census: Census, coding: SparseCoding, dense: np.ndarray | None = None) -> np.ndarray:
    """Sparse AllGather: bytes member i sends each other member. Partitioned: the union rows it owns
    (the census must have one owner per member); none: its whole sparse tensor. `dense`: per owner,
    its share's value bytes."""
    if coding.partition == "none":
        whole = None if dense is None else dense.sum()
        return message_bytes(census.values.sum(axis=1), census.rows.sum(axis=1), census.share, coding, whole)
    return message_bytes(census.union_values, census.union_rows, census.share, coding, dense)


def declared_bytes(coding: SparseCoding, values: int, value_bytes: float) -> float:
    """Bytes one member's message of a coding with `topk` carries: exactly k = ceil(topk x values) pairs
    of a `value_bytes` value and an `index_bytes` id, zeros among them included."""
    assert coding.topk is not None
    return kept(coding.topk, values) * (value_bytes + coding.index_bytes)


def received_imbalance(received: np.ndarray) -> float:
    """max / mean of the bytes members received (1.0 = perfectly balanced; NaN if nothing moved)."""
    mean = float(np.mean(received)) if len(received) else 0.0
    return float(np.max(received)) / mean if mean > 0 else float("nan")
