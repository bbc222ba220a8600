"""A zoo model's compute measured per layer on each rank's device (`real.profiler.measure_profile`).

Every rank profiles at once, as in training (ranks that share a device or cores contend as they
would then); rank 0 keeps the slowest rank's profile (the largest forward + backward), because a
synchronous step waits for the last rank. The profile runs in the spec's precision (the workload's,
`profile_spec`), with the TF32 switches and autocast training uses; on a GPU, with the rank's device
made current, its stamps CUDA events on that device after warm-up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch.distributed as dist

from real.calibrate.rows import ComputeSample
from real.profiler import measure_profile
from sim.catalog.zoo import canonical_name
from sim.compute.profile import ComputeProfile

WARMUP = 3
MIN_REPEATS = 10


@dataclass(frozen=True)
class ProfileSpec:
    """What to profile: the workload's zoo model at its per-GPU batch and precision."""

    model: str
    batch: int
    precision: str


def profile_spec(config: Any) -> Optional[ProfileSpec]:
    """The workload's zoo model when the real backend trains it (no numerics model of its own,
    or numerics training that same zoo model); None for a synthetic workload or another model,
    whose compute is the numerics model's lockstep time (`measure.compute`)."""
    w = config.workload
    if w.model == "synthetic":
        return None
    if config.numerics_on and not config.numerics.zoo_model:
        return None
    return ProfileSpec(canonical_name(w.model), int(w.batch_size), str(w.precision))


def slowest(profiles: Sequence[ComputeProfile]) -> ComputeProfile:
    """The profile with the largest forward + backward."""
    return max(profiles, key=lambda p: p.forward_s + p.backward_s)


def measure(
    spec: ProfileSpec, repeats: int, *, device: Union[str, Any] = "cpu", warmup: int = WARMUP
) -> Optional[tuple[ComputeProfile, list[ComputeSample]]]:
    """Profile `spec` on `device` on every rank. On rank 0: the slowest rank's profile and one row
    per rank with its total; None elsewhere (without a process group: this process alone)."""
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    distributed = dist.is_available() and dist.is_initialized()
    if distributed:  # start together, so ranks that share a device contend as in training
        dist.barrier()
    mine = measure_profile(
        spec.model, spec.batch, spec.precision, device=str(device), warmup=warmup, repeats=max(repeats, MIN_REPEATS)
    )
    parts: Optional[list[Any]] = [mine]
    if distributed:
        parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(mine, parts, dst=0)
    if parts is None:
        return None
    rows = [ComputeSample(rank, spec.batch, p.forward_s + p.backward_s, 0.0) for rank, p in enumerate(parts)]
    best = slowest(parts)
    notes = {**best.notes, "ranks": len(parts), "kept": "the slowest rank's (largest forward + backward)"}
    return ComputeProfile(best.model, best.batch_size, best.precision, best.layers, best.device, notes), rows
