"""Telling two means over seeds apart: 95% Student-t intervals that overlap or not, and the seeds that
would separate overlapping ones, checked on numbers worked by hand with a printed t table."""

from __future__ import annotations

import math

import pytest

from sim.experiments.seed_spread import interval, seeds_to_separate, separation

# Student's t, two-sided 95% (0.975 quantile), from a printed table: 2, 16 and 17 degrees of freedom
T2, T16, T17 = 4.303, 2.120, 2.110


def test_an_interval_is_the_mean_plus_minus_t_times_the_standard_error() -> None:
    found = interval([0.96, 0.97, 0.98])  # sd 0.01 by hand: sqrt((0.01² + 0 + 0.01²) / 2)
    assert found.mean == pytest.approx(0.97) and found.sd == pytest.approx(0.01)
    assert found.half == pytest.approx(T2 * 0.01 / math.sqrt(3), rel=1e-3)  # 0.02484
    assert found.seeds == 3 and found.known


def test_means_further_apart_than_both_half_widths_are_distinguishable() -> None:
    """0.97 and 0.91, each ± 0.0248: 0.06 apart > 0.0497, so the intervals do not overlap."""
    found = separation([0.96, 0.97, 0.98], [0.90, 0.91, 0.92])
    assert found.overlap is False and found.seeds_needed is None


def test_overlapping_means_say_how_many_seeds_would_separate_them() -> None:
    """0.97 and 0.96, each ± 0.0248: 0.01 apart, they overlap. With sd 0.01 at both, n seeds separate
    them once t(n-1) · 0.02 / √n < 0.01, i.e. t(n-1) / √n < 0.5: n = 17 gives 2.120 / 4.123 = 0.514,
    n = 18 gives 2.110 / 4.243 = 0.497, so 18 seeds."""
    assert T16 / math.sqrt(17) > 0.5 > T17 / math.sqrt(18)  # the hand derivation's two steps
    found = separation([0.96, 0.97, 0.98], [0.95, 0.96, 0.97])
    assert found.overlap is True and found.seeds_needed == 18


def test_what_cannot_be_told_is_said_so() -> None:
    one = separation([0.97], [0.91])  # one seed each: no spread, no interval
    assert one.overlap is None and one.seeds_needed is None and math.isnan(one.a.half)
    equal = separation([0.96, 0.98], [0.98, 0.96])  # equal means: no number of seeds separates them
    assert equal.overlap is True and equal.seeds_needed is None
    exact = separation([0.9, 0.9], [0.8, 0.8])  # no spread at all: intervals are points
    assert exact.overlap is False
    assert seeds_to_separate(1e-9, 1.0) is None  # beyond MAX_SEEDS
    with pytest.raises(ValueError, match="values: need at least one"):
        interval([])
