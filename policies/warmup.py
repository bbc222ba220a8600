"""The `warmup_steps` setting the periodic and compressing policies share: plain data parallelism first."""

from __future__ import annotations

from pydantic import Field, field_validator

from policies.base import PolicySettings

MAX_WARMUP = 10_000_000


class WarmupSettings(PolicySettings):
    warmup_steps: int = Field(
        0,
        description=f"steps of plain data parallelism (every gradient bucket all-reduced on a ring of all ranks) "
        f"first (0 to {MAX_WARMUP})",
    )

    @field_validator("warmup_steps")
    @classmethod
    def _warmup_in_range(cls, warmup: int) -> int:
        if not 0 <= warmup <= MAX_WARMUP:
            raise ValueError(f"allowed: an integer from 0 to {MAX_WARMUP} (got {warmup})")
        return warmup
