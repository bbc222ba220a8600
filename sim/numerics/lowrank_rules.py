"""What the low-rank factor ops (`policies.factor_ops`) do to one worker's tensors, on every backend.

A worker's factor buffers (`policies.lowrank.FactorBuffer`) are kept per bucket region: a flat tensor per
(buffer, region), zeros when first used, sized by the region's `Layout`, on the device and in the type of
the worker's gradient. Numerics mode, the real backend and the DDP hook (`real/hooks.py`) all call
`Factors.apply`, so they leave the same bits; the arithmetic is the PyTorch hook's, call for call
(batched matrix products of one matrix, fp32 draws on the CPU generator), so a bucket that holds whole
tensors is compressed exactly as `powerSGD_hook` compresses it.

Which tensors a region holds (`region_tensors`): the model's tensors lie end to end in the flat vector
(`Task.tensor_shapes`). A tensor wholly inside the region keeps its shape. Numerics mode maps a simulated
model's buckets onto a small model in proportion to their bytes (`replica.bucket_ranges`), so a region may
cut a tensor: its whole rows inside the region then form a matrix (rows x the tensor's row length), and
the pieces of a row at either cut are 1-D tensors of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from policies.factor_ops import FactorOp, Orthogonalize, Pack, Project, RandomFill, Reconstruct, Unpack
from policies.lowrank import FactorBuffer, Layout, LowRank, Shape, matrix_shape
from sim.errors import PolicyError

Range = tuple[int, int]
Placed = tuple[int, Shape]  # a tensor's offset in the flat vector, and its shape


def region_tensors(shapes: Sequence[Shape], region: Range) -> list[Placed]:
    """The tensors (offset, shape) of `region` of a flat vector holding tensors of `shapes` end to end."""
    lo, hi = region
    found: list[Placed] = []
    offset = 0
    for shape in shapes:
        numel = math.prod(shape)
        a, b = max(lo, offset), min(hi, offset + numel)
        if a < b:
            if (a, b) == (offset, offset + numel):
                found.append((offset, tuple(shape)))
            else:
                found += _cut(offset, shape, a, b)
        offset += numel
        if offset >= hi:
            break
    return found


def _cut(offset: int, shape: Shape, a: int, b: int) -> list[Placed]:
    """The part [a, b) of a tensor at `offset`: its whole rows as a matrix, the partial rows as vectors."""
    _, row = matrix_shape(shape)
    first = offset + -(-(a - offset) // row) * row  # the first row starting at or after a
    last = offset + (b - offset) // row * row  # the end of the last row ending at or before b
    if first >= last:
        return [(a, (b - a,))]
    parts: list[Placed] = []
    if a < first:
        parts.append((a, (first - a,)))
    parts.append((first, ((last - first) // row, row)))
    if last < b:
        parts.append((last, (b - last,)))
    return parts


def orthogonalize(factor: torch.Tensor, epsilon: float) -> None:
    """Make the columns of `factor` (1 x rows x rank) orthonormal in place: Gram-Schmidt at rank <= 2 or in
    half precision, else the Q of a QR factorization (the PyTorch hook's choice)."""
    rank = factor.shape[2]
    if rank > 2 and factor.dtype not in (torch.float16, torch.bfloat16):
        factor.copy_(torch.linalg.qr(factor).Q)
        return
    for i in range(rank):
        column = factor[:, :, i : i + 1]
        norm = torch.norm(column, dim=1, keepdim=True)
        column /= norm + epsilon if epsilon else norm
        if i + 1 < rank:
            later = factor[:, :, i + 1 :]
            later -= torch.sum(column * later, dim=1, keepdim=True) * column


class Factors:
    """One worker's factor buffers, one flat tensor per (buffer, region), and the ops on them.

    `shapes`: the model's tensors in flat order, or a function giving a region's tensors (the DDP hook's
    bucket knows its own); `like`: a tensor of the gradients' type and device."""

    def __init__(
        self,
        declared: Sequence[FactorBuffer],
        shapes: Sequence[Shape] | Callable[[Range], list[Placed]],
        like: torch.Tensor,
    ) -> None:
        self.declared = {b.name: b for b in declared}
        self._region_tensors = shapes if callable(shapes) else (lambda region: region_tensors(shapes, region))
        self.dtype, self.device = like.dtype, like.device
        self.tensors: dict[tuple[str, Range], torch.Tensor] = {}
        self._placed: dict[Range, list[Placed]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.declared

    def clear(self) -> None:
        """Forget every factor (a phase restart): they are zeros again when next used."""
        self.tensors.clear()

    def layout(self, lowrank: LowRank, region: Range) -> tuple[Layout, list[Placed]]:
        placed = self._placed.get(region)
        if placed is None:
            placed = self._placed[region] = self._region_tensors(region)
        return lowrank.layout([shape for _, shape in placed]), placed

    def tensor(self, name: str, region: Range) -> torch.Tensor:
        """Factor buffer `name` of `region` (zeros when first used)."""
        key = (name, region)
        found = self.tensors.get(key)
        if found is None:
            buffer = self._buffer(name)
            layout, _ = self.layout(buffer.lowrank, region)
            found = self.tensors[key] = torch.zeros(layout.values(buffer.side), dtype=self.dtype, device=self.device)
        return found

    def _buffer(self, name: str) -> FactorBuffer:
        found = self.declared.get(name)
        if found is None:
            raise PolicyError(f"{name!r} is not a factor buffer; factor buffers: {', '.join(self.declared) or 'none'}")
        return found

    def apply(self, op: FactorOp, model: Callable[[str], torch.Tensor], ranges: Sequence[Range]) -> None:
        """Carry out `op` on the region `ranges` names; `model` gives a model-sized buffer by name."""
        if len(ranges) != 1:
            raise PolicyError(f"{op!r} acts on one bucket's region; it is for on_forward / on_gradients programs")
        region = ranges[0]
        buffers = [self._buffer(name) for name in op.factors]
        lowrank = buffers[0].lowrank
        if any(b.lowrank != lowrank for b in buffers):
            raise PolicyError(f"{op!r} names factor buffers of different LowRank settings")
        layout, placed = self.layout(lowrank, region)
        if isinstance(op, RandomFill):
            self._random(op, buffers[0], layout, region)
        elif isinstance(op, Orthogonalize):
            for factor in self._views(op.factor, buffers[0].side, layout, region):
                orthogonalize(factor, op.epsilon)
        elif isinstance(op, Project):
            self._project(op, model(op.matrices), layout, placed, region)
        elif isinstance(op, Reconstruct):
            self._sides(op, ("p", "q"), (op.p, op.q))
            ps, qs = self._views(op.p, "p", layout, region), self._views(op.q, "q", layout, region)
            for m, p, q in zip(self._matrices(model(op.matrices), layout, placed), ps, qs):
                torch.bmm(p, q.transpose(1, 2), out=m)
        elif isinstance(op, (Pack, Unpack)):
            self._sides(op, ("rest",), (op.rest,))
            flat, rest = model(op.matrices), self.tensor(op.rest, region)
            at = 0
            for i in layout.rest:
                offset, shape = placed[i]
                n = math.prod(shape)
                if isinstance(op, Pack):
                    rest[at : at + n] = flat[offset : offset + n]
                else:
                    flat[offset : offset + n] = rest[at : at + n]
                at += n
        else:
            raise TypeError(f"no tensor rule for {type(op).__name__}")

    def _random(self, op: RandomFill, buffer: FactorBuffer, layout: Layout, region: Range) -> None:
        if buffer.side == "rest":
            raise PolicyError(f"{op!r}: RandomFill fills factors (side p or q), {op.out!r} holds side rest")
        with torch.random.fork_rng(devices=[]):  # seeded draws that leave the caller's generator alone
            torch.manual_seed(op.seed)
            for factor in self._views(op.out, buffer.side, layout, region):
                factor.copy_(torch.randn(*factor.shape, dtype=self.dtype))

    def _project(self, op: Project, flat: torch.Tensor, layout: Layout, placed: list[Placed], region: Range) -> None:
        src, out = ("p", "q") if op.transpose else ("q", "p")
        self._sides(op, (src, out), (op.source, op.out))
        sources, outs = self._views(op.source, src, layout, region), self._views(op.out, out, layout, region)
        for m, s, o in zip(self._matrices(flat, layout, placed), sources, outs):
            torch.bmm(m.transpose(1, 2) if op.transpose else m, s, out=o)

    def _sides(self, op: FactorOp, sides: Sequence[str], names: Sequence[str]) -> None:
        for side, name in zip(sides, names):
            if self._buffer(name).side != side:
                raise PolicyError(f"{op!r}: {name!r} must hold side {side}, it holds {self._buffer(name).side}")

    def _views(self, name: str, side: str, layout: Layout, region: Range) -> list[torch.Tensor]:
        """Each factored matrix's factor in buffer `name` as a 1 x (rows or cols) x rank view."""
        flat = self.tensor(name, region)
        views = []
        for m in layout.matrices:
            n, at = (m.rows, m.p_offset) if side == "p" else (m.cols, m.q_offset)
            views.append(flat[at : at + n * m.rank].view(1, n, m.rank))
        return views

    @staticmethod
    def _matrices(flat: torch.Tensor, layout: Layout, placed: list[Placed]) -> list[torch.Tensor]:
        """Each factored matrix of the region as a 1 x rows x cols view of `flat`."""
        views = []
        for m in layout.matrices:
            offset = placed[m.tensor][0]
            views.append(flat[offset : offset + m.rows * m.cols].view(1, m.rows, m.cols))
        return views
