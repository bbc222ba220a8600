"""Which rows of each gradient bucket are non-zero, per worker and iteration: real index sets.

A bucket's gradient is a sequence of *segments* (its layers), each a table of `rows` rows of
`width` values. A segment is
- `dense`: every row is non-zero (small tensors, and layers nothing sparsifies);
- `lookup`: an embedding table; each worker draws `lookups` ids per iteration from a bounded power
  law (exponent `zipf_s`, 0 = uniform) over the first `space` rows, and only the rows drawn get a
  gradient. Overlap across workers follows from the skew: popular rows are drawn by everyone;
- `topk`: about `k` rows (elements, width 1) kept by top-k sparsification, `shared` of them the
  same on every worker in that iteration (the positions all workers' gradients agree are largest),
  the rest kept independently, each row with the same probability (so a worker keeps k on
  average, give or take sqrt(k), as a sampled top-k threshold does).

Index sets are drawn from the config's seed, the iteration, the bucket, the segment and the rank,
so every policy of a run sees the same sets and a rerun gives them again. Sizes on the wire come
from these sets (`sim.compute.sparse_traffic`), never from an average density, so skew and imbalance are
real. See docs/sparse.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

from sim.catalog.zoo import Layer, ModelSpec
from sim.compute.buckets import GradientBucket, sparse_table, wire_bytes
from sim.config import WorkloadConfig

SEGMENT_KINDS = ("dense", "lookup", "topk")
_SALT = 0x5A5E  # separates these draws from every other use of the config's seed


@dataclass(frozen=True)
class Segment:
    """One layer's gradient inside a bucket, as `rows` rows of `width` values from row `offset` on."""

    name: str
    offset: int
    rows: int
    width: int
    kind: str = "dense"
    lookups: int = 0  # lookup: ids each worker draws per iteration
    space: int = 0  # lookup: ids range over rows [0, space)
    zipf_s: float = 0.0  # lookup: power-law exponent of the ids' popularity
    hot_rows: str = "first"  # lookup: popular ids first, or scattered over the space
    k: int = 0  # topk: rows each worker keeps
    shared: int = 0  # topk: of the k, rows every worker keeps in the same iteration

    def __post_init__(self) -> None:
        if self.kind not in SEGMENT_KINDS:
            raise ValueError(f"segment {self.name!r}: kind {self.kind!r}; allowed: {', '.join(SEGMENT_KINDS)}")


@dataclass(frozen=True)
class BucketLayout:
    """The segments of one gradient bucket, laid end to end in one row space of `rows` rows."""

    segments: tuple[Segment, ...]
    value_bytes: int

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.segments)

    @property
    def sparse(self) -> bool:
        return any(s.kind != "dense" for s in self.segments)


def bucket_layouts(cfg: WorkloadConfig, spec: ModelSpec, buckets: Sequence[GradientBucket]) -> tuple[BucketLayout, ...]:
    """Every bucket's layout for a workload (`sim.compute.workload.compute_plan` calls it)."""
    width = wire_bytes(cfg)  # a value's bytes; ids are priced by the coding's index_bytes
    out = []
    for bucket in buckets:
        segments: list[Segment] = []
        offset = 0
        for index in sorted(bucket.layers):  # forward order inside the bucket
            seg = _segment(spec.layers[index], offset, cfg)
            segments.append(seg)
            offset += seg.rows
        out.append(BucketLayout(tuple(segments), width))
    return tuple(out)


