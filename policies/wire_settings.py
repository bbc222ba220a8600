"""The `wire` and `block` settings the built-in dense policies share, and the ops they make of them."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, ValidationInfo, field_validator

from policies.base import PolicySettings
from policies.ops import Collective, Group
from policies.view import ModelInfo
from policies.wire import DEFAULT_BLOCK, WIRE_TYPES

WireName = Literal["fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "fp4"]  # policies.wire.WIRE_NAMES


class WireSettings(PolicySettings):
    wire: Optional[WireName] = Field(
        None,
        description="element type gradients travel in (docs/policies.md, precision on the wire); "
        "unset: workload.gradient_precision",
    )
    block: int = Field(DEFAULT_BLOCK, ge=1, description="values per fp32 scale of a scaled wire type (fp8, int8, fp4)")

    @field_validator("block")
    @classmethod
    def _block_needs_a_scaled_wire(cls, block: int, info: ValidationInfo) -> int:
        wire = info.data.get("wire")
        if wire is None or not WIRE_TYPES[wire].scaled:
            scaled = ", ".join(name for name, t in WIRE_TYPES.items() if t.scaled)
            raise ValueError(f"applies to a scaled wire ({scaled}); wire is {wire}")
        return block


def gradient_op(
    kind: type[Collective], group: Group, nbytes: float, settings: WireSettings, model: ModelInfo
) -> Collective:
    """A `kind` op on `nbytes` of gradient (counted in the workload's gradient type), sent in the
    settings' `wire` when one is set."""
    if settings.wire is None:
        return kind(group, nbytes)
    return kind(group, elements=model.gradient_values(nbytes), wire=settings.wire, block=settings.block)
