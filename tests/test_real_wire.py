"""Gradients on the wire (`workload.gradient_precision`): under fp16 a dense gradient collective on gloo
sends 16-bit values, counts the 2 bytes a value the simulator's buckets count, and leaves the values
numerics mode leaves; parameters still travel in fp32. One spawn of two gloo processes."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from policies.ops import AllGather, AllReduce, Group, Payload, ReduceScatter  # noqa: E402
from real.collectives import start  # noqa: E402
from real.hooks import FlatReplica  # noqa: E402
from sim.catalog.gpus import get_gpu  # noqa: E402
from sim.compute.workload import compute_plan  # noqa: E402
from sim.config import WorkloadConfig  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _numerics(task: Task, ops: list[Any]) -> Any:
    """Worker 0's gradient after `ops` in numerics mode, gradients sent in fp16."""
    reps = Replicas(CFG, task, WORLD, (1.0,), 10, 0, "test", False, gradient_precision="fp16")
    reps.grads.copy_(torch.stack([_values(r, task.size) for r in range(WORLD)]))
    for op in ops:
        reps.collective_done(op, {0: 0, 1: 0})
    return reps.grads


def test_fp16_gradients_travel_in_16_bits_as_the_simulator_counts_and_numerics_mode_rounds(tmp_path: Path) -> None:
    task = Task(CFG, 0)
    size = task.size
    mp.spawn(_worker, args=(f"tcp://127.0.0.1:{_free_port()}", size, str(tmp_path)), nprocs=WORLD)
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
