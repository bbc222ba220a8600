"""What every sparse synchronization policy shares: how non-zero rows are encoded on the wire, and
the collective kind's split between sparse buckets (its own program) and dense ones (a ring)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from policies.base import Bucket, Policy, PolicySettings
from policies.ops import AllReduce, Group, Program, SparseCoding
from policies.view import ClusterView, ModelInfo


class CodingSettings(PolicySettings):
    index_format: Literal["list", "bitmap", "auto"] = Field(
        "auto", description="row ids as a list, a bitmap over the owner's share of rows, or whichever is smaller"
    )
    index_bytes: Literal[4, 8] = Field(4, description="bytes of one row id in a list")

    def coding(self, partition: str) -> SparseCoding:
        return SparseCoding(partition, self.index_format, self.index_bytes)


class SparseCollectivePolicy(Policy):
    """Collectives over all ranks: `sparse_program` for sparse buckets, ring all-reduce for dense
    ones. Subclasses set `partition` (or take it from a `partition` setting)."""

    partition: ClassVar[str] = "hash"

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))
        self.coding = self.settings.coding(getattr(self.settings, "partition", self.partition))

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if self.bound_model.is_sparse(bucket.index):
            return self.sparse_program(bucket)
        return (AllReduce(self.world, bucket.nbytes),)

    def sparse_program(self, bucket: Bucket) -> Program:
        raise NotImplementedError
