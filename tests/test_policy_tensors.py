"""The tensor-side primitives of `policies/tensors.py` and `policies/ops.py`: their checks, the buffers each op
reads and writes, fragments' buckets and bytes, and the shared validator's refusals."""

from __future__ import annotations

import pytest

from policies.ops import AllReduce, Barrier, Combine, Encode, Group, OptimizerStep, Payload, Wait
from policies.tensors import Buffer, Codec, Fragment, Optimizer, fragment_bytes
from sim.engine.op_checks import OpValidator
from sim.errors import PolicyError

WORLD = Group((0, 1))


def test_a_collective_acts_on_its_tensor_or_on_what_its_payload_names() -> None:
    assert AllReduce(WORLD, 8.0).buffer == "gradients"
    assert AllReduce(WORLD, 8.0, payload=Payload.PARAMETERS).buffer == "parameters"
    assert AllReduce(WORLD, 8.0, payload=Payload.PARAMETERS, tensor="outer_gradient").buffer == "outer_gradient"


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Buffer("parameters"), "built in"),
        (lambda: Buffer("a b"), "identifier"),
        (lambda: Buffer("x", initial="ones"), "allowed: zeros, parameters"),
        (lambda: Fragment(2, 2), "0 <= index < count"),
        (lambda: Fragment(0, 0), "count >= 1"),
        (lambda: Optimizer("lamb"), "allowed: sgd, adamw"),
        (lambda: Optimizer("adamw", nesterov=True), "nesterov"),
        (lambda: Optimizer(momentum=1.0), "0 <= momentum < 1"),
        (lambda: Optimizer(lr=float("nan")), "finite"),
        (lambda: Codec(), "give wire, topk or both"),
        (lambda: Codec(wire="int4"), "allowed: fp32, bf16"),
        (lambda: Codec(topk=0.0), r"a fraction in \(0, 1\]"),
        (lambda: Combine("x", ()), "at least one"),
        (lambda: Combine("x", ((float("inf"), "y"),)), "finite coefficient"),
        (lambda: AllReduce(WORLD, 8.0, handle="not ok"), "handle"),
        (lambda: Wait(""), "handle"),
    ],
)
def test_bad_primitives_are_refused_with_the_allowed_values(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_each_local_op_says_what_it_reads_and_writes() -> None:
    combine = Combine("parameters", ((0.5, "parameters"), (0.5, "anchor")))
    assert combine.reads == ("parameters", "anchor") and combine.writes == ("parameters",)
    step = OptimizerStep("anchor", "outer_gradient", Optimizer())
    assert step.reads == ("anchor", "outer_gradient") and step.writes == ("anchor",)
    encode = Encode("outer_gradient", Codec(wire="int8"), residual="residual")
    assert encode.reads == ("outer_gradient", "residual") and encode.writes == ("outer_gradient", "residual")
    assert Encode("g", Codec(topk=0.1), out="sent").writes == ("sent",)


def test_fragments_are_strided_over_the_buckets() -> None:
    sizes = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)
    assert Fragment(1, 3).buckets(6) == (1, 4)
    assert fragment_bytes(sizes, Fragment(1, 3)) == 2.0 + 5.0
    assert sum(fragment_bytes(sizes, Fragment(i, 3)) for i in range(3)) == fragment_bytes(sizes, None) == 21.0


def test_the_validator_knows_the_policys_buffers_and_buckets() -> None:
    v = OpValidator("p", 2, 0, buffers=("anchor",), buckets=4)
    v.check(0, 0, Combine("anchor", ((1.0, "parameters"),)))
    v.check(0, 0, AllReduce(WORLD, 8.0, tensor="anchor", fragment=Fragment(0, 4)))
    with pytest.raises(PolicyError, match="no buffer 'momentum'; buffers: anchor, gradients, parameters"):
        v.check(0, 0, OptimizerStep("anchor", "momentum", Optimizer()))
    with pytest.raises(PolicyError, match="fragment count 8 exceeds the model's 4 gradient buckets"):
        v.check(0, 0, AllReduce(WORLD, 8.0, tensor="anchor", fragment=Fragment(0, 8)))
    with pytest.raises(PolicyError, match="Barrier cannot be launched"):
        v.check(0, 0, Barrier(WORLD, handle="b"))
