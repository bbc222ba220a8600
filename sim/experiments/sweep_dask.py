"""Running a sweep's points on an existing Dask distributed cluster (`syncsim sweep --dask ADDRESS`).

Each point is simulated on a Dask worker by `compute_point`, which writes nothing: its summary and
record come back to this process, which keeps them exactly as a local run does (`keep_point`). The
workers need syncsim installed (the same version) but no shared file system, and the table is the
local run's. Dask is an optional extra: `pip install -e '.[dask]'`. Starting a cluster on SLURM or
Kubernetes: docs/sweeps.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sim.errors import ConfigError
from sim.experiments.sweep import Point
from sim.experiments.sweep_points import OnDone, compute_point, keep_point, point_folder


def run_on_dask(address: str, todo: list[Point], out: Path, on_done: Optional[OnDone]) -> None:
    """Submit every point in `todo` to the scheduler at `address` and keep each result as it arrives."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ConfigError(
            "--dask: needs Dask's distributed scheduler; install it with: pip install -c constraints.txt -e '.[dask]'"
        ) from None
    try:
        client = Client(address, timeout="30s")
    except (OSError, TimeoutError) as exc:
        raise ConfigError(f"--dask: cannot reach a Dask scheduler at {address!r}: {exc}") from None
    with client:
        futures = {client.submit(compute_point, p.config, p.coords, key=f"syncsim-point-{p.key}"): p for p in todo}
        try:
            for future in as_completed(futures):
                point = futures[future]
                error = keep_point(point_folder(out, point), *future.result())
                if on_done is not None:
                    on_done(point, error)
        except BaseException:
            client.cancel(list(futures))
            raise
