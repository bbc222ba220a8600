"""Numerics mode's tensor-side primitives across workers (sim/numerics/replicas.py): collectives on a named
buffer and on fragments, local ops in their hook's region, the local step only before a collective on the
parameters, buffers across phases, and evaluation of the policy's global model."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from policies.ops import AllReduce, Combine, Group, Payload, ReduceScatter  # noqa: E402
from policies.tensors import Buffer, Fragment  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.errors import PolicyError  # noqa: E402
from sim.numerics.evaluation import Evaluator  # noqa: E402
from sim.numerics.local_ops import phase_buffers  # noqa: E402
from sim.numerics.replicas import Replicas  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

CFG = NumericsConfig(model="logreg", global_batch=16)
BUFFERS = (Buffer("anchor", initial="parameters"), Buffer("delta"))
WORLD = 4
ALL = Group.of(range(WORLD))
WHOLE = {r: None for r in range(WORLD)}


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(CFG, 0)


def replicas(task: Task, precision: str = "fp32", global_tensor: str | None = None) -> Replicas:
    """Four workers, four equal buckets; every buffer row r filled with distinct seeded values."""
    reps = Replicas(
        CFG,
        task,
        WORLD,
        (1.0, 1.0, 1.0, 1.0),
        10,
        0,
        "test",
        False,
        gradient_precision=precision,
        buffers=BUFFERS,
        global_tensor=global_tensor,
    )
    gen = torch.Generator().manual_seed(1)
    for name in ("gradients", "delta"):
        for row in reps.rows(name):
            row.copy_(torch.randn(task.size, generator=gen))
    return reps


def snapshot(reps: Replicas) -> dict[str, torch.Tensor]:
    return {name: torch.stack(reps.rows(name)).clone() for name in ("parameters", "gradients", "anchor", "delta")}


def test_a_collective_acts_on_its_named_buffer_only(task: Task) -> None:
    reps = replicas(task)
    before = snapshot(reps)
    reps.collective_done(AllReduce(ALL, 1.0, payload=Payload.PARAMETERS, tensor="delta"), WHOLE)
    after = snapshot(reps)
    assert all(torch.equal(after["delta"][r], before["delta"].mean(dim=0)) for r in range(WORLD))
    for name in ("parameters", "gradients", "anchor"):
        assert torch.equal(after[name], before[name])


def test_buffers_start_from_their_initial_value_on_every_worker(task: Task) -> None:
    reps = Replicas(CFG, task, 2, (1.0,), 10, 0, "test", False, buffers=BUFFERS)
    assert all(torch.equal(a, task.initial) for a in reps.rows("anchor"))
    assert all(torch.count_nonzero(d) == 0 for d in reps.rows("delta"))
    reps.rows("anchor")[0].add_(1.0)  # each worker's own copy
    assert torch.equal(reps.rows("anchor")[1], task.initial)


def test_a_parameter_space_buffer_travels_in_fp32_and_gradients_in_their_precision(task: Task) -> None:
    """gradient_precision bf16: a gradient all-reduce is rounded, one of a PARAMETERS-payload buffer is not."""
    reps = replicas(task, precision="bf16")
    reps.rows("delta")[0].copy_(reps.rows("gradients")[0])  # same values in both, so only the rule differs
    for r in range(1, WORLD):
        reps.rows("delta")[r].copy_(reps.rows("gradients")[r])
    exact = torch.stack(reps.rows("delta")).mean(dim=0)
    reps.collective_done(AllReduce(ALL, 1.0, payload=Payload.PARAMETERS, tensor="delta"), WHOLE)
    reps.collective_done(AllReduce(ALL, 1.0), WHOLE)
    torch.testing.assert_close(reps.rows("delta")[0], exact, rtol=1e-6, atol=1e-7)
    assert not torch.allclose(reps.rows("gradients")[0], exact, rtol=0, atol=1e-5)  # bf16 rounding moved it


def test_a_fragment_all_reduce_averages_its_buckets_and_leaves_the_others(task: Task) -> None:
    reps = replicas(task)
    before = snapshot(reps)["delta"]
    fragment = Fragment(1, 2)  # buckets 1 and 3
    reps.collective_done(AllReduce(ALL, 1.0, payload=Payload.PARAMETERS, tensor="delta", fragment=fragment), WHOLE)
    after = snapshot(reps)["delta"]
    mean = before.mean(dim=0)
    for bucket, (a, b) in enumerate(reps.ranges):
        for r in range(WORLD):
            expected = mean[a:b] if bucket in (1, 3) else before[r, a:b]
            assert torch.equal(after[r, a:b], expected), (bucket, r)


def test_a_one_bucket_fragment_with_a_wire_is_that_buckets_all_reduce_bit_for_bit(task: Task) -> None:
    """int8: a fragment of one bucket leaves the bits the same all-reduce in that bucket's program does."""
    whole, bucketed = replicas(task), replicas(task)
    kwargs = {"elements": 1.0, "wire": "int8", "payload": Payload.PARAMETERS, "tensor": "delta"}
    whole.collective_done(AllReduce(ALL, fragment=Fragment(2, 4), **kwargs), WHOLE)  # type: ignore[arg-type]
    bucketed.collective_done(AllReduce(ALL, **kwargs), {r: 2 for r in range(WORLD)})  # type: ignore[arg-type]
    assert torch.equal(torch.stack(whole.rows("delta")), torch.stack(bucketed.rows("delta")))


