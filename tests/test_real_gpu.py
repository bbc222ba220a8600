"""The GPU paths of real/: the DDP hooks (ring, hierarchical) on CUDA tensors under NCCL (world
size 1, as on one GPU) and under gloo across two ranks sharing the GPU, against DDP's own
all-reduce; and calibration's collective measurement on a CUDA device. Skipped without CUDA (the CI
machine has none)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from real.backends import backend_for, device_for  # noqa: E402
from real.calibrate import measure  # noqa: E402
from real.hooks import make_hook_state, policy_hook  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

STEPS = 3


def _ddp_grads(rank: int, world: int, device: Any, policy: str | None) -> list[Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    model = DDP(model, device_ids=[device.index], bucket_cap_mb=1e-4)
    if policy is not None:
        view = {"topology": "star", "hosts": 1, "gpus_per_host": world}
        model.register_comm_hook(make_hook_state(policy, None, view, model), policy_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(8, 5, generator=g).to(device), torch.randn(8, 3, generator=g).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.grad.detach().cpu().clone() for p in model.parameters()]


def _worker(rank: int, backend: str, world: int, init: str, out: str) -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        result = {
            policy or "reference": _ddp_grads(rank, world, device, policy) for policy in (None, "ring", "hierarchical")
        }
        if backend == "nccl":
            curve = measure.collective_curve([1 << 10, 1 << 20], 3, device=device) or []
            result["collectives"] = [(s.nbytes, s.seconds) for s in curve]  # plain values: torch.load's weights_only
        torch.save(result, Path(out) / f"{backend}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path: Path, backend: str, world: int) -> list[dict[str, Any]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(backend, world, f"tcp://127.0.0.1:{port}", str(tmp_path)), nprocs=world)
    return [torch.load(tmp_path / f"{backend}-rank{r}.pt") for r in range(world)]


@pytest.mark.parametrize(("backend", "world"), [("nccl", 1), ("gloo", 2)])
def test_hooks_on_cuda_tensors_match_ddp(tmp_path: Path, backend: str, world: int) -> None:
    for rank, result in enumerate(_spawn(tmp_path, backend, world)):
        for policy in ("ring", "hierarchical"):  # hierarchical: ring reduce-scatter and all-gather on CUDA
            for a, b in zip(result["reference"], result[policy]):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{backend} {policy}: rank {rank} gradients differ"
        if backend == "nccl":
            assert [n for n, _ in result["collectives"]] == [1 << 10, 1 << 20]
            assert all(seconds > 0 for _, seconds in result["collectives"])


def test_calibration_picks_nccl_on_the_process_gpu() -> None:
    assert backend_for("auto", calibrate=True) == "nccl"
    assert device_for("nccl", local_rank=torch.cuda.device_count()) == torch.device("cuda", 0)
    assert backend_for("auto") == "gloo"  # training keeps its tensors on the CPU


def test_a_profile_is_measured_on_the_gpu_with_cuda_events(tmp_path: Path) -> None:
    from real.profiler import measure_profile

    profile = measure_profile("resnet32", 32, "fp16", warmup=2, repeats=5)
    assert profile.device == torch.cuda.get_device_name()
    assert all(t.forward_s >= 0 and t.backward_s >= 0 for t in profile.layers)
    assert 0 < profile.forward_s < profile.forward_s + profile.backward_s < 1.0
