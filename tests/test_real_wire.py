"""Gradients on the wire (`workload.gradient_precision`): under fp16 a dense gradient collective on gloo
sends 16-bit values, counts the 2 bytes a value the simulator's buckets count, and leaves the values
numerics mode leaves; parameter collectives still travel in fp32. Parameter-server frames (in-process):
pushes and pulls carry 16-bit values two a float32 slot, 2 bytes a value as the simulator prices
them, and leave what numerics mode leaves. One spawn of two gloo processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from policies.ops import AllGather, AllReduce, Group, Payload, Pull, Push, ReduceScatter, ServerSpec  # noqa: E402
from real import executor as ex  # noqa: E402
from real import protocol as wire  # noqa: E402
from real.collectives import start  # noqa: E402
from real.hooks import FlatReplica  # noqa: E402
from real.launch import free_port  # noqa: E402
from real.messages import item_messages  # noqa: E402
from real.server import ShardServer  # noqa: E402
from sim.catalog.gpus import get_gpu  # noqa: E402
from sim.compute.workload import compute_plan  # noqa: E402
from sim.config import WorkloadConfig  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.numerics.replica import through_wire  # noqa: E402
from sim.numerics.replicas import Replicas  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

WORLD = 2
GROUP = Group.of([0, 1])
CFG = NumericsConfig(model="logreg", global_batch=16)


def _values(rank: int, size: int) -> Any:
    """Gradients whose fp16 rounding shows: 1 + small offsets (fp16 keeps 11 bits)."""
    return 1.0 + torch.randn(size, generator=torch.Generator().manual_seed(rank)) * 1e-3


def _run(op: Any, target: FlatReplica) -> int:
    started = start(op, target, 0, dist.group.WORLD)
    started.work.wait()
    assert started.finish is not None
    started.finish()
    return started.nbytes


def _worker(rank: int, init: str, size: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        result: dict[str, Any] = {}
        grads = FlatReplica(rank, "test", _values(rank, size), Payload.GRADIENTS)
        grads.wire = torch.float16  # type: ignore[attr-defined]  # as a Replica of an fp16 workload has it
        result["all_reduce_bytes"] = _run(AllReduce(GROUP, 2.0 * size), grads)
        result["all_reduce"] = grads.tensor.clone()
        grads.tensor.copy_(_values(rank, size))
        result["scatter_bytes"] = _run(ReduceScatter(GROUP, 2.0 * size), grads)
        result["gather_bytes"] = _run(AllGather(GROUP, 2.0 * size), grads)
        result["two_d"] = grads.tensor.clone()
        params = FlatReplica(rank, "test", _values(rank, size), Payload.PARAMETERS)
        params.wire = torch.float16  # type: ignore[attr-defined]
        result["parameter_bytes"] = _run(AllReduce(GROUP, 4.0 * size, payload=Payload.PARAMETERS), params)
        result["parameters"] = params.tensor.clone()
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _numerics(task: Task, ops: list[Any]) -> Any:
    """Worker 0's gradient after `ops` in numerics mode, gradients sent in fp16."""
    reps = Replicas(CFG, task, WORLD, (1.0,), 10, 0, "test", False, gradient_precision="fp16")
    reps.grads.copy_(torch.stack([_values(r, task.size) for r in range(WORLD)]))
    for op in ops:
        reps.collective_done(op, {0: 0, 1: 0})
    return reps.grads


