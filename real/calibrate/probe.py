"""The first measurement of a calibration: a short ping-pong that sets every later message size.

The first host probes each other host (one pair per host, so a rack boundary is crossed when
there is one) with a tiny and a probe-sized message; while a pair's bandwidth term is lost in its
latency, the probe grows 16x (up to `max_bytes`). Rank 0 plans the sizes (`sizes.plan_sizes`) and
broadcasts them, or the reason it could not, so every rank follows one schedule and none waits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch.distributed as dist

import real.calibrate.measure as measure
from real.calibrate.errors import CalibrationError
from real.calibrate.sizes import PROBE_BYTES, TINY, SizePlan, bulk_bytes, pair_figures, plan_sizes

PROBE_REPEATS = 5


def probe_sizes(
    rank_hosts: Sequence[str],
    *,
    factor: float,
    max_bytes: int,
    uplink_bytes: Optional[int] = None,
    repeats: int = PROBE_REPEATS,
    device: measure.Device = "cpu",
) -> SizePlan:
    """The sizes every rank measures with (call on every rank). The probe keeps each size's minimum
    over its repeats: interference only adds time, and an inflated α would inflate every size."""
    hosts = list(dict.fromkeys(rank_hosts))
    pairs = [(hosts[0], h) for h in hosts[1:]]
    size = min(PROBE_BYTES, max_bytes)
    while True:
        rows = measure.p2p(rank_hosts, (TINY, size), repeats, device=device, statistic="min", pairs=pairs)
        shared: list[Any] = [_decide(rows, size, factor, max_bytes, uplink_bytes) if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        outcome = shared[0]
        if isinstance(outcome, str):
            raise CalibrationError(outcome)
        if isinstance(outcome, SizePlan):
            return outcome
        size = int(outcome)  # a larger probe


def _decide(rows: Optional[list[Any]], size: int, factor: float, max_bytes: int, uplink_bytes: Optional[int]) -> Any:
    """A plan, the next probe size, or an error message (rank 0)."""
    try:
        figures = pair_figures(rows or [])
        if bulk_bytes(figures, factor, max_bytes) is None and size < max_bytes:
            return min(size * 16, max_bytes)
        return plan_sizes(figures, factor=factor, max_bytes=max_bytes, uplink_bytes=uplink_bytes)
    except CalibrationError as exc:
        return str(exc)
