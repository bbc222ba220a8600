"""SparCML (Renggli et al., SC'19): sparse all-reduce whose partial results turn dense once they fill up.

We model SparCML's algorithm for large data, the split all-reduce (SSAR_Split_allgather): rank j owns
the j-th of n contiguous ranges of row ids; every rank sends each owner its non-zero (id, value)
pairs in that range, owners sum, and an all-gather hands everyone the owners' sums. Every message
switches to the dense values of its range, without ids, once that is smaller, i.e. when the range's
density reaches b_v / (b_v + b_i) (1/2 with 4-byte ids): in practice the all-gather of a union that
filled up. The recursive-doubling variant for small data is not modelled: at the sizes sparse
gradients reach (megabytes of embedding rows) bandwidth decides, and the split form is the one
SparCML uses there. Unlike Zen's hashing, contiguous ranges leave skewed rows on few owners.

Bytes per worker, n ranks, M rows, per-worker density d, union density D: (n-1)/n M min(d (b_v +
b_i), b_v) out in the split, (n-1)/n M min(D (b_v + b_i), b_v) in from the all-gather (docs/sparse.md).
Dense buckets are all-reduced on a ring.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from policies.base import Bucket
from policies.ops import AllGather, AllToAll, Density, Program, SparseCoding
from policies.sparse_coding import CodingSettings, SparseCollectivePolicy


class SparCMLSettings(CodingSettings):
    index_format: Literal["list", "bitmap", "auto"] = Field(
        "list", description="row ids as a list (SparCML's pairs), a bitmap over the range, or whichever is smaller"
    )

    def coding(self, partition: str) -> SparseCoding:
        return SparseCoding(partition, self.index_format, self.index_bytes, dense_switch=True)


class SparCML(SparseCollectivePolicy):
    name = "sparcml"
    Settings: ClassVar[type[BaseModel]] = SparCMLSettings
    partition = "contiguous"  # range ownership, as SparCML splits the index space

    def sparse_program(self, bucket: Bucket) -> Program:
        return (
            AllToAll(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),
            AllGather(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),
        )
