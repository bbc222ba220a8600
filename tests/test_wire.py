"""Element types on the wire (policies/wire.py) and the ops that carry them (policies/ops.py): the bytes
of each type by hand, scales included, and an op's elements and bytes derived from each other."""

from __future__ import annotations

import pytest

from policies.ops import AllGather, AllReduce, Barrier, Group, ReduceScatter
from policies.view import ModelInfo
from policies.wire import WIRE_NAMES, mismatch, wire_elements, wire_nbytes
from policies.wire_settings import WireName

G = Group.of([0, 1])


@pytest.mark.parametrize(
    ("wire", "block", "expected"),
    [
        ("fp32", 32, 4000),
        ("bf16", 32, 2000),
        ("fp16", 32, 2000),
        ("fp8_e4m3", 32, 1000 + 32 * 4),  # ceil(1000 / 32) = 32 fp32 scales
        ("fp8_e5m2", 32, 1000 + 32 * 4),
        ("int8", 32, 1000 + 32 * 4),
        ("int8", 128, 1000 + 8 * 4),  # ceil(1000 / 128) = 8 scales
        ("fp4", 32, 500 + 32 * 4),  # two values a byte
        ("fp4", 1000, 500 + 4),  # one block, one scale
    ],
)
def test_bytes_of_1000_values(wire: str, block: int, expected: float) -> None:
    assert wire_nbytes(1000, wire, block) == expected


def test_the_settings_allow_exactly_the_types() -> None:
    assert WireName.__args__ == WIRE_NAMES  # type: ignore[attr-defined]
    assert WIRE_NAMES == ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "fp4")


def test_an_unknown_type_is_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="wire 'int4'; allowed: fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, fp4"):
        AllReduce(G, elements=10, wire="int4")
    with pytest.raises(ValueError, match="block 0"):
        AllReduce(G, elements=10, wire="int8", block=0)


def test_an_op_derives_bytes_from_elements_and_elements_from_bytes() -> None:
    op = AllReduce(G, elements=1024, wire="int8")
    assert op.nbytes == 1024 + 32 * 4 and op.block == 32
    back = ReduceScatter(G, 1152, wire="int8")
    assert back.elements == pytest.approx(1024)
    assert AllGather(G, elements=10, wire="bf16").nbytes == 20
    assert wire_elements(20, "bf16") == 10


def test_an_op_without_a_wire_is_as_before() -> None:
    op = AllReduce(G, 8e6)
    assert (op.nbytes, op.wire, op.elements) == (8e6, None, None)
    assert Barrier(G).nbytes == 0.0
    with pytest.raises(ValueError, match="nbytes is required"):
        AllReduce(G)


def test_a_mismatch_is_what_lies_beyond_one_scale() -> None:
    assert mismatch(1024, 2048, "bf16") == 0
    assert mismatch(1024, 4096, "bf16") == pytest.approx(2048)  # fp32 bytes declared as bf16
    assert mismatch(1000, 1128 + 4, "int8") == 0  # one scale of slack (a count derived from bytes)
    assert mismatch(1000, 1128 + 8, "int8") == pytest.approx(4)


def test_a_model_counts_gradient_values_in_its_gradient_type() -> None:
    assert ModelInfo(8e6, (8e6,)).gradient_values(8e6) == 2e6
    assert ModelInfo(8e6, (4e6,), gradient_type="bf16").gradient_values(4e6) == 2e6


def test_a_block_without_a_scaled_wire_is_refused() -> None:
    from pydantic import ValidationError

    from policies.ring import Ring

    assert Ring(wire="int8", block=128).settings.block == 128
    with pytest.raises(ValidationError, match="applies to a scaled wire"):
        Ring(wire="bf16", block=128)
    with pytest.raises(ValidationError, match="applies to a scaled wire"):
        Ring(block=128)
