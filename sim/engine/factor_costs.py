"""What a low-rank factor op (`policies.factor_ops`) costs the GPU it runs on.

A factor op of a bucket acts on that bucket's tensors (`ModelInfo.bucket_shapes`) as its factor buffers'
`LowRank` lays them out (`policies.lowrank.Layout`); every value is fp32 (4 bytes), as the buffers are.
Its time is a roofline plus its kernels: the larger of its memory traffic over the GPU's memory bandwidth
and its arithmetic over the GPU's dense fp32 peak (a batched product of one matrix runs on the CUDA cores
in fp32, as PowerSGD's hook runs it), plus the kernels it launches, one small kernel per matrix and step
of the hook's loops, at the GPU's fitted cost per kernel (`KernelCosts.launch_us`, the compute model's:
docs/compute_model.md). For a model of many small matrices the kernels dominate.

- `Project`: reads M (rows x cols) and one factor, writes the other: 4 (rows cols + (rows + cols) r)
  bytes and 2 rows cols r FLOPs per matrix, one kernel each; `Reconstruct` writes M and reads both
  factors: the same.
- `Orthogonalize`: Gram-Schmidt over a factor of k x r values reads and writes it about r times:
  8 k r^2 bytes and 4 k r^2 FLOPs per factor; a norm and a division per column, and a product, a sum,
  a product and a subtraction for every column but the last (2 r + 4 (r - 1) kernels); above rank 2
  one QR factorization and a copy of its Q (2 kernels).
- `RandomFill`: writes the factors once, a copy to the GPU per matrix (the draws, on the host, are not priced).
- `Pack` / `Unpack`: read and write the values that travel as they are: one concatenation, and one copy
  back per tensor.
"""

from __future__ import annotations

from policies.factor_ops import FactorOp, Orthogonalize, Pack, Project, RandomFill, Reconstruct, Unpack
from policies.lowrank import Layout

VALUE_BYTES = 4.0


def factor_work(op: FactorOp, layout: Layout, side: str) -> tuple[float, float, int]:
    """(bytes moved, FLOPs, kernels) of `op` over a region laid out as `layout`; `side`: the side (p, q or
    rest) of the factor buffer a RandomFill or an Orthogonalize acts on."""
    matrices = len(layout.matrices)
    if isinstance(op, (Project, Reconstruct)):
        values = sum(m.rows * m.cols + (m.rows + m.cols) * m.rank for m in layout.matrices)
        return VALUE_BYTES * values, layout.flops, matrices
    if isinstance(op, (Pack, Unpack)):
        kernels = len(layout.rest) if isinstance(op, Unpack) else min(1, len(layout.rest))
        return 2 * VALUE_BYTES * layout.rest_values, 0.0, kernels
    sizes = [((m.rows if side == "p" else m.cols), m.rank) for m in layout.matrices]
    if isinstance(op, RandomFill):
        return VALUE_BYTES * sum(k * r for k, r in sizes), 0.0, matrices
    if isinstance(op, Orthogonalize):
        kernels = sum(gram_schmidt_kernels(r) if r <= GRAM_SCHMIDT_RANK else QR_KERNELS for _, r in sizes)
        volume = sum(k * r * r for k, r in sizes)
        return 2 * VALUE_BYTES * volume, 4.0 * volume, kernels
    raise TypeError(f"no cost rule for {type(op).__name__}")


GRAM_SCHMIDT_RANK = 2  # the hook orthogonalizes by Gram-Schmidt up to this rank, by QR above
QR_KERNELS = 2  # a QR factorization and the copy of its Q


def gram_schmidt_kernels(rank: int) -> int:
    """Kernels of Gram-Schmidt over `rank` columns: a norm and a division per column, and a product, a sum,
    a product and a subtraction for every column but the last."""
    return 2 * rank + 4 * (rank - 1)


def factor_seconds(
    op: FactorOp, layout: Layout, side: str, memory_bytes_per_s: float, flops_per_s: float, launch_s: float = 0.0
) -> float:
    """Seconds of `op` on a GPU of that memory bandwidth, fp32 peak and cost per kernel (the module's rule)."""
    moved, flops, kernels = factor_work(op, layout, side)
    memory = moved / memory_bytes_per_s if memory_bytes_per_s > 0 else 0.0
    compute = flops / flops_per_s if flops_per_s > 0 else 0.0
    return max(memory, compute) + kernels * launch_s
