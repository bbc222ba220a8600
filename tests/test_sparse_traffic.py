"""Message sizes of sparse ops from real index sets (sim/compute/sparse_traffic.py), and load balance."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import star, synthetic

from policies.ops import SparseCoding
from sim.api import simulate
from sim.compute.sparse_traffic import (
    SparseTraffic,
    exchange_matrix,
    gather_sizes,
    hash_owner,
    message_bytes,
    owner_of,
    received_imbalance,
)
from sim.compute.sparsity import BucketLayout, IndexSets, Segment
from sim.config import parse_config


def traffic(*segments: Segment, seed: int = 0) -> SparseTraffic:
    return SparseTraffic(IndexSets((BucketLayout(segments, 4),), seed))


def test_owners_hash_spread_and_contiguous_ranges() -> None:
    rows = np.arange(1_000_000)
    counts = np.bincount(hash_owner(rows, 16), minlength=16)
    assert counts.max() / counts.mean() < 1.01
    assert owner_of(np.array([0, 249, 250, 999]), "contiguous", 4, 1000).tolist() == [0, 0, 1, 3]
    assert owner_of(rows[:5], "none", 4, 1000).tolist() == [0] * 5
    assert np.array_equal(hash_owner(rows[:100], 7), hash_owner(rows[:100], 7))  # a pure function


def test_message_bytes_list_bitmap_and_auto() -> None:
    values, rows = np.array([400.0, 4000.0]), np.array([100, 1000])
    share = 16_000  # a bitmap of 2,000 bytes
    assert message_bytes(values, rows, share, SparseCoding("hash", "list", 4)).tolist() == [800.0, 8000.0]
    assert message_bytes(values, rows, share, SparseCoding("hash", "list", 8)).tolist() == [1200.0, 12000.0]
    assert message_bytes(values, rows, share, SparseCoding("hash", "bitmap")).tolist() == [2400.0, 6000.0]
    assert message_bytes(values, rows, share, SparseCoding("hash", "auto")).tolist() == [800.0, 6000.0]


def test_census_counts_every_row_once_and_the_union_at_most_once() -> None:
    seg = Segment("w", 0, 200_000, 1, "topk", k=2_000, shared=1_000)
    dense = Segment("b", 200_000, 100, 1)
    t = traffic(seg, dense)
    members = (0, 1, 2, 3)
    census = t.census(0, 0, members, "hash", 4)
    sizes = [len(t.sets.rows(0, 0, 0, r)) + 100 for r in members]  # type: ignore[arg-type]
    assert census.rows.sum(axis=1).tolist() == sizes
    assert np.allclose(census.values, 4.0 * census.rows)
    union = len(np.unique(np.concatenate([t.sets.rows(0, 0, 0, r) for r in members]))) + 100  # type: ignore[list-item]
    assert census.union_rows.sum() == union
    assert census.share == -(-200_100 // 4)
    assert t.census(0, 0, members, "hash", 4) is census  # cached per (step, bucket, members, partition)


def test_exchange_and_gather_sizes_follow_the_census() -> None:
    t = traffic(Segment("w", 0, 100_000, 1, "topk", k=5_000))
    census = t.census(0, 0, (0, 1, 2), "hash", 3)
    coding = SparseCoding("hash", "list", 4)
    sizes = exchange_matrix(census, coding)
    assert np.all(np.diag(sizes) == 0)
    assert sizes[0, 1] == census.values[0, 1] + 4 * census.rows[0, 1]
    assert gather_sizes(census, coding).tolist() == (census.union_values + 4 * census.union_rows).tolist()
    whole = t.census(0, 0, (0, 1, 2), "none", 1)
    assert gather_sizes(whole, SparseCoding("none", "list")).tolist() == (8 * whole.rows[:, 0]).tolist()


def test_received_imbalance() -> None:
    assert received_imbalance(np.array([1.0, 1.0, 1.0])) == 1.0
    assert received_imbalance(np.array([3.0, 1.0, 2.0])) == 1.5
    assert np.isnan(received_imbalance(np.zeros(3)))


def test_hash_partitioning_balances_zipf_skewed_rows_where_contiguous_does_not() -> None:
    """Zipf(1.1) lookups with the popular rows first (real index sets, 16 workers): the busiest
    owner of Zen's all-to-all receives at most 1.1x the mean with hashing, over 2x with ranges."""
    policies = [{"name": "zen", "label": "hash"}, {"name": "zen", "label": "contiguous", "partition": "contiguous"}]
    raw = synthetic(star(16), policies, gradient_mb=64, iterations=3)
    raw["workload"]["sparsity"] = {"lookups": 20_000, "embedding_dim": 16, "zipf_s": 1.1, "hot_rows": "first"}
    result = simulate(parse_config(raw))
    a2a = result.ops[(result.ops["rank"] == -1) & (result.ops.kind == "AllToAll")]
    worst = a2a.groupby("policy").imbalance.max()
    assert worst["hash"] <= 1.1
    assert worst["contiguous"] > 2
    comm = result.summary.set_index("policy").mean_comm_s
    assert comm["hash"] < comm["contiguous"] / 2


def test_wire_bytes_of_a_sparse_collective_are_its_messages() -> None:
    raw = synthetic(star(4), [{"name": "sparse_allgather"}], gradient_mb=4)
    raw["workload"]["sparsity"] = {"topk": 0.01}
    result = simulate(parse_config(raw))
    row = result.ops[(result.ops["rank"] == -1) & (result.ops.kind == "AllGather")].iloc[0]
    k = 0.01 * 1_000_000
    assert row["wire_bytes"] == pytest.approx(3 * 4 * k * 8, rel=0.05)  # each of 4 sends ~k rows to 3 others
    assert row["nbytes"] == pytest.approx(4e6)  # the dense size the op names
