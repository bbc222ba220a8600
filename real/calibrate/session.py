"""One process of `syncsim calibrate`: join the workers' process group, measure, and (rank 0) write
the calibrated config, the measured profile and the raw measurements next to it.

The network is measured on the backend's device (NCCL: the rank's GPU). Compute (a zoo model's
profile, or the numerics model's lockstep step) runs on the rank's GPU whenever the machine has
one, whatever the backend, since that is where training runs, and that GPU is made the current
device (under gloo on a machine of several GPUs, too), as `syncsim real` makes it; else on the CPU.
Compute runs in the workload's `precision`, as training runs it (`real.precision`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from real.backends import backend_for, device_for, workers_per_node
from sim.config import Config
from sim.errors import ConfigError
from sim.files import atomic_write


def compute_device(device: torch.device, local_rank: int) -> torch.device:
    """Where compute is measured: the network's GPU, else this rank's GPU if any (made current, as
    `real.backends.training_device` makes it for training), else the CPU."""
    if device.type == "cuda" or not torch.cuda.is_available():
        return device
    gpu = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(gpu)
    return gpu


def main(config: Config, path: Path, timeout_s: float, backend: str = "auto") -> int:
    from real.calibrate.datacenters import check_calibratable
    from real.calibrate.export import write_calibrated_config
    from real.calibrate.profiled import profile_spec
    from real.calibrate.run import calibrate
    from sim.api import _prepare

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cluster, _plan, task = _prepare(config)
    if world != cluster.world_size:
        raise ValueError(f"WORLD_SIZE: calibration runs one process per GPU ({cluster.world_size}), got {world}")
    if len(set(cluster.view.rank_hosts)) < 2:
        raise ConfigError("cluster: one host; calibration measures the network between hosts, so it needs two or more")
    check_calibratable(config.cluster)  # before any measurement: the calibrated config must keep its shape
    backend = backend_for(backend, calibrate=True, node_workers=workers_per_node(world), note=rank == 0)
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    device = device_for(backend, local_rank)
    if config.numerics is not None:  # several processes per core: one intra-op thread each, as in training
        torch.set_num_threads(config.numerics.threads)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    view = cluster.view
    racks = {h: info.rack for h, info in view.hosts.items() if info.rack is not None} or None
    knobs = config.calibration
    spec = profile_spec(config)
    report = calibrate(
        rank,
        world,
        view.rank_hosts,
        racks,
        None if spec is not None else task,
        device=device,
        repeats=knobs.repeats,
        statistic=knobs.statistic,
        uplink_bytes=knobs.uplink_bytes,
        max_bytes=knobs.max_bytes,
        bandwidth_factor=knobs.bandwidth_factor,
        profile=spec,
        compute_device=compute_device(device, local_rank),
        precision=config.workload.precision,
        # raw figures: folding the all-reduce's efficiency into the links slowed every prediction by the
        # collective's small-message overhead (ring +17% on the 2x2 emulation; docs/validation.md)
        fold_efficiency=False,
        # over NCCL the calibrated config keeps the NCCL model, its constants fitted to the measurements
        nccl_gpu=config.cluster.gpu if backend == "nccl" else None,
        nics_per_host=config.cluster.nics_per_host,
        host_datacenters={h: dc for dc, hosts in view.datacenters.items() for h in hosts} or None,
    )
    if report is not None:
        write_calibrated_config(report, config, path, echo=print)
        for name, rows in report.rows().items():
            atomic_write(path.with_name(f"{path.stem}.{name}.csv"), pd.DataFrame(rows).to_csv(index=False))
        print(report.summary())
    dist.destroy_process_group()
    return 0
