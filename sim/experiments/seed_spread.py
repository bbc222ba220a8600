"""Whether two means over seeds can be told apart, and how many seeds would tell them apart.

The rule: each mean gets its 95% confidence interval, mean ± t · s / √n (Student's t with n - 1
degrees of freedom, s the seeds' sample standard deviation); two means are *distinguishable* when
their intervals do not overlap. Non-overlap is a stricter test than a two-sample t-test at the same
level, so "distinguishable" errs on the side of saying "not yet". Where they overlap, the seeds that
would separate them are the smallest n (the same at both points) for which t(n - 1) · (s_a + s_b) / √n
falls below the difference of the means, were the standard deviations to stay as measured: an
estimate to plan the next run with, not a promise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

LEVEL = 0.95  # the confidence of each interval
MAX_SEEDS = 10_000  # beyond this, "more seeds than anyone would run": no number is suggested


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its confidence interval; `half` is NaN with a single seed (no spread)."""

    mean: float
    sd: float  # sample standard deviation (n - 1), NaN with one seed
    half: float  # half-width of the interval
    seeds: int

    @property
    def known(self) -> bool:
        return not math.isnan(self.half)


@dataclass(frozen=True)
class Separation:
    """Two intervals and whether they overlap (None: one seed at either, nothing to judge by)."""

    a: Interval
    b: Interval
    overlap: Optional[bool]
    seeds_needed: Optional[int]  # per point, where they overlap and some count up to MAX_SEEDS would do


def t_quantile(seeds: int, level: float = LEVEL) -> float:
    """Student's t for a two-sided `level` interval of a mean over `seeds` values."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, seeds - 1))


def interval(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of `values` (one per seed) and its `level` confidence interval."""
    n = len(values)
    if n == 0:
        raise ValueError("values: need at least one seed's value")
    mean = math.fsum(values) / n
    if n == 1:
        return Interval(mean, math.nan, math.nan, 1)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return Interval(mean, sd, t_quantile(n, level) * sd / math.sqrt(n), n)


def separation(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> Separation:
    """Whether the means of `a` and `b` (one value per seed each) are distinguishable by the rule
    above, and if not, the seeds per point that would make them so."""
    first, second = interval(a, level), interval(b, level)
    if not (first.known and second.known):
        return Separation(first, second, None, None)
    gap = abs(first.mean - second.mean)
    overlap = gap <= first.half + second.half
    return Separation(first, second, overlap, seeds_to_separate(gap, first.sd + second.sd, level) if overlap else None)


def seeds_to_separate(gap: float, sd_sum: float, level: float = LEVEL) -> Optional[int]:
    """The smallest n >= 2 with t(n - 1) · sd_sum / √n < gap; None when none up to `MAX_SEEDS` is
    (equal means never separate)."""
    if gap <= 0:
        return None
    if sd_sum <= 0:
        return 2
    # t(n - 1) / √n falls as n grows, so the first n that clears the gap is found by bisection
    lo, hi = 2, MAX_SEEDS
    if t_quantile(hi, level) * sd_sum / math.sqrt(hi) >= gap:
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if t_quantile(mid, level) * sd_sum / math.sqrt(mid) < gap:
            hi = mid
        else:
            lo = mid + 1
    return lo
