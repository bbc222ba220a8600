"""Which torch.distributed backend, and which device, a real process uses.

Training (`syncsim real`) keeps replicas and shards on the CPU, where gloo works and NCCL does not,
so `auto` means gloo there and `nccl` is refused up front rather than failing inside the first
collective. Calibration's measurements take a device, so it runs NCCL on the process's GPU
(`LOCAL_RANK`) when asked or, with `auto`, when the machine has one.
"""

from __future__ import annotations

import torch

from sim.errors import ConfigError

BACKENDS = ("auto", "gloo", "nccl")


def _check(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"backend: {backend!r}; allowed: {', '.join(BACKENDS)}")


def backend_for(backend: str, calibrate: bool = False) -> str:
    """The backend a training run (gloo: its tensors live on the CPU) or a calibration uses."""
    _check(backend)
    cuda = torch.cuda.is_available()
    if not calibrate:
        if backend == "nccl":
            raise ConfigError(
                "backend: 'nccl' needs CUDA tensors, and `syncsim real` keeps the model on the CPU; allowed here: "
                "auto, gloo (NCCL works for `syncsim calibrate` and for the DDP hooks of docs/real_hooks.md)"
            )
        return "gloo"
    if backend == "nccl" and not cuda:
        raise ConfigError("backend: 'nccl' needs a CUDA device and this machine has none; allowed here: auto, gloo")
    return "nccl" if backend == "nccl" or (backend == "auto" and cuda) else "gloo"


def device_for(backend: str, local_rank: int) -> torch.device:
    """The device a process's tensors live on: with NCCL its GPU (made current), else the CPU."""
    if backend != "nccl":
        return torch.device("cpu")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device
