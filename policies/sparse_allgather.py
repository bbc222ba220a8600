"""The common baseline for sparse gradients: all-gather every worker's (row id, values) pairs.

Each worker sends its whole sparse bucket to every other worker and sums what it receives (as
Horovod and TensorFlow do for IndexedSlices). Dense buckets are all-reduced on a ring.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from policies.base import Bucket
from policies.ops import AllGather, Density, Program
from policies.sparse_coding import CodingSettings, SparseCollectivePolicy


class GatherSettings(CodingSettings):
    index_format: Literal["list", "bitmap", "auto"] = Field(
        "list", description="row ids as a list (the baseline), a bitmap over all rows, or whichever is smaller"
    )


class SparseAllGather(SparseCollectivePolicy):
    name = "sparse_allgather"
    Settings: ClassVar[type[BaseModel]] = GatherSettings
    partition = "none"  # a worker's whole sparse tensor moves

    def sparse_program(self, bucket: Bucket) -> Program:
        return (AllGather(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),)
