"""The cost estimate of `powersgd` (`sim.estimate.powersgd`, `sim.estimate.counts`): its all-reduces and local
ops counted by hand from policies/powersgd.py's program, against the estimate and against what the engine issues."""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

import pytest
from helpers import synthetic

import sim.engine.launches
from policies.powersgd import PowerSGDSettings
from sim.api import simulate
from sim.config import parse_config
from sim.estimate.cost import estimate
from sim.estimate.powersgd import compressed_step

WORKERS, BUCKETS, ITERATIONS = 4, 3, 5
STAR = {"topology": "star", "hosts": WORKERS, "gpus_per_host": 1, "nic_gbps": 25}


def config(**settings: Any) -> dict[str, Any]:
    """4 workers, 5 iterations; 3 buckets of the synthetic model, each one 1581 x 1581 matrix and 439 biases."""
    data = synthetic(STAR, [{"name": "powersgd", **settings}], 30.0, compute_ms=5, iterations=ITERATIONS)
    data["workload"].update(bucket_mb=10.0, synthetic_layers=BUCKETS)
    # every worker runs, so that its local ops are counted (host symmetry would run host 0's alone:
    # tests/test_estimate_symmetric.py counts that case)
    data["simulation"]["host_symmetry"] = "off"
    return data


def test_a_compressed_step_is_counted_from_the_buckets_tensors() -> None:
    # rank 1, rate 2: a 64 x 32 matrix is factored ((64 + 32) * 2 < 2048), a vector of 32 is not (33 * 2 >= 32),
    # an 8 x 8 matrix is (16 * 2 < 64). Buckets: matrix + vector, vector alone, matrix alone.
    shapes = (((64, 32), (32,)), ((16,),), ((8, 8),))
    step = compressed_step(PowerSGDSettings(), shapes, 3)
    # 3 all-reduces a bucket; empty: the second bucket's P and Q, the third's rest
    assert (step.all_reduces, step.empty, step.draws) == (9, 3, 2)
    # 3 Combines a bucket; 5 factor ops in the two buckets with a matrix; Pack and Unpack in the two with a rest
    assert step.local_ops == 3 * 3 + 5 * 2 + 2 * 2
    assert compressed_step(PowerSGDSettings(error_feedback=False), shapes, 3).local_ops == 5 * 2 + 2 * 2


def test_shapes_unknown_count_every_bucket_as_factoring_and_keeping_a_rest() -> None:
    step = compressed_step(PowerSGDSettings(), (), 4)
    assert (step.all_reduces, step.empty, step.local_ops, step.draws) == (12, 0, 4 * 10, 4)


@pytest.mark.parametrize("warmup, iterations", [(0, 5), (1, 5), (4, 5), (5, 5), (9, 5), (2, 40)])
def test_collectives_are_warm_up_rings_then_three_all_reduces_a_bucket(warmup: int, iterations: int) -> None:
    data = config(warmup_steps=warmup)
    data["iterations"] = iterations
    (row,) = estimate(parse_config(data)).policies
    warm = min(warmup, iterations)
    assert row.collectives == BUCKETS * (warm + 3 * (iterations - warm))


def hand_ops(error_feedback: bool, factored: bool, kept: bool, draws_every_step: bool, warmup: int) -> int:
    """Local ops of every worker over the run by the program's text: per bucket and compressed step 3 Combines
    (error feedback), 5 factor ops (a matrix factored), Pack and Unpack (a tensor kept), and a RandomFill of Q
    (a matrix factored) at the first compressed step or at every one."""
    later = ITERATIONS - warmup
    per_step = 3 * error_feedback + 5 * factored + 2 * kept
    fills = factored * (later if draws_every_step else min(later, 1))
    return WORKERS * BUCKETS * (later * per_step + fills)


@pytest.mark.parametrize(
    "settings, factored, kept",
    [
        ({}, True, True),
        ({"error_feedback": False}, True, True),
        ({"warm_start": False}, True, True),
        ({"warmup_steps": 2}, True, True),
        ({"min_compression_rate": 0}, True, False),  # every tensor factored: Pack and Unpack move nothing
        ({"min_compression_rate": 1e6}, False, True),  # nothing factored: the factor ops move nothing
    ],
)
def test_the_engine_issues_the_local_ops_counted_by_hand(
    settings: dict[str, Any], factored: bool, kept: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    issued: Counter[str] = Counter()
    local = sim.engine.launches.Launches.local

    def counted(self: Any, rank: int, step: int, op: Any, bucket: Optional[int]) -> Any:
        event = local(self, rank, step, op, bucket)
        issued[type(op).__name__] += event is not None  # a timeout, or none for an op that takes no time
        return event

    monkeypatch.setattr(sim.engine.launches.Launches, "local", counted)
    data = config(**settings)
    result = simulate(parse_config(data))
    assert not result.errors
    s = PowerSGDSettings(**settings)
    expected = hand_ops(s.error_feedback, factored, kept, not s.warm_start, s.warmup_steps)
    assert sum(issued.values()) == expected, issued
    # what the estimate counts for the same program
    step = compressed_step(s, _shapes(data), BUCKETS)
    later = ITERATIONS - s.warmup_steps
    draws = step.draws * (later if not s.warm_start else min(later, 1))
    assert WORKERS * (later * step.local_ops + draws) == expected


def _shapes(data: dict[str, Any]) -> Any:
    from sim.catalog.gpus import get_gpu
    from sim.compute.workload import compute_plan

    c = parse_config(data)
    return compute_plan(c.workload, get_gpu(c.cluster.gpu)).bucket_shapes


def test_the_estimate_adds_one_event_per_local_op() -> None:
    """Without warm start Q is drawn at every compressed step, not only the first: 4 more RandomFills per worker
    and bucket over 5 compressed steps; error feedback's 3 Combines per worker, bucket and compressed step."""
    events = {name: estimate(parse_config(config(**s))).events for name, s in
              (("default", {}), ("fresh", {"warm_start": False}), ("plain", {"error_feedback": False}))}  # fmt: skip
    assert events["fresh"] - events["default"] == pytest.approx(WORKERS * BUCKETS * (ITERATIONS - 1))
    assert events["default"] - events["plain"] == pytest.approx(3 * WORKERS * BUCKETS * ITERATIONS)
