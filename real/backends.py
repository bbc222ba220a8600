"""Which torch.distributed backend, and which device, a real process uses.

- **Device.** A worker trains on `cuda:LOCAL_RANK % device_count` (made current) when CUDA is
  available, else on the CPU (`training_device`). Its replica, optimizer state, gradient buckets
  and batches live there (real/placement.py). Ranks fill nodes in blocks (torchrun; `syncsim real`
  puts every rank on its machine) and the workers hold the lowest ranks, so a worker's LOCAL_RANK
  is its index among its node's workers: with a GPU per worker, each has its own. Shard ranks are
  counted past the workers and take part in no NCCL communicator and stay on the host (real/session.py).
- **Backend.** NCCL refuses two ranks of one communicator on one GPU (it fails at the first
  collective, after every process started), so the rule counts the workers a node must hold, not
  its processes: `workers_per_node` is the first node's, min(LOCAL_WORLD_SIZE, workers), the most
  any node holds, a figure every rank computes alike so all choose the same backend (this assumes
  every node has as many GPUs as this one). `auto` is NCCL when CUDA is available and that many
  GPUs exist, else gloo, and says why when GPUs were there but too few (`note`). `nccl` without
  CUDA, or with workers that would share a GPU, is refused up front: a ConfigError naming
  `backend` and the counts. gloo on CUDA tensors is allowed (workers may then share a GPU): its
  collectives copy through the host, and its point-to-point messages are staged through pinned
  host buffers (real/transport.py).
- **What runs on the backend.** The workers' collectives and ring steps. Barriers, gathering the
  results, the phases' agreements and the parameter-server protocol run on a gloo group over host
  memory on every backend (real/transport.py says why).

Calibration (`calibrate=True`) chooses the backend by the same rule; its measurements run on the
device `device_for` gives: the process's GPU under NCCL, else the CPU.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import torch

from sim.errors import ConfigError

BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Choice:
    backend: str  # gloo | nccl
    why: Optional[str] = None  # set when `auto` chose gloo on a machine with GPUs


def _check(backend: str) -> None:
    if backend not in BACKENDS:
        raise ConfigError(f"backend: {backend!r}; allowed: {', '.join(BACKENDS)}")


def workers_per_node(workers: int, env: Mapping[str, str] = os.environ) -> int:
    """The most workers one node of this run holds: min(LOCAL_WORLD_SIZE, `workers`), since ranks
    fill nodes in blocks of LOCAL_WORLD_SIZE and the workers hold the lowest ranks. `syncsim real`
    sets LOCAL_WORLD_SIZE to the world size (every rank on its machine); without it (a launcher
    other than torchrun that omits it) every rank counts as on this node."""
    size = env.get("LOCAL_WORLD_SIZE") or env.get("WORLD_SIZE")
    return min(int(size), workers) if size else workers


def choose(backend: str, node_workers: Optional[int] = None) -> Choice:
    """The backend for `backend` (auto, gloo, nccl) when a node holds `node_workers` workers
    (`workers_per_node`; None: not known yet, only CUDA's presence is checked)."""
    _check(backend)
    if backend == "gloo":
        return Choice("gloo")
    if not torch.cuda.is_available():
        if backend == "nccl":
            raise ConfigError("backend: 'nccl' needs a CUDA device and this machine has none; allowed here: auto, gloo")
        return Choice("gloo")
    gpus = torch.cuda.device_count()
    if node_workers is None or node_workers <= gpus:
        return Choice("nccl")
    shared = (
        f"{node_workers} workers on one node would share its {gpus} GPU{'s' if gpus != 1 else ''}, "
        "and NCCL refuses two ranks of a communicator on one GPU"
    )
    if backend == "nccl":
        raise ConfigError(f"backend: 'nccl' needs a GPU per worker: {shared}; allowed here: auto, gloo")
    return Choice("gloo", f"--backend auto chose gloo, not NCCL: {shared}")


def backend_for(backend: str, calibrate: bool = False, node_workers: Optional[int] = None, note: bool = False) -> str:
    """The backend a training run or (`calibrate`) a calibration uses: the same rule for both
    (`choose`); `note`: print why on stderr when `auto` chose gloo on a machine with GPUs."""
    choice = choose(backend, node_workers)
    if note and choice.why:
        print(choice.why, file=sys.stderr)
    return choice.backend


def training_device(local_rank: int) -> torch.device:
    """The device a worker's tensors live on, whatever the backend: GPU `local_rank` (modulo the
    GPUs, made current) when CUDA is available, else the CPU. `local_rank` is the worker's index
    among its node's workers (its LOCAL_RANK: the module docstring says why)."""
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
