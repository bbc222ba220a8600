"""Bytes on the wire of sparse ops, from the real index sets of `sim.compute.sparsity`.

`Census` counts, for one (iteration, bucket) and a set of members, the non-zero rows (and their
value bytes) each member holds in each owner's partition, and the same for the union over members
(what owners hold after reducing). `SparseTraffic` turns a census and a `SparseCoding` into message
sizes: a message carries its rows' values plus their ids, as a list (`index_bytes` per row) or a
bitmap (one bit per row of the owner's share of the space), or whichever is smaller (`auto`).
The closed forms in docs/sparse.md follow from these rules.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from policies.ops import SparseCoding
from sim.compute.sparsity import BucketLayout, IndexSets

_CHUNK = 1 << 22
_CACHE = 32


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


class SparseTraffic:
    """Censuses of a run's index sets (cached per iteration and bucket), and message sizes."""

    def __init__(self, sets: IndexSets) -> None:
        self.sets = sets
        self._cache: OrderedDict[tuple, Census] = OrderedDict()
        self._dense: dict[tuple, np.ndarray] = {}

    @property
    def layouts(self) -> tuple[BucketLayout, ...]:
        return self.sets.buckets

    def census(self, step: int, bucket: int, members: tuple[int, ...], partition: str, owners: int) -> Census:
        key = (step, bucket, members, partition, owners)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        census = self._count(step, bucket, members, partition, owners)
        self._cache[key] = census
        if len(self._cache) > _CACHE:
            self._cache.popitem(last=False)
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
            for lo in range(0, seg.rows, _CHUNK):  # in chunks: the union may hold most of the rows
                union = np.flatnonzero(mask[lo : lo + _CHUNK]) + (seg.offset + lo)
                counts += np.bincount(owner_of(union, partition, owners, space), minlength=owners)
            union_rows += counts
            union_values += counts * row_bytes
        return Census(rows, values, union_rows, union_values, share_rows(space, owners, partition))

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


def message_bytes(values: np.ndarray, rows: np.ndarray, share: int, coding: SparseCoding) -> np.ndarray:
    """Bytes of messages carrying `rows` rows (`values` bytes of values) from an owner's share."""
    listed = rows * float(coding.index_bytes)
    bitmap = np.full(np.shape(rows), float(-(-share // 8)))
    if coding.index_format == "list":
        index = listed
    elif coding.index_format == "bitmap":
        index = bitmap
    else:
        index = np.minimum(listed, bitmap)
    return np.asarray(values, dtype=float) + index


def exchange_matrix(census: Census, coding: SparseCoding) -> np.ndarray:
    """AllToAll: bytes member i sends member j (the rows j owns); a member keeps its own share."""
    sizes = message_bytes(census.values, census.rows, census.share, coding)
    np.fill_diagonal(sizes, 0.0)
    return sizes


def gather_sizes(census: Census, coding: SparseCoding) -> np.ndarray:
    """Sparse AllGather: bytes member i sends each other member. Partitioned: the union rows it owns
    (the census must have one owner per member); none: its whole sparse tensor."""
    if coding.partition == "none":
        return message_bytes(census.values.sum(axis=1), census.rows.sum(axis=1), census.share, coding)
    return message_bytes(census.union_values, census.union_rows, census.share, coding)


def received_imbalance(received: np.ndarray) -> float:
    """max / mean of the bytes members received (1.0 = perfectly balanced; NaN if nothing moved)."""
    mean = float(np.mean(received)) if len(received) else 0.0
    return float(np.max(received)) / mean if mean > 0 else float("nan")
