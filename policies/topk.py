"""Top-k sparsified gradients with error feedback: each worker sends the k largest magnitudes of a bucket.

Per gradient bucket, every worker adds back what it held over from earlier steps (its residual), keeps
the k = ceil(ratio x values) largest magnitudes of the sum, zeroes the rest and keeps them as its new
residual (`Encode` with `Codec(topk=ratio)` and `residual`); then an all-gather of every worker's k
(index, value) pairs leaves every worker the mean of the workers' sparse gradients, which the optimizer
steps on. This is sparsified SGD with memory (Stich et al., arXiv 1809.07599) and the gradient-sparsification
core of Deep Gradient Compression (Lin et al., arXiv 1712.01887), with per-bucket selection over exact top-k;
DGC's momentum correction, local gradient clipping, momentum factor masking and sampled thresholds are not
applied. The pairs are declared (`SparseCoding.topk`), so every backend moves exactly k per worker.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from policies.base import Bucket, Policy
from policies.ops import AllGather, AllReduce, Density, Encode, Group, Program, SparseCoding
from policies.tensors import GRADIENTS, Buffer, Codec
from policies.view import ClusterView, ModelInfo
from policies.warmup import WarmupSettings

RESIDUAL = "residual"


class TopKSettings(WarmupSettings):
    ratio: float = Field(0.01, description="share of each bucket's values every worker sends, in (0, 1]")
    index_bytes: Literal[4, 8] = Field(4, description="bytes of one position id on the wire")

    @field_validator("ratio")
    @classmethod
    def _ratio_is_a_fraction(cls, ratio: float) -> float:
        if not 0 < ratio <= 1:
            raise ValueError(f"allowed: a fraction in (0, 1] (got {ratio:g})")
        return ratio


class TopK(Policy):
    """Steps 0 .. warmup_steps-1 all-reduce every bucket over one ring of all ranks (as `ring`); from then
    on each bucket is `Encode`d to its top-k with error feedback into the `residual` buffer, and its
    gradient all-gathered as k declared (index, value) pairs per worker (`partition: none`: every worker
    sums all pairs and divides by the world size)."""

    name = "topk"
    Settings = TopKSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        s = self.settings
        self.world = Group.of(range(view.world_size))
        self.codec = Codec(topk=s.ratio)
        self.coding = SparseCoding("none", "list", s.index_bytes, topk=s.ratio)

    def buffers(self) -> tuple[Buffer, ...]:
        return (Buffer(RESIDUAL),)

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if step < self.settings.warmup_steps:
            yield AllReduce(self.world, bucket.nbytes)
            return
        yield Encode(GRADIENTS, self.codec, residual=RESIDUAL)
        yield AllGather(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding)
