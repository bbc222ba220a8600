"""Where each rank of a real run computed, and how much device memory it held: `ranks.csv`.

A GPU run that quietly trained on the CPU, or a parameter-server shard that took a worker's GPU,
shows up in the timing tables only as a slow step. This table says, per policy and rank, which
device the rank used (CUDA's name for it), the peak memory torch's caching allocator handed out
there during the policy, and (workers) how many fp16 gradients were recomputed at a lower loss
scale (`real.precision.LossScale`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import torch

RANK_FIELDS = ("policy", "rank", "role", "device", "device_name", "peak_memory_mb", "loss_scale", "overflows")


@dataclass(frozen=True)
class DeviceUse:
    """One rank's device during one policy."""

    device: str  # "cuda:0", "cpu"
    name: str  # "NVIDIA H200", "cpu"
    peak_bytes: int  # 0 on the CPU (torch keeps no allocator statistics there)


def begin(device: torch.device) -> None:
    """Start counting the peak at the policy's start (CUDA only)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def measured(device: torch.device) -> DeviceUse:
    """What `device` held since `begin`."""
    if device.type != "cuda":
        return DeviceUse("cpu", "cpu", 0)
    return DeviceUse(str(device), torch.cuda.get_device_name(device), int(torch.cuda.max_memory_allocated(device)))


def rank_rows(label: str, rows: Sequence[tuple[int, str, DeviceUse, float, int]]) -> list[tuple]:
    """`(rank, role, use, loss scale, overflows)` per rank -> rows of RANK_FIELDS."""
    return [
        (label, rank, role, use.device, use.name, use.peak_bytes / 2**20, scale, overflows)
        for rank, role, use, scale, overflows in sorted(rows, key=lambda r: r[0])
    ]


def rank_table(rows: Sequence[tuple]) -> pd.DataFrame:
    return pd.DataFrame(list(rows), columns=list(RANK_FIELDS))
