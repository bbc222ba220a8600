"""Where each rank of a real run computed, and how much device memory it held: `ranks.csv`.

A GPU run that quietly trained on the CPU, or a parameter-server shard that took a worker's GPU,
shows up in the timing tables only as a slow step. This table says, per policy and rank, which
device the rank used (CUDA's name for it), the peak memory its allocator handed out there during the
policy, and (workers) how many fp16 gradients were recomputed at a lower loss scale
(`real.precision.LossScale`).

Peak memory (`peak_memory_bytes`): on a GPU, `torch.cuda.max_memory_allocated` since the policy's start.
The CPU allocator keeps no peak, so a CPU worker samples the C library's own count of the bytes malloc has
handed out and not taken back (glibc's `mallinfo2`: chunks in use in every arena plus mmapped ones, every
thread's) after each torch op its main thread runs (a `TorchDispatchMode`), over the policy's first
`WATCHED_ITERATIONS` iterations (the warm-up the summary leaves out, so the sampling touches no reported
time; by then a step has allocated all it will). The peak is the largest sample minus the count when the
policy started: memory held before (the data set, the model module) is not in it; the worker's replica,
gradients, optimizer state and buffers are, and so are a step's transient tensors (activations, gradients
before they are reduced, collective buffers) as they stand between ops. Parameter-server ranks on the CPU,
and a C library without `mallinfo2`, report 0. (`torch.profiler`'s memory events would need no sampling,
but profiling beside the parameter-server protocol's threads corrupted the heap in torch 2.13.)
"""

from __future__ import annotations

import ctypes
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd
import torch
from torch.utils._python_dispatch import TorchDispatchMode

RANK_FIELDS = (
    "policy",
    "rank",
    "role",
    "device",
    "device_name",
    "peak_memory_bytes",
    "predicted_peak_memory_bytes",  # the real backend's layout for the model the workers train (real/memory.py)
    "simulated_peak_memory_bytes",  # sim.memory's for that model (DDP's or FSDP's layout, real/memory.py)
    "loss_scale",
    "overflows",
)
# `syncsim real --cpu-memory` sets it: the op-by-op watch slows a worker's first iterations several times over,
# which under load can stall a run's liveness checks, so a CPU run measures its peak only when asked
CPU_MEMORY_ENV = "SYNCSIM_REAL_CPU_MEMORY"
WATCHED_ITERATIONS = 3  # a CPU worker's peak: over its first iterations (all a step allocates is held by then)


@dataclass(frozen=True)
class DeviceUse:
    """One rank's device during one policy."""

    device: str  # "cuda:0", "cpu"
    name: str  # "NVIDIA H200", "cpu"
    peak_bytes: int  # see the module's text; 0 where nothing was measured (a CPU parameter-server rank)


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc 2.33 on): the allocator's own counts, in bytes."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _allocated_counter() -> Optional[Callable[[], int]]:
    """A function returning the bytes malloc has handed out and not taken back (every arena's chunks in use
    plus its mmapped ones), or None where the C library has no `mallinfo2`."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    mallinfo2.restype = _MallInfo2

    def allocated() -> int:
        info = mallinfo2()
        return int(info.uordblks + info.hblkhd)

    return allocated


class _CpuWatch(TorchDispatchMode):
    """The most bytes malloc held beyond what it held at the start, sampled after every torch op this thread
    runs, over the first `iterations` iterations."""

    def __init__(self, iterations: int, allocated: Callable[[], int]) -> None:
        super().__init__()
        self.left, self.allocated = iterations, allocated
        self.base, self.peak, self.watching = 0, 0, True
        self.__enter__()
        torch.zeros(1).add_(1)  # the first op under a mode imports and builds what dispatch needs: not the policy's
        self.base, self.peak = allocated(), 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, self.allocated() - self.base)
        return out

    def iteration_done(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.stop()

    def stop(self) -> int:
        if self.watching:
            self.watching = False
            self.__exit__(None, None, None)
        return self.peak


_watch: Optional[_CpuWatch] = None


def begin(device: torch.device, watch: bool = True) -> None:
    """Start counting the peak at the policy's start (`watch`: on the CPU too, see the module's text)."""
    global _watch
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif watch and os.environ.get(CPU_MEMORY_ENV) == "1":
        allocated = _allocated_counter()
        _watch = _CpuWatch(WATCHED_ITERATIONS, allocated) if allocated is not None else None


def iteration_done() -> None:
    """A worker finished an iteration (the CPU watch stops after its first few)."""
    if _watch is not None:
        _watch.iteration_done()


def measured(device: torch.device) -> DeviceUse:
    """What `device` held since `begin`."""
    global _watch
    if device.type != "cuda":
        peak = _watch.stop() if _watch is not None else 0
        _watch = None
        return DeviceUse("cpu", "cpu", peak)
    return DeviceUse(str(device), torch.cuda.get_device_name(device), int(torch.cuda.max_memory_allocated(device)))


def rank_rows(
    label: str,
    rows: Sequence[tuple[int, str, DeviceUse, float, int]],
    predicted: float = math.nan,
    simulated: float = math.nan,
) -> list[tuple]:
    """`(rank, role, use, loss scale, overflows)` per rank -> rows of RANK_FIELDS; `predicted`, `simulated`: the
    peak per worker of the real backend's layout and of `sim.memory` (NaN on parameter-server ranks, which
    neither predicts)."""
    return [
        (
            label,
            rank,
            role,
            use.device,
            use.name,
            use.peak_bytes,
            predicted if role == "worker" else math.nan,
            simulated if role == "worker" else math.nan,
            scale,
            overflows,
        )
        for rank, role, use, scale, overflows in sorted(rows, key=lambda r: r[0])
    ]


def rank_table(rows: Sequence[tuple]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(RANK_FIELDS))
