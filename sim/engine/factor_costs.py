"""What a low-rank factor op (`policies.factor_ops`) costs the GPU it runs on.

A factor op of a bucket acts on that bucket's tensors (`ModelInfo.bucket_shapes`) as its factor buffers'
`LowRank` lays them out (`policies.lowrank.Layout`); every value is fp32 (4 bytes), as the buffers are.
Its time is a roofline: the larger of its memory traffic over the GPU's memory bandwidth and its
arithmetic over the GPU's dense fp32 peak (a batched product of one matrix runs on the CUDA cores in
fp32, as PowerSGD's hook runs it):

- `Project`: reads M (rows x cols) and one factor, writes the other: 4 (rows cols + (rows + cols) r)
  bytes and 2 rows cols r FLOPs per matrix; `Reconstruct` writes M and reads both factors: the same.
- `Orthogonalize`: Gram-Schmidt over a factor of k x r values reads and writes it about r times:
  8 k r^2 bytes and 4 k r^2 FLOPs per factor (a QR factorization costs the same order).
- `RandomFill`: writes the factors once (the draws themselves, on the host, are not priced).
- `Pack` / `Unpack`: read and write the values that travel as they are.
"""

from __future__ import annotations

from policies.factor_ops import FactorOp, Orthogonalize, Pack, Project, RandomFill, Reconstruct, Unpack
from policies.lowrank import Layout

VALUE_BYTES = 4.0


def factor_work(op: FactorOp, layout: Layout, side: str) -> tuple[float, float]:
    """(bytes moved, FLOPs) of `op` over a region laid out as `layout`; `side`: the side (p, q or rest)
    of the factor buffer a RandomFill or an Orthogonalize acts on."""
    if isinstance(op, (Project, Reconstruct)):
        values = sum(m.rows * m.cols + (m.rows + m.cols) * m.rank for m in layout.matrices)
        return VALUE_BYTES * values, layout.flops
    if isinstance(op, (Pack, Unpack)):
        return 2 * VALUE_BYTES * layout.rest_values, 0.0
    sizes = [((m.rows if side == "p" else m.cols), m.rank) for m in layout.matrices]
    if isinstance(op, RandomFill):
        return VALUE_BYTES * sum(k * r for k, r in sizes), 0.0
    if isinstance(op, Orthogonalize):
        return 2 * VALUE_BYTES * sum(k * r * r for k, r in sizes), 4.0 * sum(k * r * r for k, r in sizes)
    raise TypeError(f"no cost rule for {type(op).__name__}")


def factor_seconds(op: FactorOp, layout: Layout, side: str, memory_bytes_per_s: float, flops_per_s: float) -> float:
    """Seconds of `op` on a GPU of that memory bandwidth and fp32 peak (the module's roofline)."""
    moved, flops = factor_work(op, layout, side)
    memory = moved / memory_bytes_per_s if memory_bytes_per_s > 0 else 0.0
    compute = flops / flops_per_s if flops_per_s > 0 else 0.0
    return max(memory, compute)
