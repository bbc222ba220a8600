"""sim/numerics/lowrank_rules.py: a region's tensors, and what the factor ops do to one worker's tensors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from policies.factor_ops import Orthogonalize, Pack, Project, RandomFill, Reconstruct, Unpack  # noqa: E402
from policies.lowrank import FactorBuffer, LowRank  # noqa: E402
from sim.errors import PolicyError  # noqa: E402
from sim.numerics.local_ops import TensorStore  # noqa: E402
from sim.numerics.lowrank_rules import orthogonalize, region_tensors  # noqa: E402

SHAPES = [(4, 6), (4,), (3, 4)]  # 24 + 4 + 12 = 40 values end to end
LOW = LowRank(rank=2, min_compression_rate=0.0)  # every matrix factored (a vector too, at rank 1)
BUFFERS = [FactorBuffer("p", LOW, "p"), FactorBuffer("q", LOW, "q"), FactorBuffer("rest", LOW, "rest")]


def test_whole_tensors_keep_their_shapes_and_cut_ones_split_into_rows_and_pieces() -> None:
    assert region_tensors(SHAPES, (0, 40)) == [(0, (4, 6)), (24, (4,)), (28, (3, 4))]
    # [3, 27): the first tensor from value 3 (rows of 6: a piece of 3, then rows 1-3), the bias, 1 value of the last
    assert region_tensors(SHAPES, (3, 29)) == [(3, (3,)), (6, (3, 6)), (24, (4,)), (28, (1,))]
    # inside one row: a vector
    assert region_tensors(SHAPES, (7, 10)) == [(7, (3,))]
    # a cut that ends mid-row: whole rows, then the piece
    assert region_tensors(SHAPES, (28, 38)) == [(28, (2, 4)), (36, (2,))]


@pytest.mark.parametrize("rank", [1, 2, 3, 5])
def test_orthogonalize_leaves_orthonormal_columns_spanning_the_same_space(rank: int) -> None:
    factor = torch.randn(1, 9, rank, generator=torch.Generator().manual_seed(rank))
    original = factor.clone()
    orthogonalize(factor, 0.0)
    eye = factor[0].T @ factor[0]
    assert torch.allclose(eye, torch.eye(rank), atol=1e-5)
    # the same column space: projecting the original onto it changes nothing
    assert torch.allclose(factor[0] @ (factor[0].T @ original[0]), original[0], atol=1e-5)


def _store(grads: torch.Tensor) -> TensorStore:
    return TensorStore(grads.clone(), grads, BUFFERS, SHAPES)


def test_one_power_step_reproduces_a_matrix_whose_rank_the_factors_hold() -> None:
    # a rank-2 gradient in the 4 x 6 and 3 x 4 matrices: P = M Q, orthogonalized; Q = M^T P; P Q^T == M
    g = torch.Generator().manual_seed(0)
    grads = torch.zeros(40)
    grads[:24] = (torch.randn(4, 2, generator=g) @ torch.randn(2, 6, generator=g)).reshape(-1)
    grads[24:28] = torch.randn(4, generator=g)
    grads[28:] = (torch.randn(3, 2, generator=g) @ torch.randn(2, 4, generator=g)).reshape(-1)
    expected = grads.clone()
    store = _store(grads)
    region = [(0, 40)]
    for op in (
        RandomFill("q", 5),
        Orthogonalize("q"),
        Project("gradients", "q", "p"),
        Orthogonalize("p"),
        Project("gradients", "p", "q", transpose=True),
    ):
        store.apply(op, region)
    grads.zero_()
    store.apply(Reconstruct("gradients", "p", "q"), region)
    assert torch.allclose(grads, expected, atol=1e-5)
    # P and Q have the layout's sizes: 4x2 + 4x1 + 3x2 rows, 6x2 + 1x1 + 4x2 columns
    assert store.factors.tensor("p", (0, 40)).numel() == 8 + 4 + 6
    assert store.factors.tensor("q", (0, 40)).numel() == 12 + 1 + 8


def test_random_fill_draws_each_factor_from_the_seeded_cpu_generator() -> None:
    store = _store(torch.zeros(40))
    torch.manual_seed(123)
    before = torch.rand(3)
    store.apply(RandomFill("q", 42), [(0, 40)])
    torch.manual_seed(123)
    assert torch.equal(torch.rand(3), before)  # the caller's generator is left alone
    torch.manual_seed(42)
    draws = [torch.randn(1, 6, 2), torch.randn(1, 1, 1), torch.randn(1, 4, 2)]  # factor order: by shape
    expected = torch.cat([d.reshape(-1) for d in draws])
    assert torch.equal(store.factors.tensor("q", (0, 40)), expected)


def test_pack_and_unpack_move_the_tensors_left_as_they_are() -> None:
    low = LowRank(rank=2)  # rate 2: the 4 x 6 and 3 x 4 matrices and the bias all travel as they are
    buffers = [FactorBuffer("rest", low, "rest")]
    grads = torch.arange(40, dtype=torch.float32)
    store = TensorStore(grads.clone(), grads, buffers, SHAPES)
    store.apply(Pack("gradients", "rest"), [(0, 40)])
    rest = store.factors.tensor("rest", (0, 40))
    assert torch.equal(rest, torch.arange(40, dtype=torch.float32))
    rest.mul_(2)
    store.apply(Unpack("rest", "gradients"), [(0, 40)])
    assert torch.equal(grads, 2 * torch.arange(40, dtype=torch.float32))


def test_factors_are_per_region_and_bad_uses_are_refused() -> None:
    store = _store(torch.ones(40))
    store.apply(Pack("gradients", "rest"), [(0, 24)])
    store.apply(Pack("gradients", "rest"), [(24, 40)])
    assert store.factors.tensor("rest", (0, 24)).numel() == 0  # the 4 x 6 matrix is factored
    assert store.factors.tensor("rest", (24, 40)).numel() == 0  # so are the vector and the 3 x 4 one
    with pytest.raises(PolicyError, match="one bucket's region"):
        store.apply(Pack("gradients", "rest"), [(0, 10), (20, 30)])
    with pytest.raises(PolicyError, match="side p"):
        store.apply(Project("gradients", "q", "rest"), [(0, 40)])
    with pytest.raises(PolicyError, match="not a factor buffer"):
        store.apply(Orthogonalize("nothing"), [(0, 40)])
    with pytest.raises(PolicyError, match="side p or q"):
        store.apply(RandomFill("rest", 1), [(0, 40)])
    store.restart(torch.zeros(40), BUFFERS)
    assert not store.factors.tensors  # a restart forgets the factors
