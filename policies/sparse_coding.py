"""Settings every sparse synchronization policy shares: how non-zero rows are encoded on the wire."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.ops import SparseCoding


class CodingSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    index_format: Literal["list", "bitmap", "auto"] = Field(
        "auto", description="row ids as a list, a bitmap over the owner's share of rows, or whichever is smaller"
    )
    index_bytes: Literal[4, 8] = Field(4, description="bytes of one row id in a list")

    def coding(self, partition: str) -> SparseCoding:
        return SparseCoding(partition, self.index_format, self.index_bytes)
