"""Zen (Wang et al., OSDI'25): sparse gradients reduced by a balanced all-to-all, then all-gathered.

Each sparse bucket: every worker sends each owner the non-zero rows it owns (the row id's hash picks
the owner, so every owner gets an equal share of the index space whatever the skew); owners sum
what they receive; an all-gather of the owners' summed rows gives everyone the reduced gradient.
Row ids travel as a list or a bitmap over the owner's share, whichever is smaller (`auto`). Dense
buckets are all-reduced on a ring. `partition: contiguous` (owner j gets the j-th range of ids) is
the ablation that shows why hashing matters under skew.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field

from policies.base import Bucket
from policies.ops import AllGather, AllToAll, Density, Program
from policies.sparse_coding import CodingSettings, SparseCollectivePolicy


class ZenSettings(CodingSettings):
    partition: Literal["hash", "contiguous"] = Field("hash", description="how row ids map to owners")


class Zen(SparseCollectivePolicy):
    name = "zen"
    Settings: ClassVar[type[BaseModel]] = ZenSettings

    def sparse_program(self, bucket: Bucket) -> Program:
        return (
            AllToAll(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),
            AllGather(self.world, bucket.nbytes, density=Density.SPARSE, coding=self.coding),
        )
