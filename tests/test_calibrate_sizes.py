"""Calibration's adaptive message sizes: from a probe's α and B to the ladders every measurement
uses, and the probe's own decisions (grow while bandwidth is unreadable, or one-line refusals)."""

from __future__ import annotations

import pytest

from real.calibrate.errors import CalibrationError
from real.calibrate.rows import PairSample
from real.calibrate.sizes import (
    MIN_BULK,
    PROBE_BYTES,
    TINY,
    bulk_bytes,
    collective_ladder,
    p2p_ladder,
    pair_figures,
    plan_sizes,
)


def probe_rows(alpha: float, bytes_per_s: float, size: int = PROBE_BYTES, pairs=(("a", "b"),)) -> list[PairSample]:
    return [
        PairSample(src, dst, n, alpha + n / bytes_per_s, 2 * (alpha + n / bytes_per_s))
        for src, dst in pairs
        for n in (TINY, size)
    ]


def test_the_bulk_size_makes_bandwidth_dominate_latency_by_the_factor() -> None:
    alpha, bw = 100e-6, 2e9  # loopback-like: α·B = 200 kB
    figures = pair_figures(probe_rows(alpha, bw))
    ((a, b),) = figures.values()
    assert a == pytest.approx(alpha + TINY / bw) and b == pytest.approx(bw, rel=1e-6)
    n = bulk_bytes(figures, 50, 1 << 30)
    assert n == 1 << 24  # 50 x 200 kB = 10 MB, rounded up to a power of two
    assert n / bw >= 50 * alpha and (n // 2) / bw < 50 * alpha
    assert bulk_bytes(figures, 50, 1 << 23) == 1 << 23  # capped by max_bytes


def test_slow_links_keep_the_floor_and_the_worst_pair_sets_the_size() -> None:
    emulated = pair_figures(probe_rows(130e-6, 25e6))  # 200 Mbit/s: α·B is 3 kB
    assert bulk_bytes(emulated, 50, 1 << 28) == MIN_BULK  # a shaper's burst stays small beside 4 MiB
    assert bulk_bytes(emulated, 50, 1 << 20) == 1 << 20  # max_bytes below the floor wins
    two = pair_figures(probe_rows(10e-6, 1e9, pairs=[("a", "b")]) + probe_rows(1e-3, 1e9, pairs=[("a", "c")]))
    assert bulk_bytes(two, 50, 1 << 30) == 1 << 26  # the slow-latency pair: 50 x 1 MB


def test_an_unreadable_bandwidth_asks_for_a_larger_probe() -> None:
    rows = probe_rows(1e-3, 1e12)  # 1 MiB in a microsecond beside a millisecond of latency
    figures = pair_figures(rows)
    assert list(figures.values())[0][1] is None and bulk_bytes(figures, 50, 1 << 30) is None
    plan = plan_sizes(figures, factor=50, max_bytes=1 << 25)
    assert plan.bulk == 1 << 25 and plan.bytes_per_s is None  # still unreadable at the cap: the cap


def test_ladders_keep_two_tiny_sizes_and_three_near_the_bulk() -> None:
    assert p2p_ladder(1 << 22) == (8, 1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22)
    assert collective_ladder(1 << 22) == (1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 22)
    assert p2p_ladder(1 << 12) == (8, 1 << 8, 1 << 10, 1 << 12)
    plan = plan_sizes(pair_figures(probe_rows(100e-6, 2e9)), factor=50, max_bytes=1 << 30, uplink_bytes=1 << 20)
    assert plan.uplink == 1 << 20 and plan.p2p[-1] == plan.collective[-1] == plan.bulk == 1 << 24


def test_a_probe_without_two_sizes_or_pairs_is_one_line() -> None:
    with pytest.raises(CalibrationError, match="probe: no host pair measured"):
        pair_figures([])
    with pytest.raises(CalibrationError, match="probe a->b: needs two message sizes"):
        pair_figures([PairSample("a", "b", 8, 1e-4, 2e-4)])


def test_rank_zero_decides_grow_plan_or_refuse() -> None:
    pytest.importorskip("torch")
    from real.calibrate.probe import _decide
    from real.calibrate.sizes import SizePlan

    unreadable = probe_rows(1e-3, 1e12)
    assert _decide(unreadable, PROBE_BYTES, 50, 1 << 30, None) == 16 * PROBE_BYTES
    assert isinstance(_decide(unreadable, 1 << 30, 50, 1 << 30, None), SizePlan)  # at the cap: plan with it
    assert isinstance(_decide(probe_rows(100e-6, 2e9), PROBE_BYTES, 50, 1 << 30, None), SizePlan)
    assert _decide([], PROBE_BYTES, 50, 1 << 30, None) == "probe: no host pair measured; calibration needs two hosts"
