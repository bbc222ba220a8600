"""Ops with a `wire` on gloo (real/wire_collectives.py) leave the values numerics mode leaves
(sim/numerics/replicas.py): three ranks, so the ring's order of additions matters, a group listed out of
rank order, every family of type (bf16 ring sums, int8 and fp4 blocks summed in fp32, fp8 reduce-scatter
then all-gather). One spawn of three gloo processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from policies.ops import AllGather, AllReduce, Collective, Group, Payload, ReduceScatter  # noqa: E402
from policies.wire import wire_nbytes  # noqa: E402
from real.collectives import start  # noqa: E402
from real.hooks import FlatReplica  # noqa: E402
from real.launch import free_port  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.numerics.replicas import Replicas  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

WORLD = 3
CFG = NumericsConfig(model="logreg", global_batch=15)


def programs(size: int) -> dict[str, list[Collective]]:
    g, shuffled = Group.of(range(WORLD)), Group.of([2, 0, 1])
    return {
        "bf16": [AllReduce(shuffled, elements=size, wire="bf16")],
        "int8": [AllReduce(g, elements=size, wire="int8", block=16)],
        "fp4": [AllReduce(shuffled, elements=size, wire="fp4")],
        "fp8_2d": [ReduceScatter(g, elements=size, wire="fp8_e4m3"), AllGather(g, elements=size, wire="fp8_e4m3")],
    }


def values(rank: int, size: int) -> Any:
    """Gradients whose magnitudes vary along the vector, so blocks get different scales."""
    gen = torch.Generator().manual_seed(rank)
    return torch.randn(size, generator=gen) * torch.linspace(1e-3, 1.0, size) + 1.0


def _worker(rank: int, init: str, size: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        result: dict[str, Any] = {}
        for name, ops in programs(size).items():
            target = FlatReplica(rank, "test", values(rank, size), Payload.GRADIENTS)
            sent = 0
            for op in ops:
                started = start(op, target, 0, dist.group.WORLD)
                started.work.wait()
                assert started.finish is not None
                started.finish()
                sent += started.nbytes
            result[name] = (target.tensor.clone(), sent)
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_gloo_ops_with_a_wire_leave_numerics_modes_values(tmp_path: Path) -> None:
    task = Task(CFG, 0)
    size = task.size
    mp.spawn(_worker, args=(f"tcp://127.0.0.1:{free_port()}", size, str(tmp_path)), nprocs=WORLD)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    exact = sum(values(r, size) for r in range(WORLD)) / WORLD
    for name, ops in programs(size).items():
        reps = Replicas(CFG, task, WORLD, (1.0,), 10, 0, "test", False)
        reps.grads.copy_(torch.stack([values(r, size) for r in range(WORLD)]))
        for op in ops:
            reps.collective_done(op, {r: 0 for r in range(WORLD)})
        worst = max(float((ranks[r][name][0] - reps.grads[r]).abs().max()) for r in range(WORLD))
        print(
            f"{name}: max |gloo - numerics| = {worst:.3g}; off the fp32 mean by "
            f"{float((reps.grads[0] - exact).abs().max()):.3g}"
        )
        assert worst <= 1e-7, name
        assert float((reps.grads[0] - exact).abs().max()) > 1e-4, name  # the type's rounding is there
        for r in range(WORLD):
            assert torch.equal(reps.grads[r], reps.grads[0]), name  # every member ends the same
            declared = sum(op.nbytes for op in ops) if name != "fp8_2d" else 2 * wire_nbytes(size, "fp8_e4m3")
            assert abs(ranks[r][name][1] - declared) <= 1, name  # the bytes the op declares
