"""Where each rank of a real run computed, and how much device memory it held: `ranks.csv`.

A GPU run that quietly trained on the CPU, or a parameter-server shard that took a worker's GPU,
shows up in the timing tables only as a slow step. This table says, per policy and rank, which
device the rank used (CUDA's name for it), the peak memory its allocator handed out there during the
policy, and (workers) how many fp16 gradients were recomputed at a lower loss scale
(`real.precision.LossScale`).

Peak memory (`peak_memory_bytes`): on a GPU, `torch.cuda.max_memory_allocated` since the policy's start.
The CPU allocator keeps no such statistic, so a CPU worker runs `torch.profiler` with `profile_memory`
over the policy's first `WATCHED_ITERATIONS` iterations (the warm-up the summary leaves out, so the
profiler's overhead touches no reported timing): c10's CPU allocator reports each allocation and free
to it, and the peak is the largest sum of the blocks allocated and not yet freed (`_peak_allocated` says
which events it can see: those of the worker's main thread, where its tensors are made and, since the
executor lets go of finished collectives there, freed; a ring step's receive buffer, allocated and freed
on a waiter thread, is not seen). Memory the process held before the policy started (the data set, the
model module) is not in it; every state the policy's worker allocates (its replica, gradients, optimizer
state, buffers) is, as are the transient tensors of a step (activations, gradients before they are
reduced, collective buffers).
Parameter-server ranks on the CPU report 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd
import torch

RANK_FIELDS = ("policy", "rank", "role", "device", "device_name", "peak_memory_bytes", "loss_scale", "overflows")
WATCHED_ITERATIONS = 3  # a CPU worker's peak: over its first iterations (all a step allocates is held by then)


@dataclass(frozen=True)
class DeviceUse:
    """One rank's device during one policy."""

    device: str  # "cuda:0", "cpu"
    name: str  # "NVIDIA H200", "cpu"
    peak_bytes: int  # see the module's text; 0 where nothing was measured (a CPU parameter-server rank)


class _CpuWatch:
    """The CPU allocator's peak over the first `iterations` iterations, from `torch.profiler`'s memory events."""

    def __init__(self, iterations: int) -> None:
        from torch.profiler import ProfilerActivity, profile

        self.left, self.peak = iterations, 0
        self._profile: Optional[Any] = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        self._profile.__enter__()

    def iteration_done(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.stop()

    def stop(self) -> int:
        if self._profile is not None:
            prof, self._profile = self._profile, None
            prof.__exit__(None, None, None)
            self.peak = _peak_allocated(prof)
        return self.peak


def _peak_allocated(prof: Any) -> int:
    """The largest sum of the CPU blocks allocated since profiling began and not yet freed, over the profile's
    allocation and free events in time order.

    The profiler hears of an allocation or a free only on the thread it profiles (this process's main
    thread); the allocator's own running total (`total_allocated`) is therefore not used: a block the main
    thread allocated and another thread freed would count forever. A block is tracked by its address: a free
    of an untracked one is ignored (allocated before profiling, or on another thread), and an allocation at
    an address still tracked replaces that block (its free happened where the profiler did not see it)."""
    from torch._C._profiler import _EventType

    events, stack = [], list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            fields = event.extra_fields
            events.append((event.start_time_ns, int(fields.alloc_size), int(fields.ptr)))
    held: dict[int, int] = {}
    total = peak = 0
    for _, size, ptr in sorted(events):
        if size > 0:
            total += size - held.get(ptr, 0)
            held[ptr] = size
            peak = max(peak, total)
        else:
            total -= held.pop(ptr, 0)
    return peak


_watch: Optional[_CpuWatch] = None


def begin(device: torch.device, watch: bool = True) -> None:
    """Start counting the peak at the policy's start (`watch`: on the CPU too, see the module's text)."""
    global _watch
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif watch:
        _watch = _CpuWatch(WATCHED_ITERATIONS)


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


def rank_rows(label: str, rows: Sequence[tuple[int, str, DeviceUse, float, int]]) -> list[tuple]:
    """`(rank, role, use, loss scale, overflows)` per rank -> rows of RANK_FIELDS."""
    return [
        (label, rank, role, use.device, use.name, use.peak_bytes, scale, overflows)
        for rank, role, use, scale, overflows in sorted(rows, key=lambda r: r[0])
    ]


def rank_table(rows: Sequence[tuple]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(RANK_FIELDS))
