"""Local tensor ops (`sim/numerics/local_ops.py`): Combine's arithmetic, the policy-owned optimizers against
torch.optim step for step (on a whole vector and on strided fragments), and Encode's error feedback."""

from __future__ import annotations

import pytest
import torch

from policies.ops import Combine, Encode, OptimizerStep
from policies.tensors import Buffer, Codec, Fragment, Optimizer
from sim.numerics.local_ops import TensorStore, encoded, op_ranges
from sim.numerics.wire_cast import round_trip

N = 12
BUCKETS = [(8, 12), (4, 8), (0, 4)]  # bucket 0 at the end of the vector (replica.bucket_ranges' layout)


def store(seed: int = 0) -> TensorStore:
    g = torch.Generator().manual_seed(seed)
    params, grads = torch.randn(N, generator=g), torch.randn(N, generator=g)
    return TensorStore(params, grads, (Buffer("anchor", initial="parameters"), Buffer("delta")))


def test_buffers_start_from_their_initial_value_and_are_copies() -> None:
    s = store()
    assert torch.equal(s.tensor("anchor"), s.tensor("parameters"))
    s.tensor("parameters").add_(1.0)
    assert not torch.equal(s.tensor("anchor"), s.tensor("parameters"))
    assert torch.equal(s.tensor("delta"), torch.zeros(N))
    with pytest.raises(KeyError, match="no buffer 'nope'"):
        s.tensor("nope")


def test_combine_reads_every_term_before_writing() -> None:
    s = store()
    before_p, before_a = s.tensor("parameters").clone(), s.tensor("anchor").clone()
    s.tensor("anchor").mul_(3.0)
    # parameters = 0.5 * parameters + 0.5 * anchor: `out` is also a term
    s.apply(Combine("parameters", ((0.5, "parameters"), (0.5, "anchor"))), [(0, N)])
    assert torch.allclose(s.tensor("parameters"), 0.5 * before_p + 1.5 * before_a)


def test_a_fragment_touches_only_its_buckets() -> None:
    s = store()
    ranges = op_ranges(BUCKETS, (0, N), Fragment(0, 2))  # buckets 0 and 2
    assert ranges == [(8, 12), (0, 4)]
    s.apply(Combine("delta", ((1.0, "anchor"), (-2.0, "gradients"))), ranges)
    expected = torch.zeros(N)
    for a, b in ranges:
        expected[a:b] = s.tensor("anchor")[a:b] - 2.0 * s.tensor("gradients")[a:b]
    assert torch.equal(s.tensor("delta"), expected)


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        (Optimizer("sgd", lr=0.7, momentum=0.9, nesterov=True), lambda p: torch.optim.SGD(p, 0.7, 0.9, nesterov=True)),
        (Optimizer("sgd", lr=0.1, weight_decay=0.01), lambda p: torch.optim.SGD(p, 0.1, weight_decay=0.01)),
        (
            Optimizer("adamw", lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1),
            lambda p: torch.optim.AdamW(p, 1e-3, betas=(0.9, 0.95), weight_decay=0.1),
        ),
    ],
)
def test_optimizers_step_as_torch_optim_does(ours: Optimizer, theirs) -> None:
    s = store()
    reference = torch.nn.Parameter(s.tensor("anchor").clone())
    torch_opt = theirs([reference])
    g = torch.Generator().manual_seed(1)
    for _ in range(5):
        s.tensor("delta").copy_(torch.randn(N, generator=g))
        reference.grad = s.tensor("delta").clone()
        torch_opt.step()
        s.apply(OptimizerStep("anchor", "delta", ours), [(0, N)])
    torch.testing.assert_close(s.tensor("anchor"), reference.detach(), rtol=1e-6, atol=1e-7)


def test_fragments_keep_their_own_optimizer_step_counts() -> None:
    """Two fragments stepped 3 and 1 times by adamw equal two torch.optim.AdamW runs of 3 and 1 steps."""
    opt = Optimizer("adamw", lr=1e-2)
    s = store()
    start = s.tensor("anchor").clone()
    s.tensor("delta").fill_(0.5)
    first, second = op_ranges(BUCKETS, (0, N), Fragment(0, 2)), op_ranges(BUCKETS, (0, N), Fragment(1, 2))
    for _ in range(3):
        s.apply(OptimizerStep("anchor", "delta", opt), first)
    s.apply(OptimizerStep("anchor", "delta", opt), second)
    for ranges, steps in ((first, 3), (second, 1)):
        for a, b in ranges:
            ref = torch.nn.Parameter(start[a:b].clone())
            torch_opt = torch.optim.AdamW([ref], 1e-2, weight_decay=0.0)  # torch defaults to 0.01
            for _ in range(steps):
                ref.grad = torch.full((b - a,), 0.5)
                torch_opt.step()
            torch.testing.assert_close(s.tensor("anchor")[a:b], ref.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("codec", [Codec(wire="int8", block=4), Codec(wire="bf16"), Codec(topk=0.25)])
def test_error_feedback_keeps_exactly_what_the_codec_lost(codec: Codec) -> None:
    s = TensorStore(torch.zeros(N), torch.zeros(N), (Buffer("residual"), Buffer("delta")))
    g = torch.Generator().manual_seed(2)
    sent = torch.zeros(N)
    total = torch.zeros(N)
    for _ in range(4):
        value = torch.randn(N, generator=g)
        total += value
        s.tensor("delta").copy_(value)
        s.apply(Encode("delta", codec, residual="residual"), [(0, N)])
        sent += s.tensor("delta")
    # what was sent plus what is still owed is everything that was offered (up to fp32 addition)
    torch.testing.assert_close(sent + s.tensor("residual"), total, rtol=0, atol=1e-5)
    assert s.tensor("residual").abs().sum() > 0  # the codec did lose something


def test_top_k_keeps_the_largest_magnitudes_and_the_wire_rounds_what_is_kept() -> None:
    values = torch.tensor([0.1, -3.0, 0.2, 2.5, -0.05, 1.0, 0.0, -2.0])
    out = encoded(values, Codec(topk=0.5))
    assert torch.equal(out, torch.tensor([0.0, -3.0, 0.0, 2.5, 0.0, 1.0, 0.0, -2.0]))
    both = encoded(values, Codec(wire="int8", block=8, topk=0.5))
    assert torch.equal(both, round_trip(out, "int8", 8))
