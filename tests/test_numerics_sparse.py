"""Numerics mode with real sparse gradients: DeepFM's embedding rows and top-k with error feedback
flow through Zen and the sparse baselines (SparCML, OmniReduce included), which must give dense
all-reduce's parameters."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import star, synthetic  # noqa: E402

from policies.ops import SparseCoding  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.config import parse_config  # noqa: E402
from sim.numerics.sparse_rules import Pairs, reduce_pairs, scatter, split_by_owner  # noqa: E402
from sim.numerics.topk import ErrorFeedbackTopK  # noqa: E402

SPARSE_POLICIES = [
    {"name": "zen"},
    {"name": "zen", "label": "zen_contiguous", "partition": "contiguous"},
    {"name": "sparse_allgather"},
    {"name": "sparse_ps"},
    {"name": "sparcml"},
    {"name": "omnireduce"},
    {"name": "omnireduce", "label": "omnireduce_16", "block_size": 16},
]


def deepfm_config(policies: list[dict], momentum: float = 0.0, iterations: int = 20) -> dict:
    return {
        "name": "deepfm",
        "seed": 0,
        "iterations": iterations,
        "cluster": star(4),
        "workload": {"model": "deepfm", "batch_size": 32, "bucket_mb": 1},  # the DNN's buckets stay dense
        "numerics": {
            "model": "deepfm",
            "dataset": "synthetic",
            "zoo": {"features": 2000, "samples": 512},
            "global_batch": 128,
            "optimizer": {"name": "sgd", "lr": 0.1, "momentum": momentum},
            "eval_every": iterations,
        },
        "policies": policies,
        "simulation": {"trace": False},
    }


def test_sparse_schemes_give_dense_all_reduce_parameters_on_deepfm() -> None:
    """20 iterations, 4 workers: every replica (Zen, all-gather, SparCML, OmniReduce) or the servers'
    model (sparse PS) equals dense all-reduce's; the embedding buckets really were sparse."""
    result = simulate(parse_config(deepfm_config([{"name": "ring"}, {"name": "ps"}, *SPARSE_POLICIES])))
    runs = {run.label: run for run in result.runs}
    reference = runs["ring"].parameters
    for label in ("zen", "zen_contiguous", "sparse_allgather", "sparcml", "omnireduce", "omnireduce_16"):
        np.testing.assert_allclose(runs[label].parameters, reference, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(runs["sparse_ps"].consensus, runs["ring"].consensus, rtol=1e-5, atol=1e-7)
    ops = result.ops[result.ops["rank"] == -1]
    zen = ops[ops.policy == "zen"]
    assert {"AllToAll", "AllGather", "AllReduce"} <= set(zen.kind)
    sparse = zen[zen.kind == "AllToAll"]
    assert (sparse.wire_bytes < 0.05 * 3 * sparse["nbytes"]).all()  # far below the dense all-to-all's


def test_sparse_pulls_refuse_an_optimizer_that_changes_untouched_rows() -> None:
    result = simulate(parse_config(deepfm_config([{"name": "sparse_ps"}], momentum=0.9, iterations=2)))
    status = result.summary.status[0]
    assert status.startswith("failed") and "momentum: 0" in status and "got name: sgd, momentum: 0.9" in status


def test_sparse_rules_reduce_like_a_mean() -> None:
    g = torch.Generator().manual_seed(0)
    dense = [torch.randn(50, generator=g) * (torch.rand(50, generator=g) < 0.3) for _ in range(3)]
    coding = SparseCoding("hash")
    pairs = [Pairs.of(x) for x in dense]
    sent = [split_by_owner(p, coding, 3, 50) for p in pairs]
    owned = [reduce_pairs([sent[i][j] for i in range(3)], 50, 3) for j in range(3)]
    torch.testing.assert_close(scatter(owned, 50, torch.float32), torch.stack(dense).mean(0))
    torch.testing.assert_close(scatter([reduce_pairs(pairs, 50, 3)], 50, torch.float32), torch.stack(dense).mean(0))


def test_error_feedback_keeps_what_top_k_holds_back() -> None:
    topk = ErrorFeedbackTopK([10_000, 100], density=0.01, dense_below=4096)
    g = torch.Generator().manual_seed(1)
    grads = [torch.randn(10_100, generator=g) for _ in range(5)]
    sent_total = torch.zeros(10_100)
    for grad in grads:
        sent = topk(grad)
        assert int((sent[:10_000] != 0).sum()) == 100  # k = 1% of the large tensor
        assert bool((sent[10_000:] == grad[10_000:] + 0).all())  # the small tensor passes whole
        sent_total += sent
    assert topk.residual is not None
    torch.testing.assert_close(sent_total + topk.residual, torch.stack(grads).sum(0), rtol=1e-5, atol=1e-5)


def digits_config(seed: int, topk: float | None) -> dict:
    raw = synthetic(star(4), [{"name": "zen"}], gradient_mb=1, compute_ms=1, iterations=600, seed=seed)
    if topk is not None:
        raw["workload"]["sparsity"] = {"topk": topk}
    raw["numerics"] = {
        "model": "mlp",
        "hidden": [128, 128],
        "global_batch": 64,
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
        "eval_every": 600,
    }
    return raw


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_top_k_one_percent_with_error_feedback_ends_within_a_point_of_dense(seed: int) -> None:
    """Digits MLP (64-128-128-10; its two large weight matrices keep 1%), 600 iterations."""
    dense = simulate(parse_config(digits_config(seed, None))).summary.final_accuracy[0]
    sparse = simulate(parse_config(digits_config(seed, 0.01))).summary.final_accuracy[0]
    assert sparse >= dense - 0.01
