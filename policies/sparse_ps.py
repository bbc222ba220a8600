"""A sparse parameter server (BSP): workers push only their non-zero rows, and read back only the
rows the last round updated.

Shards own ranges of row ids (`partition: contiguous`, as range-partitioned servers such as
ps-lite do) or hashed ids. A shard sums a round's pushes and applies them; the next step's read of
a bucket carries the rows that round touched (the union of its pushes). Dense buckets go through
the servers densely, as in `ps`.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from policies.base import Bucket
from policies.ops import Pull, Push
from policies.ps import ParameterServer, PSSettings
from policies.sparse_coding import CodingSettings


class SparsePSSettings(PSSettings, CodingSettings):
    partition: Literal["contiguous", "hash"] = Field("contiguous", description="how row ids map to shards")
    index_format: Literal["list", "bitmap", "auto"] = Field(
        "list", description="row ids as a list, a bitmap over the shard's rows, or whichever is smaller"
    )


class SparsePS(ParameterServer):
    name = "sparse_ps"
    Settings: ClassVar[type[BaseModel]] = SparsePSSettings

    def pushes(self, bucket: Bucket) -> tuple[Push, ...]:
        if not self.bound_model.is_sparse(bucket.index):
            return super().pushes(bucket)
        key = ("sparse_push", bucket.index, bucket.nbytes)
        if key not in self._ops:
            k, coding = len(self.shard_hosts), self.settings.coding(self.settings.partition)
            self._ops[key] = tuple(Push(s, bucket.nbytes / k, key=bucket.index, coding=coding) for s in range(k))
        return self._ops[key]  # type: ignore[return-value]

    def pulls(self, key: int, nbytes: float) -> tuple[Pull, ...]:
        if not self.bound_model.is_sparse(key):
            return super().pulls(key, nbytes)
        cache = ("sparse_pull", key, nbytes)
        if cache not in self._ops:
            k, coding = len(self.shard_hosts), self.settings.coding(self.settings.partition)
            self._ops[cache] = tuple(Pull(s, nbytes / k, key=key, coding=coding) for s in range(k))
        return self._ops[cache]  # type: ignore[return-value]
