"""One process of `syncsim calibrate`: join the workers' process group, measure, and (rank 0) write
the calibrated config and the raw measurements next to it."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from real.backends import backend_for, device_for
from sim.config import Config
from sim.output import atomic_write

# at emulated Mbit/s rates, 16 MiB messages take seconds each; 4 MiB covers the models used here
MAX_BYTES = 1 << 22


def main(config: Config, path: Path, timeout_s: float, backend: str = "auto", max_bytes: int = MAX_BYTES) -> int:
    from real.calibrate.export import write_calibrated_config
    from real.calibrate.run import COLLECTIVE_SIZES, P2P_SIZES, calibrate
    from sim.api import _prepare

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    cluster, _plan, task = _prepare(config)
    if world != cluster.world_size:
        raise ValueError(f"WORLD_SIZE: calibration runs one process per GPU ({cluster.world_size}), got {world}")
    backend = backend_for(backend, calibrate=True)
    device = device_for(backend, int(os.environ.get("LOCAL_RANK", rank)))
    if config.numerics is not None:  # several processes per core: one intra-op thread each, as in training
        torch.set_num_threads(config.numerics.threads)
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s))
    view = cluster.view
    racks = {h: info.rack for h, info in view.hosts.items() if info.rack is not None} or None
    report = calibrate(
        rank,
        world,
        view.rank_hosts,
        racks,
        task,
        device=device,
        sizes=[s for s in P2P_SIZES if s <= max_bytes],
        collective_sizes=[s for s in COLLECTIVE_SIZES if s <= max_bytes],
        uplink_bytes=max_bytes,
        statistic="median",
        # raw figures: folding the all-reduce's efficiency into the links slowed every prediction by the
        # collective's small-message overhead (ring +17% on the 2x2 emulation; docs/validation.md)
        fold_efficiency=False,
    )
    if report is not None:
        write_calibrated_config(report, config, path)
        for name, rows in report.rows().items():
            atomic_write(path.with_name(f"{path.stem}.{name}.csv"), pd.DataFrame(rows).to_csv(index=False))
        print(report.summary())
    dist.destroy_process_group()
    return 0
