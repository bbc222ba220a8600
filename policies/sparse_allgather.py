"""The common baseline for sparse gradients: all-gather every worker's (row id, values) pairs.

Each worker sends its whole sparse bucket to every other worker and sums what it receives (as
Horovod and TensorFlow do for IndexedSlices). Dense buckets are all-reduced on a ring.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from policies.base import Bucket, Policy
from policies.ops import AllGather, AllReduce, Density, Group, Program
from policies.sparse_coding import CodingSettings
from policies.view import ClusterView, ModelInfo


class GatherSettings(CodingSettings):
    index_format: Literal["list", "bitmap", "auto"] = Field(
        "list", description="row ids as a list (the baseline), a bitmap over all rows, or whichever is smaller"
    )


class SparseAllGather(Policy):
    name = "sparse_allgather"
    Settings: ClassVar[type[BaseModel]] = GatherSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))
        self.coding = self.settings.coding("none")

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if not self.bound_model.is_sparse(bucket.index):
            yield AllReduce(self.world, bucket.nbytes)
            return
        yield AllGather(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding)
