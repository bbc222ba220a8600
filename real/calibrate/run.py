"""`calibrate`: run every measurement in a sensible order on every rank, fit on rank 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import torch.distributed as dist

import real.calibrate.measure as measure
import real.calibrate.profiled as profiled
from real.calibrate.errors import CalibrationError
from real.calibrate.figures import detect_racks, fit_pairs
from real.calibrate.fit import fit_report
from real.calibrate.probe import probe_sizes
from real.calibrate.report import CalibrationReport
from real.calibrate.rows import Measurements
from sim.config.calibration import CalibrationConfig

DEFAULTS = CalibrationConfig()


def calibrate(
    rank: int,
    world: int,
    rank_hosts: Sequence[str],
    host_racks: Optional[Mapping[str, str]],
    task_or_none: Optional[Any],
    *,
    device: Any = "cpu",
    sizes: Optional[Sequence[int]] = None,
    repeats: int = DEFAULTS.repeats,
    uplink_bytes: Optional[int] = None,
    collective_sizes: Optional[Sequence[int]] = None,
    collective_ops: Sequence[str] = ("all_reduce",),
    batch: Optional[int] = None,
    intra_host_latency_us: float = 1.0,
    fold_efficiency: bool = True,
    statistic: measure.Statistic = DEFAULTS.statistic,
    max_bytes: int = DEFAULTS.max_bytes,
    bandwidth_factor: float = DEFAULTS.bandwidth_factor,
    profile: Optional[profiled.ProfileSpec] = None,
    compute_device: Any = None,
    nccl_gpu: Optional[str] = None,
    nics_per_host: int = 1,
    precision: str = "fp32",
    host_datacenters: Optional[Mapping[str, str]] = None,
) -> Optional[CalibrationReport]:
    """Measure and fit; call on every rank after `init_process_group`, with the same arguments.

    Order: compute (every rank at once, as in training, before the network is busy), a probe that
    sizes the messages (skipped when `sizes`, `collective_sizes` and `uplink_bytes` are all given;
    `real.calibrate.sizes`), host-pair ping-pong, rack egress, collectives. Compute is the zoo
    model's per-layer `profile` when given, else the numerics task's lockstep step
    (`measure.compute`), else not measured; either runs on `compute_device` (default: `device` for
    a profile, the CPU for the task). The task's step runs in `precision` (the workload's, as training
    runs it); a profile runs in its own spec's precision. `host_racks` None: racks
    are detected from the pair bandwidths on rank 0 and broadcast before the egress test. `batch`
    defaults to the numerics per-worker batch (global_batch / world). `statistic`: "median",
    "mean" or "min" over repeats ("min" is robust on shared machines, where interference only adds
    time). `nccl_gpu`, `nics_per_host`: see `fit_report` (measurements over NCCL). `host_datacenters`:
    host -> datacenter on a multi_datacenter cluster (`Measurements`). Returns the report on rank 0, None
    elsewhere.
    """
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("calibrate: no default process group; call torch.distributed.init_process_group first")
    if rank != dist.get_rank():
        raise ValueError(f"rank: {rank} but the process group says {dist.get_rank()}")
    if world != dist.get_world_size():
        raise ValueError(f"world: {world} but the process group has {dist.get_world_size()} ranks")
    if len(rank_hosts) != world:
        raise ValueError(f"rank_hosts: {len(rank_hosts)} entries for a world of {world} ranks")
    if len(set(rank_hosts)) < 2:
        raise ValueError(f"rank_hosts: every rank is on host {rank_hosts[0]!r}; calibration needs two hosts")

    computes, gradient_bytes, measured_profile = None, None, None
    if profile is not None:
        out = profiled.measure(profile, repeats, device=device if compute_device is None else compute_device)
        measured_profile, computes = out if out is not None else (None, None)
        batch = profile.batch
    elif task_or_none is not None:
        if batch is None:
            batch = max(1, task_or_none.cfg.global_batch // world)
        computes = measure.compute(
            task_or_none,
            batch,
            max(repeats, 20),
            device=device,
            compute_device=compute_device,
            statistic=statistic,
            precision=precision,
        )
        gradient_bytes = int(task_or_none.initial.numel() * task_or_none.initial.element_size())
    if sizes is None or collective_sizes is None or uplink_bytes is None:
        plan = probe_sizes(
            rank_hosts,
            factor=bandwidth_factor,
            max_bytes=max_bytes,
            uplink_bytes=uplink_bytes,
            device=device,
        )
        sizes = plan.p2p if sizes is None else sizes
        collective_sizes = plan.collective if collective_sizes is None else collective_sizes
        uplink_bytes = plan.uplink
    pairs = measure.p2p(rank_hosts, sizes, repeats, device=device, statistic=statistic)

    racks = dict(host_racks) if host_racks is not None else None
    if racks is None:  # detect on rank 0, share, so every rank runs the same egress schedule
        shared: list[Any] = [_detected_racks(rank_hosts, pairs) if rank == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        if isinstance(shared[0], str):  # rank 0 could not fit: every rank stops, none waits forever
            raise CalibrationError(shared[0])
        racks = shared[0]
    uplinks = measure.uplink(rank_hosts, racks, uplink_bytes, repeats, device=device, statistic=statistic)
    collectives = measure.collective_curve(
        collective_sizes, repeats, ops=collective_ops, device=device, statistic=statistic
    )
    if rank != 0:
        return None
    m = Measurements(
        rank_hosts=tuple(rank_hosts),
        host_racks=host_racks,
        pairs=tuple(pairs or ()),
        uplinks=tuple(uplinks or ()),
        collectives=tuple(collectives or ()),
        computes=tuple(computes or ()),
        gradient_bytes=gradient_bytes,
        batch=batch if task_or_none is not None or profile is not None else None,
        profile=measured_profile,
        host_datacenters=dict(host_datacenters) if host_datacenters is not None else None,
    )
    return fit_report(
        m,
        intra_host_latency_us=intra_host_latency_us,
        fold_efficiency=fold_efficiency,
        nccl_gpu=nccl_gpu,
        nics_per_host=nics_per_host,
    )


def _detected_racks(rank_hosts: Sequence[str], pairs: Optional[list[Any]]) -> Union[dict[str, str], str]:
    """host -> rack from the pair bandwidths, or the error message when they cannot be fitted."""
    hosts = list(dict.fromkeys(rank_hosts))
    try:
        groups = detect_racks(fit_pairs(pairs or []), hosts).groups
    except CalibrationError as exc:
        return str(exc)
    return {h: f"rack{i}" for i, group in enumerate(groups) for h in group}
