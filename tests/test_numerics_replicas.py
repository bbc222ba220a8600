"""Tensor rules of numerics mode, in-process: bucket mapping, nested reduce-scatter/all-gather, pushes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from policies.ops import AllGather, AllReduce, AllToAll, Group, Payload, Push, ReduceScatter  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.errors import ConfigError, PolicyError  # noqa: E402
from sim.numerics.replicas import Replicas, bucket_ranges, partition  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

CFG = NumericsConfig(model="logreg", global_batch=16)


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(CFG, 0)


def replicas(task: Task, world: int = 4, buckets: tuple[float, ...] = (3.0, 1.0), servers: bool = False) -> Replicas:
    reps = Replicas(CFG, task, world, buckets, 10, 0, "test", servers)
    reps.grads.copy_(torch.arange(world, dtype=torch.float32)[:, None] + torch.zeros(world, task.size))
    return reps


def test_buckets_cover_the_vector_last_layers_first() -> None:
    assert bucket_ranges(100, [30.0, 70.0]) == [(70, 100), (0, 70)]
    assert bucket_ranges(7, [1.0, 1.0, 1.0]) == [(5, 7), (2, 5), (0, 2)]
    assert partition(0, 10, [1, 1, 2]) == [(0, 2), (2, 5), (5, 10)]
    assert partition(3, 5, [0.0, 0.0]) == [(3, 4), (4, 5)]


def test_all_reduce_averages_the_bucket_only(task: Task) -> None:
    reps = replicas(task)
    reps.collective_done(AllReduce(Group.of([0, 1, 2, 3]), 1.0), {r: 0 for r in range(4)})
    a, b = reps.ranges[0]
    assert torch.all(reps.grads[:, a:b] == 1.5)
    assert torch.all(reps.grads[:, :a] == torch.arange(4.0)[:, None])  # bucket 1 untouched


def test_two_d_all_reduce_nests_to_the_global_mean(task: Task) -> None:
    reps = replicas(task)
    local = [Group.of([0, 1]), Group.of([2, 3])]
    cross = [Group.of([0, 2]), Group.of([1, 3])]
    ctx = {r: 1 for r in range(4)}
    for g in local:
        reps.collective_done(ReduceScatter(g, 4.0), ctx)
    for g in cross:
        reps.collective_done(AllReduce(g, 2.0), ctx)
    for g in local:
        reps.collective_done(AllGather(g, 4.0), ctx)
    a, b = reps.ranges[1]
    assert torch.all(reps.grads[:, a:b] == 1.5)


def test_parameter_collective_takes_the_local_step_first(task: Task) -> None:
    reps = replicas(task, world=2, buckets=(1.0,))
    before = reps.params.clone()
    for r in range(2):
        reps.arrive(r, AllReduce(Group.of([0, 1]), 1.0, payload=Payload.PARAMETERS), 0)
    reps.collective_done(AllReduce(Group.of([0, 1]), 1.0, payload=Payload.PARAMETERS), {0: 0, 1: 0})
    # momentum 0.9, first step: params - lr * grad; grads are 0 and 1, averaged: - lr * 0.5
    torch.testing.assert_close(reps.params, before - CFG.optimizer.lr * 0.5)
    reps.step_done(0, 0)  # already stepped: no second step
    torch.testing.assert_close(reps.params[0], before[0] - CFG.optimizer.lr * 0.5)


def test_pushes_split_the_bucket_and_skip_the_local_step(task: Task) -> None:
    reps = replicas(task, world=2, buckets=(1.0,), servers=True)
    before = reps.params.clone()
    updates = reps.push_updates(1, 0, [Push(0, 3.0), Push(1, 1.0)])
    n = task.size
    assert [(u.a, u.b) for u in updates] == [(0, round(0.75 * n)), (round(0.75 * n), n)]
    assert all(torch.all(u.values == 1.0) for u in updates)
    reps.step_done(1, 0)
    assert torch.equal(reps.params, before)


def test_unsupported_op_and_mismatched_tensors_fail_with_the_policy_name(task: Task) -> None:
    reps = replicas(task)
    with pytest.raises(PolicyError, match="no tensor rule for AllToAll"):
        reps.collective_done(AllToAll(Group.of([0, 1]), 8.0), {0: 0, 1: 0})
    with pytest.raises(PolicyError, match="'test'.*different sizes"):
        reps.collective_done(AllReduce(Group.of([0, 1]), 8.0), {0: 0, 1: 1})


def test_batch_that_does_not_split_names_the_field(task: Task) -> None:
    with pytest.raises(ConfigError, match="numerics.global_batch: 16 does not split evenly over 3 workers"):
        Replicas(CFG, task, 3, (1.0,), 10, 0, "test", False)
    big = NumericsConfig(model="logreg", global_batch=4096)
    with pytest.raises(ConfigError, match="numerics.global_batch: a worker's batch of 1024 exceeds its shard"):
        Replicas(big, task, 4, (1.0,), 10, 0, "test", False)
