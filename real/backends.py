"""Which torch.distributed backend, and which device, a real process uses.

- **Device.** Every rank of `syncsim real` trains on its device: with CUDA, `cuda:LOCAL_RANK %
  device_count` (made current), else the CPU (`training_device`). Its replica, optimizer state,
  gradient buckets, batches and, on a shard rank, the shard's tensors live there (real/placement.py).
- **Backend.** `auto` is NCCL when CUDA is available, else gloo; `nccl` without CUDA is refused up
  front (a ConfigError naming `backend`) rather than failing inside the first collective. gloo on
  CUDA tensors is allowed: its collectives copy through the host, and its point-to-point messages
  are staged through pinned host buffers (real/transport.py).
- **What runs on the backend.** The workers' collectives and ring steps. Barriers, gathering the
  results, the phases' agreements and the parameter-server protocol run on a gloo group over host
  memory on every backend (real/transport.py says why), so under NCCL a shard may share a GPU
  with a worker.

Calibration (`calibrate=True`) chooses the backend by the same rule; its measurements run on the
device `device_for` gives: the process's GPU under NCCL, else the CPU.
"""

from __future__ import annotations

import torch

from sim.errors import ConfigError

BACKENDS = ("auto", "gloo", "nccl")


def _check(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"backend: {backend!r}; allowed: {', '.join(BACKENDS)}")


def backend_for(backend: str, calibrate: bool = False) -> str:
    """The backend a training run or (`calibrate`) a calibration uses: the same rule for both."""
    _check(backend)
    cuda = torch.cuda.is_available()
    if backend == "nccl" and not cuda:
        raise ConfigError("backend: 'nccl' needs a CUDA device and this machine has none; allowed here: auto, gloo")
    return "nccl" if backend == "nccl" or (backend == "auto" and cuda) else "gloo"


def training_device(local_rank: int) -> torch.device:
    """The device a training rank's tensors live on, whatever the backend: its GPU (made current)
    when CUDA is available, else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def device_for(backend: str, local_rank: int) -> torch.device:
    """The device a calibration process measures on: with NCCL its GPU (made current), else the CPU."""
    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device
