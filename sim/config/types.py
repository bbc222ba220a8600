"""Field types every config section shares: strict, finite, and bounded by what a real machine can be.

Strict: a YAML `true` is not 1 host and `"10"` is not 10 (pydantic's lax mode would accept both).
Finite: NaN and +-inf (YAML `.inf`, or `1e400` read as infinity) are refused with the field's name.
Bounded: a value no real cluster has (a 10^308 Gbit/s NIC, a latency of hours) is refused up front
instead of overflowing into infinities or stalling the simulation hours of simulated time later.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

# what a real machine can be: the bounds are generous, they only catch values no cluster has
MAX_GBPS = 1e6  # 1 Pbit/s per link direction
MIN_GBPS = 1e-3  # 1 Mbit/s: emulated links run at a few Mbit/s
MAX_LATENCY_US = 1e6  # one second per hop
MAX_MB = 1e7  # 10 TB of gradients
MAX_MS = 1e7  # ~3 hours of compute per iteration
MAX_SECONDS = 1e9  # ~30 years of simulated time
MAX_FACTOR = 1e3  # slow-downs and scale factors
MAX_COUNT = 2**20  # hosts, racks, GPUs: a million


class Strict(BaseModel):
    """A config section: unknown keys, non-finite floats and type coercions are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Rank = Annotated[int, Field(ge=0, lt=MAX_COUNT)]
Fraction = Annotated[float, Field(gt=0, le=1)]  # (0, 1]
Share = Annotated[float, Field(ge=0, le=1)]  # [0, 1]
Gbps = Annotated[float, Field(ge=MIN_GBPS, le=MAX_GBPS)]
LatencyUs = Annotated[float, Field(ge=0, le=MAX_LATENCY_US)]
Megabytes = Annotated[float, Field(gt=0, le=MAX_MB)]
Milliseconds = Annotated[float, Field(ge=0, le=MAX_MS)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]
PosSeconds = Annotated[float, Field(gt=0, le=MAX_SECONDS)]
Factor = Annotated[float, Field(gt=0, le=MAX_FACTOR)]


def _list_as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


AsTuple = BeforeValidator(_list_as_tuple)  # YAML has no tuples: a fixed-length pair is written as a list


def _printable(value: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("control characters (newlines, tabs, NUL) are not allowed")
    return value


def _folder_name(value: str) -> str:
    if value.startswith(".") or "/" in value or "\\" in value:
        raise ValueError(f"{value!r} names the output folder: no '/' or '\\\\', and no leading '.'")
    return _printable(value)


# the experiment's name becomes `results/<name>`; a label names a policy in tables and figures
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_folder_name)]
Label = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_printable)]
