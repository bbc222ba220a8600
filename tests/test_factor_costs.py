"""sim/engine/factor_costs.py and its use by LocalOpCosts: the roofline of each factor op, by hand."""

from __future__ import annotations

import pytest

from policies.factor_ops import Orthogonalize, Pack, Project, RandomFill, Reconstruct
from policies.lowrank import FactorBuffer, LowRank
from sim.engine.factor_costs import factor_seconds, factor_work, gram_schmidt_kernels
from sim.engine.local_op_costs import FactorPricing, LocalOpCosts

LOW = LowRank(rank=4)
SHAPES = ((1024, 512), (1024,))  # one factored 1024 x 512 matrix, a bias that travels as it is


def test_each_op_moves_computes_and_launches_what_its_rule_says() -> None:
    layout = LOW.layout(SHAPES)
    matrix = 1024 * 512 + (1024 + 512) * 4
    assert factor_work(Project("gradients", "q", "p"), layout, "p") == (4.0 * matrix, 2.0 * 1024 * 512 * 4, 1)
    assert factor_work(Reconstruct("gradients", "p", "q"), layout, "p") == (4.0 * matrix, 2.0 * 1024 * 512 * 4, 1)
    assert factor_work(Pack("gradients", "rest"), layout, "rest") == (8.0 * 1024, 0.0, 1)
    assert factor_work(RandomFill("q", 0), layout, "q") == (4.0 * 512 * 4, 0.0, 1)
    # rank 4: a QR factorization and the copy of its Q
    assert factor_work(Orthogonalize("p"), layout, "p") == (8.0 * 1024 * 16, 4.0 * 1024 * 16, 2)
    # rank 2, two factored matrices: per matrix 2 columns x (norm, division) + (product, sum, product, subtraction)
    two = LowRank(rank=2).layout(((64, 64), (32, 64)))
    assert factor_work(Orthogonalize("q"), two, "q")[2] == 2 * (2 * 2 + 4)
    assert gram_schmidt_kernels(1) == 2


def test_the_slower_of_memory_and_arithmetic_sets_the_time_plus_the_kernels() -> None:
    layout = LOW.layout(SHAPES)
    project = Project("gradients", "q", "p")
    moved, flops, kernels = factor_work(project, layout, "p")
    assert factor_seconds(project, layout, "p", 1e12, 1e15) == pytest.approx(moved / 1e12)  # memory-bound
    assert factor_seconds(project, layout, "p", 1e15, 1e9) == pytest.approx(flops / 1e9)  # arithmetic-bound
    assert factor_seconds(project, layout, "p", 1e12, 1e15, 2e-5) == pytest.approx(moved / 1e12 + kernels * 2e-5)


def test_local_op_costs_price_factor_ops_of_a_bucket_by_its_shapes() -> None:
    buffers = {"p": FactorBuffer("p", LOW, "p"), "q": FactorBuffer("q", LOW, "q")}
    pricing = FactorPricing(buffers, (SHAPES, ((8,),)), 2e12, 1e13, 2e-5)
    costs = LocalOpCosts((4.0 * 525312, 32.0), 1.0, 2e12, pricing)
    project = Project("gradients", "q", "p")
    expected = factor_seconds(project, LOW.layout(SHAPES), "p", 2e12, 1e13, 2e-5)
    assert costs.seconds(project, 0) == pytest.approx(expected)
    assert costs.seconds(project, 1) == 0.0  # bucket 1 factors nothing
    assert costs.seconds(project, None) == 0.0  # a whole-model hook: refused by the backends before it runs
