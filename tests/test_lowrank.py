"""policies/lowrank.py and policies/factor_ops.py: which tensors a rank-r codec factors, where their factors
lie, and the declarations' checks."""

from __future__ import annotations

import pytest

from policies.factor_ops import Orthogonalize, Pack, Project, RandomFill, Reconstruct, Unpack
from policies.lowrank import FactorBuffer, LowRank, matrix_shape


def test_a_tensor_is_a_matrix_of_its_first_dimension_by_the_rest() -> None:
    assert matrix_shape((64, 3, 3, 3)) == (64, 27)
    assert matrix_shape((10,)) == (10, 1)
    assert matrix_shape(()) == (1, 1)


def test_factored_when_the_factors_are_smaller_by_more_than_the_rate() -> None:
    low = LowRank(rank=4, min_compression_rate=2.0)
    # 100 x 100 at rank 4: factors of (100 + 100) x 4 = 800 values, times the rate 2: 1600 < 10000
    assert low.factors(100, 100)
    # 12 x 12 at rank 4: 96 values of factors, 2 x 96 = 192 > 144
    assert not low.factors(12, 12)
    # the boundary is strict: (n + m) r rate == n m is not factored (16 x 16, rank 4, rate 2: 256 == 256)
    assert not LowRank(rank=4, min_compression_rate=2.0).factors(16, 16)
    # a vector (n x 1) is factored only at a rate below 1, at rank 1
    assert not LowRank(rank=8).factors(1000, 1)
    assert LowRank(rank=8, min_compression_rate=0.5).factors(1000, 1)
    assert LowRank(rank=8).factor_rank(1000, 3) == 3


def test_layout_sizes_and_order_follow_the_rules() -> None:
    # region: conv weight (64, 3, 3, 3) = 64 x 27, its bias (64,), linear (10, 64), bias (10,), another 64 x 27
    shapes = [(64, 3, 3, 3), (64,), (10, 64), (10,), (64, 27)]
    layout = LowRank(rank=2).layout(shapes)
    # factored: 64 x 27 twice (182 < 1728), 10 x 64 (296 < 640); rest: the two biases
    assert [m.tensor for m in layout.matrices] == [0, 4, 2]  # grouped by shape, first-appearance order
    assert layout.rest == (1, 3)
    assert layout.p_values == 2 * 64 * 2 + 10 * 2
    assert layout.q_values == 2 * 27 * 2 + 64 * 2
    assert layout.rest_values == 64 + 10
    offsets = [(m.p_offset, m.q_offset) for m in layout.matrices]
    assert offsets == [(0, 0), (128, 54), (256, 108)]
    assert layout.flops == 2 * (2 * 64 * 27 * 2 + 10 * 64 * 2)
    assert layout.values("p") == layout.p_values and layout.values("rest") == 74


def test_bad_declarations_name_the_field() -> None:
    with pytest.raises(ValueError, match="rank"):
        LowRank(rank=0)
    with pytest.raises(ValueError, match="min_compression_rate"):
        LowRank(min_compression_rate=float("nan"))
    with pytest.raises(ValueError, match="side"):
        FactorBuffer("p", LowRank(), "left")
    with pytest.raises(ValueError, match="built in"):
        FactorBuffer("gradients", LowRank(), "p")
    with pytest.raises(ValueError, match="seed"):
        RandomFill("q", -1)
    with pytest.raises(ValueError, match="epsilon"):
        Orthogonalize("q", epsilon=float("inf"))
    with pytest.raises(ValueError, match="transpose"):
        Project("gradients", "q", "p", transpose=1)  # type: ignore[arg-type]


def test_factor_ops_say_what_they_read_and_write() -> None:
    assert Project("gradients", "q", "p").reads == ("gradients", "q")
    assert Project("gradients", "q", "p").writes == ("p",)
    assert Reconstruct("gradients", "p", "q").writes == ("gradients",)
    assert Pack("gradients", "rest").factors == ("rest",)
    assert Unpack("rest", "gradients").writes == ("gradients",)
    assert RandomFill("q", 3).reads == () and Orthogonalize("q").writes == ("q",)
    assert Project("gradients", "q", "p").fragment is None
