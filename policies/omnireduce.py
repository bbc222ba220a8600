"""OmniReduce (Fei et al., SIGCOMM'21): only the blocks of a tensor that hold a non-zero are sent.

A sparse bucket is cut into blocks of `block_size` consecutive values. Workers stream their
non-zero blocks, each with a `index_bytes` block id, to the aggregator that owns the block (one
aggregator per worker, co-located on it, owning the j-th of n contiguous ranges of blocks: the
paper's aggregators may also be separate machines, which this policy does not model); aggregators
sum and send every worker the summed blocks that were non-zero anywhere. A zero inside a non-zero
block travels like any value, which is the price of needing no per-value ids.

Bytes per worker, n workers, M values, blocks of k values, per-worker and union shares of non-zero
blocks f and F: (n-1)/n f M/k (k b_v + b_i) out, (n-1)/n F M/k (k b_v + b_i) in (docs/sparse.md).
Dense buckets are all-reduced on a ring.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from policies.base import Bucket, PolicySettings
from policies.ops import AllGather, AllToAll, Density, Program, SparseCoding
from policies.sparse_coding import SparseCollectivePolicy


class OmniReduceSettings(PolicySettings):
    block_size: int = Field(
        256, ge=1, le=2**31, description="values per block (OmniReduce's default: 256; at most a 32-bit tensor)"
    )
    index_bytes: Literal[4, 8] = Field(4, description="bytes of the id each block carries")

    def coding(self, partition: str) -> SparseCoding:
        return SparseCoding(partition, "list", self.index_bytes, block=self.block_size)


class OmniReduce(SparseCollectivePolicy):
    name = "omnireduce"
    Settings: ClassVar[type[BaseModel]] = OmniReduceSettings
    partition = "contiguous"  # aggregator j owns the j-th range of blocks

    def sparse_program(self, bucket: Bucket) -> Program:
        return (
            AllToAll(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),
            AllGather(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),
        )
