"""Element types on the wire: what one value of a collective's tensor costs in bytes.

Two families, which the backends reduce differently (docs/policies.md, "Precision on the wire"):

- *native* types (fp32, bf16, fp16): the values are cast to the type and the collective adds them in
  it, as NCCL does (each ring step's partial sum is rounded to the type);
- *scaled* types (fp8_e4m3, fp8_e5m2, int8, fp4 = e2m1): each block of `block` consecutive values
  travels as codes on the type's grid plus one fp32 scale (the block's largest magnitude over the
  grid's largest value); a reduction decodes the members' values and adds them in fp32, and the sum is
  encoded again before it is gathered (as INTELLECT-1's int8 all-reduce does).

Bytes of `n` values: `n * bits / 8`, plus `ceil(n / block) * 4` scale bytes for a scaled type.
No simpy, no torch: policies size their ops with it, backends price and check them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SCALE_BYTES = 4  # one fp32 scale per block of a scaled type
DEFAULT_BLOCK = 32  # values per scale (the OCP microscaling formats' block)


@dataclass(frozen=True)
class WireType:
    """One element type: `bits` per value; `grid_max`: the largest code magnitude a scale maps the
    block's largest value to (scaled types), 0 for native types."""

    name: str
    bits: int
    grid_max: float = 0.0

    @property
    def scaled(self) -> bool:
        return self.grid_max > 0


WIRE_TYPES: dict[str, WireType] = {
    t.name: t
    for t in (
        WireType("fp32", 32),
        WireType("bf16", 16),
        WireType("fp16", 16),
        WireType("fp8_e4m3", 8, 448.0),  # the largest finite e4m3fn value
        WireType("fp8_e5m2", 8, 57344.0),  # the largest finite e5m2 value
        WireType("int8", 8, 127.0),  # symmetric: codes -127..127
        WireType("fp4", 4, 6.0),  # e2m1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6
    )
}
WIRE_NAMES: tuple[str, ...] = tuple(WIRE_TYPES)


def wire_type(name: str, field: str = "wire") -> WireType:
    """The type called `name`; a ValueError naming `field` and the allowed names otherwise."""
    found = WIRE_TYPES.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"{field} {name!r}; allowed: {', '.join(WIRE_NAMES)}")
    return found


def check_block(block: object, field: str = "block") -> int:
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"{field} {block!r}; allowed: an int >= 1 (values per scale)")
    return block


def scale_bytes(elements: float, wire: str, block: int = DEFAULT_BLOCK) -> float:
    """Bytes of the per-block scales `elements` values of `wire` carry (0 for a native type)."""
    return math.ceil(elements / block) * SCALE_BYTES if wire_type(wire).scaled else 0.0


def wire_nbytes(elements: float, wire: str, block: int = DEFAULT_BLOCK) -> float:
    """Bytes `elements` values take on the wire in `wire`: values and scales."""
    return elements * wire_type(wire).bits / 8 + scale_bytes(elements, wire, block)


def wire_elements(nbytes: float, wire: str, block: int = DEFAULT_BLOCK) -> float:
    """The values `nbytes` of `wire` hold (exact for native types and whole blocks)."""
    t = wire_type(wire)
    per_value = t.bits / 8 + (SCALE_BYTES / block if t.scaled else 0.0)
    return nbytes / per_value


def mismatch(elements: float, nbytes: float, wire: str, block: int = DEFAULT_BLOCK) -> float:
    """How far `nbytes` is from what `elements` values of `wire` take, beyond one block's scale of slack
    (a count derived from bytes rounds its last partial block); 0 when they agree."""
    expected = wire_nbytes(elements, wire, block)
    slack = (SCALE_BYTES if wire_type(wire).scaled else 0.0) + 1e-9 * max(expected, nbytes, 1.0)
    return max(0.0, abs(expected - nbytes) - slack)
