"""Low-rank factors of a region's gradient: which tensors a rank-r codec factors, and where the factors lie.

PowerSGD (Vogels et al., NeurIPS 2019, arXiv 1905.13727; PyTorch's `powerSGD_hook`) sends a matrix M of
n x m gradient values as two factors, P (n x r) and Q (m x r), with M ~ P Q^T. Every tensor of a region
(a bucket's tensors, `ModelInfo.bucket_shapes`) is seen as a matrix of shape[0] rows and numel / shape[0]
columns; it is factored at rank r = min(rank, rows, cols) when the factors are smaller than the matrix by
more than `min_compression_rate` ((rows + cols) * r * rate < rows * cols), and travels as it is otherwise
(1-D tensors too, for any rate >= 1). So a region's values split three ways, each laid end to end in a
flat tensor of its own:

- `p`: the P factors of the factored matrices, `q`: their Q factors. Matrices are grouped by shape (shapes
  in order of first appearance, then region order within a shape), as the PyTorch hook lays its P and Q
  memory out, so the same random draws fill the same factors.
- `rest`: the tensors that travel as they are, in region order.

A policy declares a `FactorBuffer` per side it uses; a backend holds one per bucket region, sized by the
region's `Layout`, zeros at first and kept across steps (warm start). The ops on them are in
`policies.factor_ops`. No simpy, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from policies.tensors import BUILT_IN, check_name

SIDES: tuple[str, ...] = ("p", "q", "rest")
Shape = tuple[int, ...]


@dataclass(frozen=True)
class LowRank:
    """Factor matrices at rank `rank` when that shrinks them by more than `min_compression_rate`."""

    rank: int = 1
    min_compression_rate: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"low-rank rank {self.rank!r}; allowed: an int >= 1")
        rate = self.min_compression_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate < 0:
            raise ValueError(f"low-rank min_compression_rate {rate!r}; allowed: a finite number >= 0")

    def factor_rank(self, rows: int, cols: int) -> int:
        """The rank a rows x cols matrix is factored at: at most its smaller side."""
        return min(rows, cols, self.rank)

    def factors(self, rows: int, cols: int) -> bool:
        """Is a rows x cols matrix factored (its factors smaller by more than the rate)?"""
        return (rows + cols) * self.factor_rank(rows, cols) * self.min_compression_rate < rows * cols

    def layout(self, shapes: Sequence[Shape]) -> Layout:
        """Where a region of tensors of `shapes` (in region order) goes: see the module's text."""
        return _layout(self, tuple(tuple(int(d) for d in s) for s in shapes))


@dataclass(frozen=True)
class Matrix:
    """A factored tensor: its index in the region, rows x cols, rank, and its factors' offsets."""

    tensor: int
    rows: int
    cols: int
    rank: int
    p_offset: int
    q_offset: int


@dataclass(frozen=True)
class Layout:
    """A region's factored matrices (in factor order), the tensors sent as they are, and the sizes (values)
    of its three flat tensors."""

    matrices: tuple[Matrix, ...]
    rest: tuple[int, ...]
    p_values: int
    q_values: int
    rest_values: int

    def values(self, side: str) -> int:
        """Values of the flat tensor of `side` (p, q or rest)."""
        return {"p": self.p_values, "q": self.q_values, "rest": self.rest_values}[side]

    @property
    def flops(self) -> float:
        """FLOPs of one matrix product over every factored matrix (M Q, M^T P and P Q^T each cost this)."""
        return float(sum(2 * m.rows * m.cols * m.rank for m in self.matrices))


def matrix_shape(shape: Shape) -> tuple[int, int]:
    """A tensor as a matrix: its first dimension as rows, the rest as columns (a scalar: 1 x 1)."""
    numel = math.prod(shape)
    rows = shape[0] if shape else 1
    return rows, (numel // rows if rows else 0)


@lru_cache(maxsize=4096)
def _layout(lowrank: LowRank, shapes: tuple[Shape, ...]) -> Layout:
    by_shape: dict[tuple[int, int], list[int]] = {}
    rest: list[int] = []
    rest_values = 0
    for i, shape in enumerate(shapes):
        rows, cols = matrix_shape(shape)
        if rows * cols > 0 and lowrank.factors(rows, cols):
            by_shape.setdefault((rows, cols), []).append(i)
        else:
            rest.append(i)
            rest_values += rows * cols
    matrices: list[Matrix] = []
    p = q = 0
    for (rows, cols), members in by_shape.items():
        r = lowrank.factor_rank(rows, cols)
        for i in members:
            matrices.append(Matrix(i, rows, cols, r, p, q))
            p, q = p + rows * r, q + cols * r
    return Layout(tuple(matrices), tuple(rest), p, q, rest_values)


@dataclass(frozen=True)
class FactorBuffer:
    """A flat tensor per bucket region holding that region's `side` (p, q or rest) under `lowrank`."""

    name: str
    lowrank: LowRank
    side: str

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.name in BUILT_IN:
            raise ValueError(f"buffer {self.name!r} is built in; declare buffers of other names")
        if not isinstance(self.lowrank, LowRank):
            raise ValueError(f"lowrank {self.lowrank!r}; allowed: a policies.lowrank.LowRank")
        if self.side not in SIDES:
            raise ValueError(f"factor side {self.side!r}; allowed: {', '.join(SIDES)}")
