"""Which points of a sweep `syncsim check` validates, so that it answers in seconds whatever the sweep's size.

A point costs a few milliseconds to validate and estimate, so a 100,000-point sweep would take minutes. A
sweep of at most `FULL_POINTS` points is validated point by point. In a larger one, a point is a combination
of its axes' settings, and a field's own checks (type, range, allowed values) depend only on its setting: each
setting of every axis is validated once, beside the first point's other settings (at most `AXIS_SETTINGS`
settings in all: a longer axis gives evenly spaced ones, its first and last included). Rules that join fields
(e.g. `profile` with `model`) are then tried on the last point and `SAMPLE_POINTS` points drawn with a fixed
seed. The remaining points are validated when `syncsim sweep` builds them, and one that fails there gets its
row in `errors.csv` while the others run. The estimate of the whole sweep is the mean of at most
`ESTIMATED_POINTS` valid points' estimates times the number of points.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Optional

from sim.config import Config
from sim.experiments.sweep import Progress, Sweep, expand_at, shape

FULL_POINTS = 2_000  # a sweep up to this size is validated point by point (well under a second per 1,000)
AXIS_SETTINGS = 1_000  # settings validated across all axes of a larger sweep
SAMPLE_POINTS = 500  # points drawn at random (seed 0) for the rules that join fields
ESTIMATED_POINTS = 100  # valid points whose estimates give the sweep's mean
# bounds on a config whose every point is slow to validate or estimate (a large custom topology)
VALIDATE_BUDGET_S = 2.5
ESTIMATE_BUDGET_S = 1.0


@dataclass(frozen=True)
class SweepCheck:
    sweep: Sweep  # the validated points only
    total: int  # the sweep's number of points
    # axis settings validated beside the first point's others, and how many there are; None: the time
    # budget ran out before every chosen setting was
    settings: Optional[tuple[int, int]]
    wall_s: float  # estimated seconds of simulation for every valid point (before parallel processes)
    estimated: int  # valid points whose estimates that figure comes from

    @property
    def whole(self) -> bool:
        """Whether every point was validated."""
        return len(self.sweep.points) == self.total


def check_sweep(
    data: Any, progress: Optional[Progress] = None, estimate: Optional[Callable[[Config], float]] = None
) -> SweepCheck:
    """Validate the points `choose` picks of a sweep mapping, in its order until `VALIDATE_BUDGET_S` has
    passed, and estimate the whole sweep's cost from at most `ESTIMATED_POINTS` of the valid ones (within
    `ESTIMATE_BUDGET_S`); `estimate(config)` gives one point's wall seconds (default: `sim.estimate.cost`)."""
    lengths, total = shape(data)  # a sweep over the limit is refused here, before anything is imported or built
    indices, axis_points, settings = choose(lengths, total)
    made = expand_at(data, _until(indices, VALIDATE_BUDGET_S), len(indices), progress)
    if estimate is None:
        from sim.estimate.cost import estimate as cost

        def estimate(config: Config) -> float:
            return cost(config).wall_s

    sweep = Sweep(made.name, made.axes, sorted(made.points, key=lambda p: p.index))
    good = [p.config for p in sweep.points if p.config is not None]
    walls = [estimate(good[i]) for i in _until(_spread(len(good), ESTIMATED_POINTS), ESTIMATE_BUDGET_S)]
    mean = sum(walls) / len(walls) if walls else 0.0
    valid = len(good) if len(sweep.points) == total else total  # the points not validated counted as valid
    return SweepCheck(sweep, total, settings if len(made.points) >= axis_points else None, mean * valid, len(walls))


def choose(lengths: list[int], total: int) -> tuple[list[int], int, tuple[int, int]]:
    """The indices of the points to validate, most telling first: every point up to `FULL_POINTS`; else
    each axis's settings beside the first point's others, the last point, then a seeded sample. Also how
    many of those indices are needed to cover the axis settings, and how many settings they validate of
    how many the axes have."""
    if total <= FULL_POINTS:
        return list(range(total)), total, (sum(lengths), sum(lengths))
    stride = [math.prod(lengths[b + 1 :]) for b in range(len(lengths))]  # index = sum of setting x stride
    share = max(2, AXIS_SETTINGS // len(lengths))
    chosen: dict[int, None] = {}  # ordered, without repeats
    settings = 0
    for length, step in zip(lengths, stride):
        ks = _spread(length, share)
        settings += len(ks)
        chosen.update(dict.fromkeys(k * step for k in ks))
    axis_points = len(chosen)
    chosen[total - 1] = None
    chosen.update(dict.fromkeys(random.Random(0).sample(range(total), SAMPLE_POINTS)))
    return list(chosen), axis_points, (settings, sum(lengths))


def _until(items: list[int], budget_s: float) -> Iterator[int]:
    """`items` one by one until `budget_s` seconds have passed (the first always)."""
    deadline = time.monotonic() + budget_s
    for n, item in enumerate(items):
        if n and time.monotonic() > deadline:
            return
        yield item


def _spread(n: int, most: int) -> list[int]:
    """Up to `most` of 0..n-1, evenly spaced, first and last included (all of them when n <= most)."""
    if n <= most:
        return list(range(n))
    return sorted({round(i * (n - 1) / (most - 1)) for i in range(most)})
