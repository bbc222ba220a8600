"""Compute times: jitter streams per worker, slow workers, compute stragglers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import star, synthetic

from sim.compute.durations import ComputeModel, lognormal_factors
from sim.config import parse_config


def model(jitter: float, slow: list | None = None, seed: int = 0, world: int = 4) -> ComputeModel:
    cfg = synthetic(star(world), [{"name": "ring"}], 10, jitter=jitter, seed=seed)
    if slow:
        cfg["faults"] = {"slow_workers": slow}
    return ComputeModel(parse_config(cfg), world)


def test_lognormal_factors_have_mean_one_and_the_cv() -> None:
    f = lognormal_factors(0.1, 100_000, np.random.default_rng(5))
    assert (f > 0).all()
    assert f.mean() == pytest.approx(1.0, abs=0.002)
    assert f.std() / f.mean() == pytest.approx(0.1, rel=0.02)


def test_no_jitter_is_exactly_one() -> None:
    m = model(0.0)
    assert [m.iteration_factor(r) for r in range(4)] == [1.0] * 4


def test_each_worker_has_its_own_reproducible_stream() -> None:
    """Worker 2's k-th factor does not depend on how many factors other workers drew."""
    a, b = model(0.2, seed=7), model(0.2, seed=7)
    for _ in range(300):  # worker 0 runs far ahead in `a` (an ASP fast worker), not in `b`
        a.iteration_factor(0)
    assert [a.iteration_factor(2) for _ in range(5)] == [b.iteration_factor(2) for _ in range(5)]
    assert [model(0.2, seed=8).iteration_factor(2) for _ in range(1)] != [model(0.2, seed=7).iteration_factor(2)]


def test_slow_workers_multiply() -> None:
    m = model(0.0, slow=[{"ranks": [1, 3], "compute_factor": 2.0}, {"ranks": [3], "compute_factor": 1.5}])
    assert [m.iteration_factor(r) for r in range(4)] == [1.0, 2.0, 1.0, 3.0]


def test_stragglers_stretch_segments_and_return_exactly() -> None:
    m = model(0.0)
    m.straggle([2], 3.0, on=True)
    m.straggle([2], 0.7, on=True)
    assert m.segment(2, 1.0, 1.0) == pytest.approx(2.1) and m.segment(1, 1.0, 1.0) == 1.0
    m.straggle([2], 3.0, on=False)
    m.straggle([2], 0.7, on=False)
    assert m.segment(2, 1.0, 1.0) == 1.0  # exactly nominal again, no float residue


def test_slow_worker_rank_must_exist() -> None:
    with pytest.raises(ValueError, match="rank 9 does not exist"):
        model(0.0, slow=[{"ranks": [9], "compute_factor": 2.0}])