def _segment(layer: Layer, offset: int, cfg: WorkloadConfig) -> Segment:
    sp = cfg.sparsity
    if sp.lookups is not None:  # a synthetic layer as an embedding table
        dim = sp.embedding_dim
        rows = max(1, layer.params // dim)
        return Segment(
            layer.name, offset, rows, dim, "lookup", sp.lookups, rows, sp.zipf_s or 0.0, sp.hot_rows or "first"
        )
    if sparse_table(layer, cfg):
        look = layer.lookup
        assert look is not None
        width = layer.params // layer.rows
        lookups = max(1, int(round(look.per_sample * cfg.batch_size)))
        zipf = look.zipf_s if sp.zipf_s is None else sp.zipf_s
        hot = look.hot_rows if sp.hot_rows is None else sp.hot_rows
        return Segment(layer.name, offset, layer.rows, width, "lookup", lookups, look.space or layer.rows, zipf, hot)
    if sp.topk is not None and layer.params > sp.dense_below:
        k = max(1, int(math.ceil(sp.topk * layer.params)))
        return Segment(layer.name, offset, layer.params, 1, "topk", k=k, shared=int(round(sp.topk_overlap * k)))
    return Segment(layer.name, offset, layer.params, 1)


class IndexSets:
    """Draws each worker's non-zero rows per (iteration, bucket); one segment's rows are local ids."""

    def __init__(self, buckets: tuple[BucketLayout, ...], seed: int) -> None:
        self.buckets, self.seed = buckets, seed
        self._scatter: dict[tuple[int, int], tuple[int, int]] = {}
        self._shared_key: tuple[int, int, int] = (-1, -1, -1)
        self._shared_mask = np.zeros(0, dtype=bool)
        self._shared_rows = np.zeros(0, dtype=np.int64)

    def rows(self, step: int, bucket: int, segment: int, rank: int) -> Optional[np.ndarray]:
        """Distinct local row ids of `rank`'s non-zeros in that segment; None: every row (dense)."""
        seg = self.buckets[bucket].segments[segment]
        if seg.kind == "dense":
            return None
        rng = np.random.default_rng([self.seed, _SALT, step, bucket, segment, rank + 1])
        if seg.kind == "lookup":
            return self._lookups(bucket, segment, seg, rng)
        shared = self._shared(step, bucket, segment, seg)
        own = bernoulli_rows(rng, seg.rows, (seg.k - seg.shared) / max(seg.rows - seg.shared, 1))
        if seg.shared == 0:
            return own
        return np.concatenate([self._shared_rows, own[~shared[own]]])

    def _shared(self, step: int, bucket: int, segment: int, seg: Segment) -> np.ndarray:
        """The rows every worker keeps in this iteration, as a mask (drawn once per iteration)."""
        key = (step, bucket, segment)
        if self._shared_key != key:
            rng = np.random.default_rng([self.seed, _SALT, step, bucket, segment, 0])
            mask = np.zeros(seg.rows, dtype=bool)
            mask[rng.choice(seg.rows, seg.shared, replace=False)] = True
            self._shared_key, self._shared_mask, self._shared_rows = key, mask, np.flatnonzero(mask)
        return self._shared_mask

    def _lookups(self, bucket: int, segment: int, seg: Segment, rng: np.random.Generator) -> np.ndarray:
        ids = power_law(rng, seg.space, seg.zipf_s, seg.lookups)
        if seg.hot_rows == "scattered":
            a, b = self._scatter_params(bucket, segment, seg.space)
            ids = (ids * a + b) % seg.space
        return distinct(ids, seg.space)

    def _scatter_params(self, bucket: int, segment: int, space: int) -> tuple[int, int]:
        """A fixed bijection of [0, space): id -> (a * id + b) mod space with gcd(a, space) = 1."""
        key = (bucket, segment)
        if key not in self._scatter:
            a = 0x9E3779B1 % space or 1
            while math.gcd(a, space) != 1:
                a += 1
            self._scatter[key] = (a, (0x7F4A7C15 * (segment + 1)) % space)
        return self._scatter[key]


def power_law(rng: np.random.Generator, space: int, s: float, n: int) -> np.ndarray:
    """`n` ids in [0, space), id r drawn with density about (r + 1)^-s (a bounded continuous Zipf,
    rounded down; s = 0 is uniform)."""
    u = rng.random(n)
    if s == 0:
        x = u * space
    elif s == 1:
        x = np.power(space + 1.0, u) - 1.0
    else:
        top = (space + 1.0) ** (1.0 - s) - 1.0
        x = np.power(1.0 + u * top, 1.0 / (1.0 - s)) - 1.0
    return np.minimum(x.astype(np.int64), space - 1)


def bernoulli_rows(rng: np.random.Generator, rows: int, p: float) -> np.ndarray:
    """Sorted rows of [0, rows), each kept with probability `p` (geometric gaps: O(kept), no sort)."""
    if p <= 0:
        return np.zeros(0, dtype=np.int64)
    if p >= 1:
        return np.arange(rows, dtype=np.int64)
    expected = rows * p
    out = []
    start = -1
    while True:
        gaps = rng.geometric(p, size=int(expected + 6 * math.sqrt(expected) + 16))
        positions = start + np.cumsum(gaps)
        out.append(positions[positions < rows])
        if positions[-1] >= rows:
            return np.concatenate(out).astype(np.int64)
        start = int(positions[-1])


def distinct(ids: np.ndarray, space: int) -> np.ndarray:
    """The sorted distinct ids (a mask over the space when the ids are many, else a sort)."""
    if len(ids) * 16 < space:
        return np.unique(ids)
    mask = np.zeros(space, dtype=bool)
    mask[ids] = True
    return np.flatnonzero(mask)
