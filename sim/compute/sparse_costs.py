"""Closed forms for sparse synchronization: bytes per worker and times on an uncontended network.

Notation (docs/sparse.md): n workers, M rows (elements when rows are one value wide), per-worker
density d (a worker's non-zero rows / M), aggregated density D (rows non-zero on any worker / M),
b_v bytes per value, b_i bytes per row id in a list. A message of c rows drawn from a share of S
rows carries c * b_v of values plus its ids: c * b_i as a list, ceil(S / 8) as a bitmap, the
smaller of the two with `auto`. Hash partitioning gives every owner S = M / n rows and, on average,
1/n of everyone's non-zeros.

These are the expected, perfectly balanced figures; the simulator sizes every message from real
index sets, and tests hold the two within 2% where balance holds (uniform positions, many rows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class SparseShape:
    workers: int
    rows: float  # M
    density: float  # d
    aggregated: float  # D
    value_bytes: float = 4.0  # b_v (times the row width for wider rows)
    index_bytes: float = 4.0  # b_i
    index_format: str = "list"  # list | bitmap | auto


def index_bytes(rows: float, share: float, shape: SparseShape) -> float:
    """Id bytes of one message of `rows` rows out of a `share`-row share."""
    listed, bitmap = rows * shape.index_bytes, math.ceil(share / 8)
    return {"list": listed, "bitmap": bitmap, "auto": min(listed, bitmap)}[shape.index_format]


def zen_bytes(s: SparseShape) -> tuple[float, float]:
    """Bytes each worker receives in Zen's all-to-all and in its all-gather (and, by symmetry, sends)."""
    n, m = s.workers, s.rows
    a2a = (n - 1) * (s.density * m / n * s.value_bytes + index_bytes(s.density * m / n, m / n, s))
    gather = (n - 1) * (s.aggregated * m / n * s.value_bytes + index_bytes(s.aggregated * m / n, m / n, s))
    return a2a, gather


def sparse_allgather_bytes(s: SparseShape) -> float:
    """Bytes each worker receives: every other worker's whole sparse tensor."""
    return (s.workers - 1) * (s.density * s.rows * s.value_bytes + index_bytes(s.density * s.rows, s.rows, s))


def sparse_ps_bytes(s: SparseShape) -> tuple[float, float]:
    """Push and pull bytes over a worker's NIC with one shard per worker host (k = n, colocated):
    its pushes to the n - 1 remote shards, and the rows those shards updated, pulled back. The same
    figures as Zen's two phases: a colocated sparse PS is an all-to-all plus an all-gather."""
    return zen_bytes(s)


def ring_bytes(workers: int, rows: float, value_bytes: float = 4.0) -> float:
    """Dense ring all-reduce: bytes each worker sends (and receives)."""
    return 2 * (workers - 1) / workers * rows * value_bytes


def zen_time(s: SparseShape, alpha: float, bandwidth: float) -> float:
    a2a, gather = zen_bytes(s)
    return 2 * alpha + (a2a + gather) / bandwidth


def sparse_allgather_time(s: SparseShape, alpha: float, bandwidth: float) -> float:
    return alpha + sparse_allgather_bytes(s) / bandwidth


def ring_time(workers: int, rows: float, alpha: float, bandwidth: float, value_bytes: float = 4.0) -> float:
    return 2 * (workers - 1) * alpha + ring_bytes(workers, rows, value_bytes) / bandwidth


def topk_aggregated_density(density: float, workers: int, overlap: float) -> float:
    """D for top-k index sets (`sim.compute.sparsity`): a share `overlap` of each worker's d is common to all,
    the rest kept independently with equal probability over the other rows."""
    shared = overlap * density
    if shared >= 1:
        return 1.0
    q = (density - shared) / (1 - shared)
    return shared + (1 - shared) * (1 - (1 - q) ** workers)


def crossover_density(
    workers: int, overlap: float, value_bytes: float = 4.0, index_bytes_: float = 4.0, scheme: str = "zen"
) -> float:
    """The per-worker density d above which dense ring all-reduce moves fewer bytes than `scheme`
    (zen or sparse_allgather, list ids) for top-k sets with `overlap`; 1.0 if it never does.

    Zen loses once (d + D) (b_v + b_i) > 2 b_v; sparse all-gather once n d (b_v + b_i) > 2 b_v."""
    dense = 2 * value_bytes * (workers - 1) / workers

    def excess(d: float) -> float:
        shape = SparseShape(workers, 1.0, d, topk_aggregated_density(d, workers, overlap), value_bytes, index_bytes_)
        sparse = sum(zen_bytes(shape)) if scheme == "zen" else sparse_allgather_bytes(shape)
        return sparse - dense

    lo, hi = 1e-9, 1.0
    if excess(hi) <= 0:
        return 1.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if excess(mid) < 0 else (lo, mid)
    return (lo + hi) / 2
