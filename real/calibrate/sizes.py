"""Message sizes chosen from a probe (pure; no torch).

A probe times a tiny message (α) and a probe-sized one between a few host pairs. The bulk size n
is then the smallest power of two with n/B ≥ `factor`·α on every probed pair, clamped to
[`MIN_BULK`, `max_bytes`]: large enough that the fits read bandwidth rather than latency (the
rack-egress fit refuses times under four latencies), small enough to stay quick on slow links.
The point-to-point and collective ladders keep two tiny sizes for the intercept and three within
16x of the bulk size for the slope (`figures.fit_line`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from real.calibrate.errors import CalibrationError
from real.calibrate.rows import PairSample

MIN_BULK = 1 << 22  # 4 MiB: a token-bucket burst (64 KiB) and TCP's ramp-up stay small beside it
TINY = 8  # the probe's latency message
PROBE_BYTES = 1 << 20  # the probe's first bandwidth message
READABLE = 0.1  # a bandwidth term under this share of α is lost in the latency: probe larger


@dataclass(frozen=True)
class SizePlan:
    """The sizes every measurement uses, the same on every rank."""

    p2p: tuple[int, ...]
    collective: tuple[int, ...]
    uplink: int
    bulk: int  # the probed bulk size the ladders end at
    latency_s: Optional[float] = None  # the probe's worst pair, for the log
    bytes_per_s: Optional[float] = None


def ladder(bulk: int, small: Sequence[int]) -> tuple[int, ...]:
    """`small` sizes up to `bulk`, then bulk/16, bulk/4 and bulk, ascending and distinct."""
    return tuple(sorted({n for n in (*small, bulk >> 4, bulk >> 2, bulk) if 1 <= n <= bulk}))


def p2p_ladder(bulk: int) -> tuple[int, ...]:
    return ladder(bulk, (TINY, 1 << 10, 1 << 14))


def collective_ladder(bulk: int) -> tuple[int, ...]:
    return ladder(bulk, (1 << 12, 1 << 16))


def pair_figures(rows: Sequence[PairSample]) -> dict[tuple[str, str], tuple[float, Optional[float]]]:
    """Per probed pair: (α, B), α the smallest size's one-way time and B from the largest size's
    extra time over it; B None when that extra time is under `READABLE`·α (unreadable)."""
    by_pair: dict[tuple[str, str], dict[int, float]] = {}
    for r in rows:
        by_pair.setdefault((r.src_host, r.dst_host), {})[r.nbytes] = r.seconds
    figures: dict[tuple[str, str], tuple[float, Optional[float]]] = {}
    for pair, times in by_pair.items():
        small, large = min(times), max(times)
        if small == large:
            raise CalibrationError(f"probe {pair[0]}->{pair[1]}: needs two message sizes, got {small} bytes only")
        alpha, extra = times[small], times[large] - times[small]
        figures[pair] = (alpha, (large - small) / extra if extra > READABLE * alpha else None)
    if not figures:
        raise CalibrationError("probe: no host pair measured; calibration needs two hosts")
    return figures


def bulk_bytes(
    figures: dict[tuple[str, str], tuple[float, Optional[float]]], factor: float, max_bytes: int
) -> Optional[int]:
    """The bulk size for these pair figures, or None when some pair's bandwidth was unreadable."""
    if any(bw is None for _, bw in figures.values()):
        return None
    need = max(factor * alpha * bw for alpha, bw in figures.values() if bw is not None)
    n = 1 << max(0, math.ceil(math.log2(max(need, 1.0))))
    return max(min(MIN_BULK, max_bytes), min(n, max_bytes))


def plan_sizes(
    figures: dict[tuple[str, str], tuple[float, Optional[float]]],
    *,
    factor: float,
    max_bytes: int,
    uplink_bytes: Optional[int] = None,
) -> SizePlan:
    """Every measurement's sizes; an unreadable bandwidth (a probe too small) takes `max_bytes`."""
    bulk = bulk_bytes(figures, factor, max_bytes)
    bulk = max_bytes if bulk is None else bulk
    alpha = max(a for a, _ in figures.values())
    rates = [bw for _, bw in figures.values() if bw is not None]
    return SizePlan(
        p2p=p2p_ladder(bulk),
        collective=collective_ladder(bulk),
        uplink=uplink_bytes or bulk,
        bulk=bulk,
        latency_s=alpha,
        bytes_per_s=min(rates) if rates else None,
    )