@pytest.mark.slow
def test_fp16_gradients_travel_in_16_bits_as_the_simulator_counts_and_numerics_mode_rounds(tmp_path: Path) -> None:
    task = Task(CFG, 0)
    size = task.size
    mp.spawn(_worker, args=(f"tcp://127.0.0.1:{free_port()}", size, str(tmp_path)), nprocs=WORLD)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]

    # the simulator's bucket of these `size` values under fp16 (gradient_precision auto)
    workload = WorkloadConfig(model="synthetic", gradient_mb=2e-6 * size, compute_ms=1, precision="fp16")
    (bucket,) = compute_plan(workload, get_gpu("V100")).buckets
    for r in ranks:
        assert r["all_reduce_bytes"] == bucket.nbytes == 2 * size
        assert r["scatter_bytes"] == 2 * size and r["gather_bytes"] == 2 * (size // 2 + size % 2)
        assert r["parameter_bytes"] == 4 * size  # parameters keep fp32

    reference = _numerics(task, [AllReduce(GROUP, 2.0 * size)])
    two_d = _numerics(task, [ReduceScatter(GROUP, 2.0 * size), AllGather(GROUP, 2.0 * size)])
    for r, result in enumerate(ranks):
        torch.testing.assert_close(result["all_reduce"], reference[r], rtol=0, atol=1e-7)
        torch.testing.assert_close(result["two_d"], two_d[r], rtol=0, atol=1e-7)
    exact = (_values(0, size) + _values(1, size)) / 2
    assert (ranks[0]["all_reduce"] - exact).abs().max() > 1e-4  # the rounding is there: fp16 steps are ~1e-3
    torch.testing.assert_close(ranks[0]["parameters"], exact, rtol=1e-6, atol=1e-7)  # fp32 average


# ----------------------------------------------------------------------------- parameter-server frames
class _Done:
    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _sim_bucket_bytes(values: int, precision: str) -> float:
    """What the simulator prices a bucket of `values` gradient values at under `gradient_precision`."""
    workload = WorkloadConfig(
        model="synthetic", gradient_mb=2e-6 * values, compute_ms=1, precision="fp16", gradient_precision=precision
    )
    (bucket,) = compute_plan(workload, get_gpu("V100")).buckets
    return bucket.nbytes


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_a_push_and_a_pull_carry_16_bit_values_as_the_simulator_prices_and_numerics_mode_rounds(
    precision: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's push frame holds its gradient in `precision` two values a float32 slot (2 bytes a
    value, the simulator's bucket bytes); the shard reads the values numerics mode pushes. A pull's
    reply comes in `precision` too, and the worker ends with numerics mode's (rounded) parameters."""
    task = Task(CFG, 0)
    n = task.size  # odd: the last slot is half pad
    reps = Replicas(CFG, task, WORLD, (1.0,), 10, 0, "ps", True, gradient_precision=precision)
    numerics = Replicas(CFG, task, WORLD, (1.0,), 10, 0, "ps", True, gradient_precision=precision)
    for r in (reps, numerics):
        r.grads[0] = _values(0, n)
        r.server.params.copy_(_values(1, n))  # type: ignore[union-attr]
    replica = reps.replicas[0]
    sent: list[Any] = []
    monkeypatch.setattr(wire, "send", lambda message, shard: sent.append(message) or _Done())

    def shard_answers(buffer: Any, src: int, tag: int) -> _Done:  # the reply arrives as the shard sends it
        server = ShardServer(ServerSpec(0, "h0"), 2, numerics.server, coordinator=False, claims=None)
        replies: list[Any] = []
        server._send = lambda tensor, dst, tag: replies.append(tensor)  # type: ignore[method-assign]
        server._reply(0, 0, 0, n, 0.0, on_wire=wire.wire_of(sent[-1]))
        buffer[: replies[0].numel()] = replies[0]
        return _Done()

    monkeypatch.setattr(wire, "expect", shard_answers)
    executor = ex.RankExecutor(0, "ps", None, replica, [1], None, 10.0, None)  # type: ignore[arg-type]

    def issue(slot: Any) -> int:
        """Send the slot's message as the executor does when the slot's item starts."""
        flights = item_messages(0, 0, [slot], replica, executor.shard_ranks, None, "ps", executor.blocked)
        for flight in flights:
            executor._launch(flight)
        return len(flights)

    push = ex.Slot(Push(shard=0, nbytes=2.0 * n), 0, 0, 0)
    assert issue(push) == 1
    (message,) = sent
    assert message.numel() == wire.HEADER_FLOATS + (n + 1) // 2
    (update,) = numerics.push_updates(0, 0, [Push(shard=0, nbytes=2.0 * n)])
    assert torch.equal(wire.payload_of(message, 0, n), update.values)  # what numerics mode's shard gets
    assert not torch.equal(update.values, _values(0, n))  # rounded: 1 + 1e-3 offsets show it

    pull = ex.Slot(Pull(shard=0, nbytes=2.0 * n), 0, 1, 0)
    assert issue(pull) == 1
    done: list[Any] = []
    while len(done) < 2:  # the push's and the pull's flights
        done += executor._wait()
    for flight in done:
        executor._complete(0, flight)
    numerics.pulled(0, numerics.pull_ranges(0, 0, [Pull(shard=0, nbytes=2.0 * n)]))
    assert torch.equal(replica.params, numerics.params[0])
    torch.testing.assert_close(replica.params, through_wire(_values(1, n), replica.wire), rtol=0, atol=0)
    assert not torch.equal(replica.params, _values(1, n))  # the shard's fp32 master copy stays
    assert torch.equal(numerics.server.params, _values(1, n))  # type: ignore[union-attr]

    bytes_by_kind = {kind: nbytes for _, _, kind, _, _, nbytes, _, _ in executor.p2p}
    assert bytes_by_kind == {"push": 2 * n, "pull": 2 * n} and 2 * n == _sim_bucket_bytes(n, precision)


def test_frames_under_fp32_are_unchanged() -> None:
    values = _values(0, 5)
    message = wire.push(2, 10, 15, values)
    assert message.numel() == wire.HEADER_FLOATS + 5 and wire.push_bytes(message) == 20
    assert torch.equal(wire.payload_of(message, 10, 15), values) and wire.wire_of(message) is None
    got, held = wire.read_dense_reply(wire.dense_reply(values, 0.5), 5)
    assert torch.equal(got, values) and held == 0.5