def test_a_fragment_with_a_wire_rounds_only_its_buckets(task: Task) -> None:
    """int8 over buckets 0 and 2 laid end to end: every member holds the same values, each within one
    int8 step (the largest magnitude / 127) per rounding of the exact mean, not equal to it; buckets 1
    and 3 untouched."""
    reps = replicas(task)
    before = snapshot(reps)["delta"]
    op = AllReduce(ALL, elements=1.0, wire="int8", payload=Payload.PARAMETERS, tensor="delta", fragment=Fragment(0, 2))
    reps.collective_done(op, WHOLE)
    after = snapshot(reps)["delta"]
    largest = float(before.abs().max())
    for bucket, (a, b) in enumerate(reps.ranges):
        if bucket in (1, 3):
            assert torch.equal(after[:, a:b], before[:, a:b])
            continue
        assert all(torch.equal(after[r, a:b], after[0, a:b]) for r in range(WORLD))
        exact = before[:, a:b].mean(dim=0)
        assert torch.allclose(after[0, a:b], exact, rtol=0, atol=2 * WORLD * largest / 127)
        assert not torch.equal(after[0, a:b], exact)


def test_a_fragment_belongs_to_whole_model_hooks(task: Task) -> None:
    reps = replicas(task)
    with pytest.raises(PolicyError, match=r"policy 'test': Combine.*fragment in a bucket's program \(bucket 1\)"):
        reps.local(0, Combine("delta", ((1.0, "anchor"),), fragment=Fragment(0, 2)), 1)
    op = AllReduce(ALL, 1.0, payload=Payload.PARAMETERS, tensor="delta", fragment=Fragment(0, 2))
    with pytest.raises(PolicyError, match="policy 'test': AllReduce.*fragment in a bucket's program"):
        reps.collective_done(op, {r: 0 for r in range(WORLD)})
    with pytest.raises(PolicyError, match="narrows only a dense AllReduce to a fragment"):
        reps.collective_done(ReduceScatter(ALL, 1.0, tensor="delta", fragment=Fragment(0, 2)), WHOLE)


