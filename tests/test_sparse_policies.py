"""Zen and the sparse baselines in-process: the ops they plan, their settings, op validation."""

from __future__ import annotations

import pytest
from helpers import star, synthetic
from test_policies import BUCKET, program, view

from policies import Bucket, ModelInfo, SettingError
from policies.ops import AllGather, AllReduce, AllToAll, Density, Group, Push, SparseCoding
from policies.registry import create
from sim.api import simulate
from sim.config import parse_config
from sim.engine.op_checks import OpValidator
from sim.errors import PolicyError

SPARSE_MODEL = ModelInfo(32e6, (8e6,) * 4, (False, False, True, False))  # bucket 2 is sparse
WORLD = Group.of(range(8))


def bound(name: str, **settings: object):  # type: ignore[no-untyped-def]
    policy = create(name, settings)
    policy.bind(view(2, 2, 2), SPARSE_MODEL)
    return policy


def test_zen_reduces_sparse_buckets_by_all_to_all_then_all_gather() -> None:
    zen = bound("zen")
    coding = SparseCoding("hash", "auto", 4)
    assert program(zen, "on_gradients", 3, 0, BUCKET) == [
        AllToAll(WORLD, 8e6, density=Density.SPARSE, coding=coding),
        AllGather(WORLD, 8e6, density=Density.SPARSE, coding=coding),
    ]
    dense = Bucket(index=1, nbytes=8e6, count=4)
    assert program(zen, "on_gradients", 3, 0, dense) == [AllReduce(WORLD, 8e6)]
    contiguous = bound("zen", partition="contiguous", index_format="list", index_bytes=8)
    assert program(contiguous, "on_gradients", 0, 0, BUCKET)[0].coding == SparseCoding("contiguous", "list", 8)


def test_sparse_allgather_gathers_whole_sparse_tensors() -> None:
    ops = program(bound("sparse_allgather"), "on_gradients", 0, 0, BUCKET)
    assert ops == [AllGather(WORLD, 8e6, density=Density.SPARSE, coding=SparseCoding("none", "list", 4))]


def test_sparse_ps_pushes_and_pulls_rows_of_sparse_buckets_only() -> None:
    ps = bound("sparse_ps")
    (pushes,) = program(ps, "on_gradients", 0, 1, BUCKET)
    assert all(isinstance(op, Push) and op.coding == SparseCoding("contiguous", "list", 4) for op in pushes)
    (pulls,) = program(ps, "on_forward", 0, 1, BUCKET)
    assert all(op.coding is not None for op in pulls)
    (dense,) = program(ps, "on_gradients", 0, 1, Bucket(index=0, nbytes=8e6, count=4))
    assert all(op.coding is None for op in dense)


@pytest.mark.parametrize(
    "name, settings, field",
    [("zen", {"index_format": "csv"}, "index_format"), ("zen", {"partition": "none"}, "partition"),
     ("sparse_allgather", {"index_bytes": 2}, "index_bytes"), ("sparse_ps", {"partition": "ring"}, "partition")],
)  # fmt: skip
def test_bad_settings_name_the_field(name: str, settings: dict, field: str) -> None:
    with pytest.raises(SettingError) as err:
        create(name, settings)
    assert err.value.field == field


def test_sparse_coding_rejects_unknown_values() -> None:
    with pytest.raises(ValueError, match="allowed: hash, contiguous, none"):
        SparseCoding("ring")
    with pytest.raises(ValueError, match="allowed: list, bitmap, auto"):
        SparseCoding("hash", "csv")


def test_validator_rejects_malformed_sparse_ops() -> None:
    v = OpValidator("p", 8, 2)
    coding = SparseCoding("hash")
    with pytest.raises(PolicyError, match="AllReduce has no sparse form"):
        v.check(0, 0, AllReduce(WORLD, 1.0, density=Density.SPARSE, coding=coding))
    with pytest.raises(PolicyError, match="needs coding"):
        v.check(0, 0, AllGather(WORLD, 1.0, density=Density.SPARSE))
    with pytest.raises(PolicyError, match="density is not SPARSE"):
        v.check(0, 0, AllGather(WORLD, 1.0, coding=coding))
    with pytest.raises(PolicyError, match="partition hash or contiguous"):
        v.check(0, 0, AllToAll(WORLD, 1.0, density=Density.SPARSE, coding=SparseCoding("none")))
    with pytest.raises(PolicyError, match="partition hash or contiguous"):
        v.check(0, 0, Push(0, 1.0, coding=SparseCoding("none")))
    with pytest.raises(PolicyError, match="block and dense_switch codings are for AllToAll and AllGather"):
        v.check(0, 0, Push(0, 1.0, coding=SparseCoding("hash", block=256)))
    with pytest.raises(ValueError, match="block 0; allowed"):
        SparseCoding("hash", block=0)
    v.check(0, 0, AllToAll(WORLD, 1.0, density=Density.SPARSE, coding=coding))  # well formed


def test_sparse_policies_on_a_dense_workload_fall_back_to_dense_ops() -> None:
    policies = [{"name": "ring"}, {"name": "zen"}, {"name": "sparse_allgather"}]
    result = simulate(parse_config(synthetic(star(4), policies, gradient_mb=8)))
    assert set(result.ops[result.ops["rank"] == -1].kind) == {"AllReduce"}
    comm = result.summary.set_index("policy").mean_comm_s
    assert comm["zen"] == comm["ring"] == comm["sparse_allgather"]


def test_a_sparse_op_outside_a_gradient_bucket_fails_with_a_clear_error() -> None:
    raw = synthetic(star(4), [{"name": "custom_policies:SparseOnEndStep"}], gradient_mb=8)
    raw["workload"]["sparsity"] = {"topk": 0.01}
    status = simulate(parse_config(raw)).summary.status[0]
    assert status.startswith("failed: PolicyError: policy 'sparse_on_end_step'")
    assert "acts on a gradient bucket (yield it from on_gradients)" in status
