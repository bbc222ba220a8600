"""Index sets of sparse gradients (sim/compute/sparsity.py): layouts from the zoo, top-k and lookup draws."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import star, synthetic

from sim.catalog.gpus import get_gpu
from sim.compute.sparse_costs import topk_aggregated_density
from sim.compute.sparsity import BucketLayout, IndexSets, Segment, bernoulli_rows, distinct, power_law
from sim.compute.workload import compute_plan
from sim.config import parse_config


def plan_of(workload: dict):  # type: ignore[no-untyped-def]
    raw = synthetic(star(4), [{"name": "ring"}])
    raw["workload"] = workload
    cfg = parse_config(raw)
    return compute_plan(cfg.workload, get_gpu("V100"))


def segments(plan) -> dict[str, Segment]:  # type: ignore[no-untyped-def]
    return {seg.name: seg for layout in plan.layouts for seg in layout.segments}


def test_zoo_tables_are_lookups_and_the_rest_dense() -> None:
    deepfm = segments(plan_of({"model": "deepfm", "batch_size": 100}))
    emb = deepfm["embedding"]
    assert (emb.kind, emb.rows, emb.width, emb.lookups, emb.hot_rows) == ("lookup", 10**6, 10, 3900, "scattered")
    assert deepfm["dnn.0"].kind == "dense"
    bert = segments(plan_of({"model": "bert_base", "batch_size": 2}))
    assert bert["embeddings.word"].kind == "lookup" and bert["embeddings.word"].lookups == 256
    assert bert["embeddings.position"].space == 128  # positions 0..127 of every 128-token sequence
    assert bert["embeddings.token_type"].kind == "dense"  # 2 x 768 values: below dense_below
    gpt2 = segments(plan_of({"model": "gpt2", "batch_size": 1}))
    assert gpt2["wte"].kind == "dense"  # tied to the LM head, whose gradient touches every row


def test_topk_sparsifies_tensors_above_dense_below_only() -> None:
    segs = segments(plan_of({"model": "resnet50", "sparsity": {"topk": 0.01}}))
    big = segs["conv1"] if "conv1" in segs else max(segs.values(), key=lambda s: s.rows)
    assert big.kind == "topk" and big.k == int(np.ceil(0.01 * big.rows))
    small = [s for s in segs.values() if s.rows <= 4096]
    assert small and all(s.kind == "dense" for s in small)
    assert all(layout.sparse for layout in plan_of({"model": "resnet50", "sparsity": {"topk": 0.01}}).layouts)
    assert not any(layout.sparse for layout in plan_of({"model": "resnet50"}).layouts)


def test_embeddings_false_makes_tables_dense() -> None:
    plan = plan_of({"model": "deepfm", "sparsity": {"embeddings": False}})
    assert not any(layout.sparse for layout in plan.layouts)


def topk_sets(rows: int, k: int, shared: int, workers: int, seed: int = 0, step: int = 0) -> list[np.ndarray]:
    layout = BucketLayout((Segment("w", 0, rows, 1, "topk", k=k, shared=shared),), 4)
    sets = IndexSets((layout,), seed)
    return [sets.rows(step, 0, 0, r) for r in range(workers)]  # type: ignore[misc]


def test_topk_sets_have_k_rows_on_average_and_share_the_common_part() -> None:
    rows, k, workers = 1_000_000, 10_000, 16
    sets = topk_sets(rows, k, k // 2, workers)
    sizes = np.array([len(s) for s in sets])
    assert abs(sizes.mean() - k) < 4 * np.sqrt(k / workers)
    assert all(len(np.unique(s)) == len(s) and s.min() >= 0 and s.max() < rows for s in sets)
    common = set(sets[0].tolist()).intersection(*map(set, (s.tolist() for s in sets[1:])))
    assert len(common) >= k // 2
    union = len(np.unique(np.concatenate(sets)))
    expected = topk_aggregated_density(k / rows, workers, 0.5) * rows
    assert union == pytest.approx(expected, rel=0.01)


def test_index_sets_are_deterministic_and_change_with_step_seed_and_rank() -> None:
    a = topk_sets(100_000, 1000, 0, 2)
    assert all(np.array_equal(x, y) for x, y in zip(a, topk_sets(100_000, 1000, 0, 2)))
    assert not np.array_equal(a[0], a[1])
    assert not np.array_equal(a[0], topk_sets(100_000, 1000, 0, 1, seed=1)[0])
    assert not np.array_equal(a[0], topk_sets(100_000, 1000, 0, 1, step=1)[0])


def test_power_law_puts_popular_ids_first_and_uniform_spreads_them() -> None:
    rng = np.random.default_rng(0)
    skewed = power_law(rng, 10_000, 1.1, 100_000)
    uniform = power_law(rng, 10_000, 0.0, 100_000)
    assert skewed.min() >= 0 and skewed.max() < 10_000
    assert (skewed < 100).mean() > 0.5  # the first 1% of ids take most lookups
    assert (uniform < 100).mean() == pytest.approx(0.01, abs=0.003)


def test_scattered_hot_rows_are_a_bijection_of_the_first() -> None:
    def lookup(hot: str) -> np.ndarray:
        seg = Segment("t", 0, 5000, 4, "lookup", lookups=20_000, space=5000, zipf_s=1.1, hot_rows=hot)
        return IndexSets((BucketLayout((seg,), 4),), 3).rows(0, 0, 0, 0)  # type: ignore[return-value]

    first, scattered = lookup("first"), lookup("scattered")
    assert len(first) == len(scattered)  # the same draws, relabelled one to one
    assert np.median(first) < np.median(scattered)


def test_bernoulli_rows_and_distinct() -> None:
    rng = np.random.default_rng(1)
    rows = bernoulli_rows(rng, 1_000_000, 0.01)
    assert np.all(np.diff(rows) > 0) and rows[-1] < 1_000_000
    assert len(rows) == pytest.approx(10_000, rel=0.05)
    assert len(bernoulli_rows(rng, 10, 1.0)) == 10 and len(bernoulli_rows(rng, 10, 0.0)) == 0
    ids = np.array([5, 1, 5, 3, 1])
    assert distinct(ids, 100).tolist() == [1, 3, 5] == distinct(ids, 6).tolist()
