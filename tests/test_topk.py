"""Top-k with error feedback (`policies/topk.py`): its program per bucket, its settings refused by name, its
iteration time against the all-gather closed form of k declared pairs on the ideal network, the bytes the
simulator, numerics mode and the real backend move (the same k pairs), error feedback and ratio 1 in numerics
mode, and the same object on gloo processes."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from helpers import star, synthetic
from test_launched_ops import memory_bandwidth
from test_local_sgd import ALPHA, bound, ring_allreduce

from policies.base import Bucket
from policies.ops import AllGather, AllReduce, Density, Encode, Group, SparseCoding
from policies.registry import available
from policies.tensors import GRADIENTS, Buffer, Codec
from policies.topk import TopK
from sim.api import simulate
from sim.cli import main
from sim.config import parse_config
from sim.errors import ConfigError

MB, GBPS = 1e6, 25e9 / 8
C = 0.05  # compute per step, s
LOGREG = 64 * 10 + 10  # the digits logistic regression's parameters: one bucket of this many values


def test_it_is_registered_and_declares_its_residual() -> None:
    assert available()["topk"] == "policies.topk:TopK"
    assert TopK().buffers() == (Buffer("residual"),)


def test_warm_up_all_reduces_then_each_bucket_is_encoded_and_gathered_as_declared_pairs() -> None:
    policy = bound(TopK(ratio=0.05, warmup_steps=2, index_bytes=8), world=2)  # type: ignore[arg-type]
    bucket, world = Bucket(0, 4e8, 1), Group((0, 1))
    assert list(policy.on_gradients(1, 1, bucket)) == [AllReduce(world, 4e8)]
    encode, gather = policy.on_gradients(1, 2, bucket)
    assert encode == Encode(GRADIENTS, Codec(topk=0.05), residual="residual")
    coding = SparseCoding("none", "list", 8, topk=0.05)
    assert gather == AllGather(world, 4e8, density=Density.SPARSE, coding=coding)
    assert list(policy.end_step(1, 2)) == [] and list(policy.begin_step(1, 2)) == []


@pytest.mark.parametrize(
    ("settings", "field", "allowed"),
    [
        ({"ratio": 0.0}, "ratio", "a fraction in (0, 1] (got 0)"),
        ({"ratio": 1.5}, "ratio", "a fraction in (0, 1] (got 1.5)"),
        ({"warmup_steps": -1}, "warmup_steps", "an integer from 0 to 10000000 (got -1)"),
    ],
)
def test_bad_settings_are_refused_by_name(settings: dict[str, Any], field: str, allowed: str) -> None:
    with pytest.raises(ConfigError, match=rf"^policies\[0\]\.{field}: allowed: {re.escape(allowed)}$"):
        parse_config(synthetic(star(2), [{"name": "topk", **settings}], 1.0))


def test_an_index_width_other_than_4_or_8_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"^policies\[0\]\.index_bytes: .*4.*8"):
        parse_config(synthetic(star(2), [{"name": "topk", "index_bytes": 2}], 1.0))


def test_a_coding_declaring_pairs_needs_the_whole_tensor_as_a_list() -> None:
    with pytest.raises(ValueError, match=r"^coding topk: declared pairs need partition none"):
        SparseCoding("hash", topk=0.1)
    with pytest.raises(ValueError, match=r"^coding topk 0; allowed: a fraction in \(0, 1\]$"):
        SparseCoding("none", topk=0)


def test_syncsim_check_takes_it_and_refuses_a_bad_ratio_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    config = synthetic(star(4), [{"name": "topk", "ratio": 0.01, "warmup_steps": 2, "index_bytes": 8}], 10.0)
    path.write_text(yaml.safe_dump(config))
    assert main(["check", str(path)]) == 0
    config["policies"][0]["ratio"] = 0.0
    path.write_text(yaml.safe_dump(config))
    assert main(["check", str(path)]) == 2
    assert "policies[0].ratio: allowed: a fraction in (0, 1] (got 0)" in capsys.readouterr().err


@pytest.mark.parametrize(("p", "mb", "ratio", "index_bytes", "warmup"), [(4, 100, 0.01, 4, 0), (8, 40, 0.1, 8, 1)])
def test_iteration_times_match_the_all_gather_of_k_pairs(
    p: int, mb: float, ratio: float, index_bytes: int, warmup: int
) -> None:
    """One fp32 bucket of V values, ready at the end of backward. A warm-up step adds a ring all-reduce of it;
    a later step adds the Encode (4 fp32 passes: gradient and residual read and written, at the GPU's memory
    bandwidth) and then the all-gather of k = ceil(ratio V) pairs per member, docs/sparse.md's
    `alpha + (n-1) k (b_v + b_i) / B` (every member receives every other member's pairs at once)."""
    values = mb * MB / 4
    policy = {"name": "topk", "ratio": ratio, "index_bytes": index_bytes, "warmup_steps": warmup}
    config = synthetic(star(p), [policy], mb, compute_ms=C * 1e3, iterations=3)
    result = simulate(config)
    assert not result.errors
    k = math.ceil(ratio * values)
    gather = ALPHA + (p - 1) * k * (4 + index_bytes) / GBPS
    encode = 4 * 4 * values / memory_bandwidth(config)
    ring = ring_allreduce(p, mb * MB, ALPHA, GBPS)
    steps = result.iterations.groupby("iteration")["iteration_s"].max()
    for step, seconds in steps.items():
        assert seconds == pytest.approx(C + (ring if step < warmup else encode + gather), rel=1e-6), step
    ops = result.ops[(result.ops["rank"] == -1) & (result.ops.kind == "AllGather")]
    assert len(ops) == 3 - warmup
    assert (ops.wire_bytes == p * (p - 1) * k * (4 + index_bytes)).all()


def test_the_simulator_numerics_mode_and_the_real_backend_move_the_same_k_pairs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One bucket of 650 values (the digits logistic regression's, in timing and in numerics alike), 3 workers,
    ratio 0.99: k = 644 pairs of a 4-byte value and an 8-byte id per member. The simulator prices that; numerics
    mode sends exactly k pairs of every member though some pixels' weights have an exact zero gradient (so
    fewer than k non-zeros: zero-valued pairs fill the message); the real backend's exchange, fed one member's
    pairs with zeros among them, reports the same bytes."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import sim.numerics.replicas as replicas_module
    from sim.numerics.sparse_rules import sent_pairs

    k, pair = math.ceil(0.99 * LOGREG), 4 + 8
    assert k == 644
    seen: list[tuple[int, int, int]] = []  # (region values, pairs sent, zeros among them)

    def recording(dense: Any, coding: SparseCoding) -> Any:
        pairs = sent_pairs(dense, coding)
        seen.append((dense.numel(), pairs.index.numel(), int((pairs.values == 0).sum())))
        return pairs

    monkeypatch.setattr(replicas_module, "sent_pairs", recording)
    policy = {"name": "topk", "ratio": 0.99, "index_bytes": 8}
    config = synthetic(star(3), [policy], LOGREG * 4 / MB, compute_ms=5, iterations=2)
    config["numerics"] = {"model": "logreg", "global_batch": 30, "eval_every": 2}
    result = simulate(config)
    assert not result.errors
    ops = result.ops[(result.ops["rank"] == -1) & (result.ops.kind == "AllGather")]
    assert list(ops.wire_bytes) == [3 * 2 * k * pair] * 2  # simulator: every member's k pairs to 2 others
    assert len(seen) == 2 * 3 and all(size == LOGREG and sent == k for size, sent, _ in seen)
    assert all(zeros > 0 for *_, zeros in seen)  # the padding ran: fewer than k non-zeros
    from test_real_sparse import _Replica, _run

    gen = torch.Generator().manual_seed(0)
    members = {}
    for r in (0, 1, 2):
        grads = torch.randn(LOGREG + 10, generator=gen)
        grads[10 + torch.randperm(LOGREG, generator=gen)[:20]] = 0.0  # 630 non-zeros, 14 zero pairs to send
        members[r] = _Replica(r, grads, (10, 10 + LOGREG), policy="topk")
    before = {r: m.grads[10:].clone() for r, m in members.items()}
    coding = SparseCoding("none", "list", 8, topk=0.99)
    sent = _run(AllGather(Group((0, 1, 2)), LOGREG * 4, density=Density.SPARSE, coding=coding), members, monkeypatch)
    assert sent == {r: 2 * k * pair + 8 * 2 for r in members}  # k pairs to each of 2 peers, then the sizes
    mean = torch.stack(list(before.values())).mean(0)
    for m in members.values():
        torch.testing.assert_close(m.grads[10:], mean)


def test_more_non_zeros_than_declared_are_refused() -> None:
    torch = pytest.importorskip("torch")
    from sim.errors import PolicyError
    from sim.numerics.sparse_rules import sent_pairs

    with pytest.raises(PolicyError, match=r"declaring 1 pairs per member .* met 2 non-zeros"):
        sent_pairs(torch.tensor([0.0, 1.0, 0.0, 2.0]), SparseCoding("none", topk=0.25))
    pairs = sent_pairs(torch.tensor([0.0, 3.0, 0.0, 0.0]), SparseCoding("none", topk=0.5))
    assert pairs.index.tolist() == [0, 1] and pairs.values.tolist() == [0.0, 3.0]  # the lowest zero pads


def _numerics(policies: list[dict[str, Any]], iterations: int = 6) -> dict[str, Any]:
    config = synthetic(star(4), policies, 1.0, compute_ms=5, iterations=iterations, bucket_mb=0.3, layers=4)
    config["numerics"] = {"model": "mlp", "hidden": [32], "global_batch": 32, "eval_every": 3}
    return config


def test_error_feedback_keeps_what_was_sent_plus_the_residual_equal_to_what_was_offered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At every Encode: (what goes out) + (the new residual) == (the gradient) + (the old residual), and what
    goes out holds k = ceil(ratio x values) of the bucket's values; after the all-gather every worker's bucket
    is the mean of what the workers sent."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from sim.numerics.replicas import Replicas

    encodes: list[tuple[Any, Any, Any, Any]] = []  # (offered, sent, residual, region size)
    gathers: list[tuple[Any, Any]] = []
    local, collective_done = Replicas.local, Replicas.collective_done

    def record_local(self: Replicas, rank: int, op: Any, bucket: Any) -> None:
        a, b = self.replicas[rank].range(bucket)
        store = self.stores[rank]
        offered = store.tensor("gradients")[a:b] + store.tensor("residual")[a:b]
        local(self, rank, op, bucket)
        encodes.append((offered, store.tensor("gradients")[a:b].clone(), store.tensor("residual")[a:b].clone(), b - a))

    def record_collective(self: Replicas, op: Any, buckets: Any) -> None:
        ranges = [self.replicas[r].range(buckets[r]) for r in op.group.ranks]
        sent = torch.stack([self.grads[r, a:b] for r, (a, b) in zip(op.group.ranks, ranges)])
        collective_done(self, op, buckets)
        gathers.append((sent.mean(0), torch.stack([self.grads[r, a:b] for r, (a, b) in zip(op.group.ranks, ranges)])))

    monkeypatch.setattr(Replicas, "local", record_local)
    monkeypatch.setattr(Replicas, "collective_done", record_collective)
    assert not simulate(_numerics([{"name": "topk", "ratio": 0.1}], iterations=3)).errors
    assert len(encodes) == 4 * len(gathers) > 0  # every worker encodes each bucket the gather then moves
    for offered, sent, residual, size in encodes:
        torch.testing.assert_close(sent + residual, offered, rtol=0, atol=0)
        assert int((sent != 0).sum()) == math.ceil(0.1 * size) and bool((residual != 0).any())
    for mean, after in gathers:
        torch.testing.assert_close(after, mean.expand_as(after), rtol=1e-6, atol=1e-7)


def test_ratio_one_trains_as_ring_does() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    result = simulate(
        _numerics([{"name": "topk", "ratio": 1.0}, {"name": "ring"}, {"name": "topk", "ratio": 0.1, "label": "t10"}])
    )
    assert not result.errors
    every, ring, sparse = (run.parameters for run in result.runs)
    np.testing.assert_allclose(every, ring, rtol=1e-6, atol=1e-7)
    assert not np.allclose(sparse, ring, rtol=1e-6, atol=1e-7)  # the sparse run did drop values


@pytest.mark.slow
def test_gloo_workers_end_with_the_numerics_parameters(tmp_path: Path) -> None:
    """The same policy on 4 gloo processes: a warm-up step of ring all-reduce, then top-k 10% with error
    feedback; the replicas equal numerics mode's. The MLP's 64*32 + 32 + 32*10 + 10 = 2410 parameters fill
    the config's 2 buckets, 1205 each, so every gather sends k = ceil(0.1 x 1205) = 121 pairs of a 4-byte
    value and a 4-byte id to each of 3 peers, then 3 int64 sizes."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    import pandas as pd
    from test_real_backend import write_config

    from real.launch import launch

    config = write_config(tmp_path, [{"name": "topk", "ratio": 0.1, "warmup_steps": 1}], iterations=5)
    outcome = launch(config, tmp_path / "out", nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    (run,) = simulate(config).runs
    real = np.load(tmp_path / "out" / "parameters.npz")["topk/workers"]
    np.testing.assert_allclose(real, run.parameters, rtol=1e-4, atol=1e-6)
    ops = pd.read_csv(tmp_path / "out" / "ops.csv")
    gathers = ops[ops.kind == "AllGather"]
    assert sorted(gathers.step) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert (gathers.nbytes == 3 * 121 * (4 + 4) + 3 * 8).all()
