"""The `calibration:` config section: how `syncsim calibrate` and `syncsim validate` measure a cluster.

The simulator ignores it. Message sizes are chosen from a first probe unless fixed here: the bulk
size makes a transfer's bandwidth term `bandwidth_factor` times the measured latency, clamped
between 4 MiB (a shaped link's burst and TCP's ramp-up become negligible) and `max_bytes`.
The `syncsim calibrate` flags `--repeats`, `--statistic`, `--uplink-bytes` and `--max-bytes`
override these keys (docs/calibration.md).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, get_args

from pydantic import Field, model_validator

from sim.config.types import Strict

Statistic = Literal["median", "mean", "min"]  # how repeats become one time
STATISTICS: tuple[str, ...] = get_args(Statistic)
MAX_MESSAGE = 1 << 34  # 16 GiB: more than one message of any real calibration

Bytes = Annotated[int, Field(ge=1 << 12, le=MAX_MESSAGE)]


class CalibrationConfig(Strict):
    """Repeats, statistic and message sizes of a calibration."""

    repeats: Annotated[int, Field(ge=1, le=10_000)] = Field(
        5, description="timed repetitions of every measurement (compute: at least 20, a profile at least 10)"
    )
    statistic: Statistic = Field(
        "median",
        description="how repeats become one time: median, mean, or min (robust on a shared machine, where "
        "interference only adds time); a compute profile's layers always take the median",
    )
    uplink_bytes: Optional[Bytes] = Field(
        None, description="bytes each host sends in the rack-egress test; default: the probed bulk size"
    )
    max_bytes: Bytes = Field(1 << 26, description="the largest message the probe may choose (p2p, collectives, egress)")
    bandwidth_factor: Annotated[float, Field(ge=1, le=1e4)] = Field(
        50.0, description="the probed bulk size makes n/B this many times the latency α"
    )

    @model_validator(mode="after")
    def _uplink_fits(self) -> CalibrationConfig:
        if self.uplink_bytes is not None and self.uplink_bytes > self.max_bytes:
            raise ValueError(f"uplink_bytes: {self.uplink_bytes} exceeds max_bytes ({self.max_bytes})")
        return self
