"""Which fixed-size blocks of a bucket hold a non-zero, from the real index sets (OmniReduce's unit).

A bucket's values are its segments' rows laid end to end (`rows x width` values each); block b is
values [b k, (b + 1) k) of that flat space, and the last block may be short. A block is non-zero for
a worker when any value in it belongs to one of the worker's non-zero rows (a row of a dense segment
always is), so the count of non-zero blocks follows from the drawn rows, never from an average.
"""

from __future__ import annotations

import numpy as np

from sim.compute.sparsity import BucketLayout, IndexSets


def block_count(layout: BucketLayout, block: int) -> int:
    """Blocks of `block` values that cover the bucket."""
    return -(-sum(s.rows * s.width for s in layout.segments) // block)


def block_values(layout: BucketLayout, block: int) -> np.ndarray:
    """Bytes of values in each block (`block x value_bytes`, less for a short last block)."""
    total = sum(s.rows * s.width for s in layout.segments)
    units = block_count(layout, block)
    out = np.full(units, float(block * layout.value_bytes))
    if units:
        out[-1] = float((total - (units - 1) * block) * layout.value_bytes)
    return out


def block_mask(sets: IndexSets, step: int, bucket: int, rank: int, block: int) -> np.ndarray:
    """Per block of the bucket: does `rank` hold a non-zero in it at iteration `step`?"""
    layout = sets.buckets[bucket]
    mask = np.zeros(block_count(layout, block), dtype=bool)
    start = 0  # the segment's first value in the flat space
    for s, seg in enumerate(layout.segments):
        rows = sets.rows(step, bucket, s, rank)
        if rows is None:  # dense: every block the segment touches
            mask[start // block : (start + seg.rows * seg.width - 1) // block + 1] = True
        elif len(rows):
            first = (start + rows * seg.width) // block
            last = (start + rows * seg.width + seg.width - 1) // block
            for extra in range(int((last - first).max()) + 1):  # a row spans at most width / block + 2 blocks
                mask[np.minimum(first + extra, last)] = True
        start += seg.rows * seg.width
    return mask
