"""OmniReduce (policies/omnireduce.py) on the simulator against its closed form, computed here from
the drawn index sets: the blocks of k values holding a non-zero, each k b_v bytes plus a b_i id."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import GBPS, US, star, synthetic
from test_policies import BUCKET, program, view

from policies import ModelInfo, SettingError
from policies.ops import AllGather, AllToAll, Density, Group, SparseCoding
from policies.registry import create
from sim.api import prepare, simulate
from sim.compute.sparsity import IndexSets
from sim.config import parse_config

B = 25 * GBPS
ALPHA = 12 * US
TOLERANCE = 0.02
BV, BI = 4, 4


def test_omnireduce_streams_blocks_to_range_owning_aggregators_and_back() -> None:
    policy = create("omnireduce", {"block_size": 64})
    policy.bind(view(2, 2, 2), ModelInfo(32e6, (8e6,) * 4, (False, False, True, False)))
    coding = SparseCoding("contiguous", "list", 4, block=64)
    world = Group.of(range(8))
    assert program(policy, "on_gradients", 0, 0, BUCKET) == [
        AllToAll(world, 8e6, density=Density.SPARSE, coding=coding),
        AllGather(world, 8e6, density=Density.SPARSE, coding=coding),
    ]
    assert create("omnireduce", {}).settings.block_size == 256


@pytest.mark.parametrize(
    "settings, field",
    [({"block_size": 0}, "block_size"), ({"block_size": 2.5}, "block_size"), ({"index_bytes": 3}, "index_bytes"),
     ({"aggregators": 2}, "aggregators")],
)  # fmt: skip
def test_bad_settings_name_the_field(settings: dict, field: str) -> None:
    with pytest.raises(SettingError) as err:
        create("omnireduce", settings)
    assert err.value.field == field


def run(n: int, raw_sparsity: dict, gradient_mb: float, block: int):  # type: ignore[no-untyped-def]
    raw = synthetic(star(n), [{"name": "omnireduce", "block_size": block}], gradient_mb=gradient_mb)
    raw["workload"]["sparsity"] = raw_sparsity
    config = parse_config(raw)
    _, plan = prepare(config)
    (layout,) = plan.layouts
    (seg,) = layout.segments
    sets = IndexSets(plan.layouts, config.seed)
    drawn = [sets.rows(0, 0, 0, r) for r in range(n)]
    ops = simulate(config).ops
    return drawn, seg.rows * seg.width, seg.width, ops[ops["rank"] == -1].set_index("kind")


def closed_form(drawn: list, n: int, values: int, width: int, k: int) -> tuple[np.ndarray, np.ndarray, list]:
    """(a2a[i, j] bytes i sends aggregator j, gather[j] bytes aggregator j sends each other worker, the
    workers' non-zero block ids). Aggregator j owns blocks [ceil(j N / n), ceil((j+1) N / n)) of N."""
    blocks = -(-values // k)
    size = np.full(blocks, k * BV)
    size[-1] = (values - (blocks - 1) * k) * BV
    bounds = [-(-j * blocks // n) for j in range(n + 1)]
    touched = [np.unique((rows[:, None] * width + np.arange(width)).ravel() // k) for rows in drawn]

    def per_owner(ids: np.ndarray) -> np.ndarray:
        return np.array([(size[ids[(ids >= lo) & (ids < hi)]] + BI).sum() for lo, hi in zip(bounds, bounds[1:])])

    a2a = np.array([per_owner(ids) for ids in touched], dtype=float)
    np.fill_diagonal(a2a, 0.0)
    return a2a, per_owner(np.unique(np.concatenate(touched))).astype(float), touched


def check(ops, a2a: np.ndarray, gather: np.ndarray, n: int, times: bool = True) -> None:  # type: ignore[no-untyped-def]
    assert ops.loc["AllToAll", "wire_bytes"] == pytest.approx(a2a.sum(), rel=1e-12)
    assert ops.loc["AllGather", "wire_bytes"] == pytest.approx((n - 1) * gather.sum(), rel=1e-12)
    if times:
        busiest = max(a2a.sum(axis=0).max(), a2a.sum(axis=1).max())
        assert ops.loc["AllToAll", "duration_s"] == pytest.approx(ALPHA + busiest / B, rel=TOLERANCE)
        busiest = max((n - 1) * gather.max(), (gather.sum() - gather).max())
        assert ops.loc["AllGather", "duration_s"] == pytest.approx(ALPHA + busiest / B, rel=TOLERANCE)


def test_top_k_blocks_match_the_closed_form() -> None:
    """d = 0.1% of 2M values in blocks of 256: a worker touches 1 - 0.999^256 = 23% of the blocks,
    the four together 64%; every touched block moves whole."""
    n, k = 4, 256
    drawn, values, width, ops = run(n, {"topk": 0.001}, 8.0, k)
    a2a, gather, touched = closed_form(drawn, n, values, width, k)
    blocks = -(-values // k)
    assert 0.2 < len(touched[0]) / blocks < 0.26
    check(ops, a2a, gather, n)


def test_embedding_rows_map_to_the_blocks_their_values_fall_in() -> None:
    """Rows 10 values wide in blocks of 64: a row may straddle two blocks, and both move."""
    n, k = 4, 64
    drawn, values, width, ops = run(n, {"lookups": 5_000, "embedding_dim": 10, "zipf_s": 1.1}, 40.0, k)
    assert width == 10
    a2a, gather, _ = closed_form(drawn, n, values, width, k)
    check(ops, a2a, gather, n, times=False)  # skewed rows: ranges are imbalanced, max-min is no closed form


def test_blocks_of_one_value_are_per_element_pairs() -> None:
    """block_size 1: a message is c (b_v + b_i) for c non-zero values, Zen's list form over ranges."""
    n, rows, d = 4, 1_000_000, 0.01
    drawn, values, width, ops = run(n, {"topk": d}, rows * BV / 1e6, 1)
    bounds = [-(-j * rows // n) for j in range(n + 1)]
    count = np.array([[np.count_nonzero((s >= lo) & (s < hi)) for lo, hi in zip(bounds, bounds[1:])] for s in drawn])
    union = np.unique(np.concatenate(drawn))
    held = np.array([np.count_nonzero((union >= lo) & (union < hi)) for lo, hi in zip(bounds, bounds[1:])])
    np.fill_diagonal(count, 0)
    assert ops.loc["AllToAll", "wire_bytes"] == count.sum() * (BV + BI)
    assert ops.loc["AllGather", "wire_bytes"] == (n - 1) * held.sum() * (BV + BI)


def test_when_every_block_is_touched_it_is_dense_traffic_plus_block_ids() -> None:
    """d = 30% in blocks of 256: no block escapes (0.7^256 ~ 1e-40), so each phase moves (n - 1) of
    the n ranges of values plus one id per block: 2 (n - 1) (M b_v + M / k b_i), ring's bytes + 1.6%."""
    n, k, rows = 4, 256, 1_000_000
    drawn, values, width, ops = run(n, {"topk": 0.3}, rows * BV / 1e6, k)
    a2a, gather, touched = closed_form(drawn, n, values, width, k)
    blocks = -(-rows // k)
    assert all(len(ids) == blocks for ids in touched)
    assert ops.wire_bytes.sum() == 2 * (n - 1) * (rows * BV + blocks * BI)
    check(ops, a2a, gather, n)


def test_a_block_size_beyond_any_tensor_is_refused_by_name() -> None:
    """A block of 2**31 values holds any 32-bit-indexed tensor; larger ones overflowed the traffic census
    (found by the config fuzzer: `block_size: 1e300` as an integer)."""
    from pydantic import ValidationError

    from policies.omnireduce import OmniReduce

    OmniReduce.Settings(block_size=2**31)
    with pytest.raises(ValidationError, match="block_size"):
        OmniReduce.Settings(block_size=10**300)