def test_a_local_op_acts_on_its_bucket_or_fragment_on_that_worker_only(task: Task) -> None:
    reps = replicas(task)
    before = snapshot(reps)
    reps.local(2, Combine("anchor", ((2.0, "delta"), (-1.0, "gradients"))), 1)  # bucket 1's program
    reps.local(3, Combine("anchor", ((1.0, "delta"),), fragment=Fragment(0, 2)), None)  # buckets 0, 2
    after = snapshot(reps)
    for r in range(WORLD):
        for bucket, (a, b) in enumerate(reps.ranges):
            if r == 2 and bucket == 1:
                expected = 2.0 * before["delta"][r, a:b] - before["gradients"][r, a:b]
            elif r == 3 and bucket in (0, 2):
                expected = before["delta"][r, a:b]
            else:
                expected = before["anchor"][r, a:b]
            assert torch.equal(after["anchor"][r, a:b], expected), (r, bucket)


def test_only_a_collective_on_the_parameters_takes_the_local_step_first(task: Task) -> None:
    reps = replicas(task)
    before = reps.params.clone()
    for r in range(WORLD):
        reps.arrive(r, AllReduce(ALL, 1.0, payload=Payload.PARAMETERS, tensor="delta"), None)
    assert torch.equal(reps.params, before)  # a parameter-space buffer: no step
    reps.arrive(0, AllReduce(ALL, 1.0, payload=Payload.PARAMETERS), None)
    assert not torch.equal(reps.params[0], before[0])  # the parameters: stepped
    assert torch.equal(reps.params[1:], before[1:])


def test_a_restart_starts_the_buffers_again_from_the_checkpoint(task: Task) -> None:
    reps = replicas(task)
    reps.rows("anchor")[0].add_(5.0)
    reps.stores[0].states["outer"] = {"momentum": torch.ones(task.size)}
    checkpoint = reps.restart(False, 0)
    assert torch.equal(checkpoint, reps.params.mean(dim=0))
    assert all(torch.equal(a, checkpoint) for a in reps.rows("anchor"))
    assert all(torch.count_nonzero(d) == 0 for d in reps.rows("delta"))
    assert reps.stores[0].states == {}


def test_phase_buffers_unite_the_phases_and_refuse_a_clash() -> None:
    class P:
        def __init__(self, *buffers: Buffer) -> None:
            self._buffers = buffers

        def buffers(self) -> tuple[Buffer, ...]:
            return self._buffers

    assert phase_buffers([P(*BUFFERS), P(BUFFERS[0]), P()]) == list(BUFFERS)
    with pytest.raises(
        PolicyError,
        match="buffer 'delta' is declared as Buffer.name='delta', initial='zeros'. and "
        "Buffer.name='delta', initial='parameters'.",
    ):
        phase_buffers([P(*BUFFERS), P(Buffer("delta", initial="parameters"))])


def test_evaluation_scores_worker_zeros_global_model(task: Task) -> None:
    """With a global tensor the consensus row scores worker 0's copy of it, as it stood when worker 0
    finished the iteration, not the replicas' mean; without one, the mean."""
    for global_tensor in ("anchor", None):
        reps = replicas(task, global_tensor=global_tensor)
        gen = torch.Generator().manual_seed(3)
        reps.params.copy_(torch.randn(WORLD, task.size, generator=gen))
        reps.rows("anchor")[0].copy_(torch.randn(task.size, generator=gen))
        held = reps.rows("anchor")[0].clone()
        evaluator = Evaluator(reps, 1, False, synchronous=True)
        for r in range(WORLD):
            evaluator.iteration_done(1.0, r)
            if r == 0:
                reps.rows("anchor")[0].add_(100.0)  # later changes are not what iteration 1 scores
        scored = held if global_tensor else reps.params.mean(dim=0)
        assert evaluator.rows[-1][4:] == task.evaluate(scored)
        assert evaluator.scored == (global_tensor or "mean")


def test_a_restart_checkpoints_the_global_model_when_the_phase_names_one(task: Task) -> None:
    reps = replicas(task, global_tensor="anchor")
    reps.rows("anchor")[0].add_(0.5)
    held = reps.rows("anchor")[0].clone()
    checkpoint = reps.restart(False, 0)
    assert torch.equal(checkpoint, held) and not torch.equal(checkpoint, task.initial)
    assert all(torch.equal(p, held) for p in reps.params)
