"""syncsim against SimGrid 4 on one ring all-reduce (issue 48): the same answer, and how long each process takes.

    python benchmarks/simgrid_ring.py [--hosts 64 128 256 512] [--mb 102.4 1.024] [--repeats 3]

The question: one ring all-reduce of N bytes over P single-GPU hosts on a star (every host's NIC cabled to
one switch), on an ideal network. Three answers:

- syncsim: `syncsim run` of a config written here (`network_model: ideal`, `collective_model: pipelined`,
  a synthetic workload of one bucket and 1 us of compute, one iteration), in the venv's Python; its
  answer is the AllReduce row's `duration_s` in ops.csv. It runs twice: with host symmetry (the default,
  `auto`: one host simulated, docs/scale.md) and with `simulation.host_symmetry=off` (every rank).
- SimGrid 4: `benchmarks/simgrid_ring_sg.py` in the system Python (Debian's `python3-simgrid`), the ring
  step by step, 2(P - 1) steps of P transfers of N/P bytes, each member an actor, on a platform of
  syncsim's own links: the driver builds syncsim's cluster and writes, for every ring hop, the directed
  links of syncsim's route with their bandwidth and latency (see that file for SimGrid's settings).
- the alpha-beta closed form, from the config's numbers alone: 2(P - 1)(alpha + N / (P B)), where a
  hop's path is GPU -> host -> switch -> host -> GPU, so alpha = 2 (intra_host_latency_us +
  link_latency_us) and B = min(nic_gbps, intra_host_gbps).

Why a star: it is non-blocking, so every ring hop gets the full NIC bandwidth and the closed form holds
exactly; a two-tier cluster adds uplinks that only the rack-boundary hops cross, which changes neither
answer here but adds a link kind that neither side needs for this question.

N is 102.4 MB (and 1.024 MB, where latency dominates) rather than 100 MB: SimGrid's Python API sends
whole bytes, and 102,400,000 divides by every P up to 512.

Times are of the whole process, interpreter start to exit, median of `--repeats`: wall seconds, and the
speed-ups (SimGrid's over syncsim's) by wall and by CPU seconds (user + system, less moved by other load
on a shared machine). syncsim's in-run wall (provenance.json's `wall_s`: from the config loaded to
provenance.json written, importing the engine and pandas included) is shown beside them. syncsim runs
with `--no-plot --quiet` and `simulation.trace: false`, so neither side writes figures or traces.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pandas as pd

HERE = Path(__file__).resolve().parent
SIMGRID_PYTHON = "/usr/bin/python3"
SIMGRID_PROGRAM = HERE / "simgrid_ring_sg.py"

NIC_GBPS, LINK_LATENCY_US = 100.0, 5.0
INTRA_GBPS, INTRA_LATENCY_US = 1000.0, 1.0

CONFIG = """\
name: simgrid_ring
iterations: 1
cluster:
  topology: star
  hosts: {hosts}
  gpus_per_host: 1
  gpu: V100
  nic_gbps: {nic}
  link_latency_us: {lat}
  intra_host_gbps: {intra}
  intra_host_latency_us: {intra_lat}
workload:
  model: synthetic
  gradient_mb: {mb}
  compute_ms: 0.001
  bucket_mb: {bucket}
policies:
  - name: ring
simulation:
  network_model: ideal
  collective_model: pipelined
  trace: false
"""


def write_config(folder: Path, hosts: int, mb: float) -> Path:
    path = folder / f"ring_{hosts}_{mb}.yaml"
    path.write_text(
        CONFIG.format(
            hosts=hosts,
            nic=NIC_GBPS,
            lat=LINK_LATENCY_US,
            intra=INTRA_GBPS,
            intra_lat=INTRA_LATENCY_US,
            mb=mb,
            bucket=2 * mb,  # one bucket
        )
    )
    return path


def closed_form_s(hosts: int, nbytes: float) -> float:
    """2(P - 1)(alpha + N / (P B)) on the GPU-host-switch-host-GPU path, from the config's numbers."""
    alpha = 2 * (INTRA_LATENCY_US + LINK_LATENCY_US) * 1e-6
    bandwidth = min(NIC_GBPS, INTRA_GBPS) * 1e9 / 8
    return 2 * (hosts - 1) * (alpha + nbytes / hosts / bandwidth)


def write_platform(config_path: Path, out: Path) -> int:
    """SimGrid's platform from syncsim's built cluster: the directed links of every ring hop's route, with
    their capacity and latency. Returns the all-reduce's size in bytes."""
    from sim.cluster.routing import Router
    from sim.cluster.topology import build_cluster
    from sim.config.load import load_config

    config = load_config(config_path)
    cluster = build_cluster(config.cluster, config.seed)
    hops = Router(cluster, config.seed).ring_hops(list(cluster.rank_gpus))
    ids: dict[int, int] = {}
    paths = []
    for routes in hops:
        (route,) = routes  # one channel: a star has no rails
        paths.append([ids.setdefault(link, len(ids)) for link in route])
    links = [[cluster.links[link].capacity, cluster.links[link].latency] for link in ids]
    nbytes = round(config.workload.gradient_mb * 1e6)
    out.write_text(json.dumps({"links": links, "paths": paths, "nbytes": nbytes}))
    return nbytes


class Run(NamedTuple):
    """One process: its wall and CPU (user + system) seconds, syncsim's in-run wall, the simulated all-reduce."""

    wall_s: float
    cpu_s: float
    in_run_s: float  # NaN for SimGrid
    simulated_s: float


def timed(cmd: list[str]) -> tuple[float, float, str]:
    """Run `cmd` to its end: its whole-process wall and CPU seconds and its stdout. A failure stops the benchmark."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu, done.stdout


def run_syncsim(config: Path, out: Path, overrides: list[str]) -> Run:
    shutil.rmtree(out, ignore_errors=True)
    sets = [arg for o in overrides for arg in ("--set", o)]
    wall, cpu, _ = timed(
        [sys.executable, "-m", "sim.cli", "run", str(config), "--quiet", "--no-plot", "--out", str(out), *sets]
    )
    ops = pd.read_csv(out / "ops.csv")
    (duration,) = ops.loc[ops["kind"] == "AllReduce", "duration_s"]
    provenance = json.loads((out / "provenance.json").read_text())
    return Run(wall, cpu, float(provenance["wall_s"]), float(duration))


def run_simgrid(platform: Path) -> Run:
    wall, cpu, stdout = timed([SIMGRID_PYTHON, str(SIMGRID_PROGRAM), str(platform)])
    return Run(wall, cpu, math.nan, float(json.loads(stdout.strip().splitlines()[-1])["simulated_s"]))


def simulated(runs: list[Run]) -> float:
    """The simulated all-reduce, which must not change between repeats."""
    values = [r.simulated_s for r in runs]
    if max(values) != min(values):
        raise SystemExit(f"simulated times differ between repeats: {values}")
    return values[0]


def median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def measure(folder: Path, hosts: int, mb: float, repeats: int, before: bool) -> dict[str, float]:
    config = write_config(folder, hosts, mb)
    platform = folder / f"platform_{hosts}_{mb}.json"
    nbytes = write_platform(config, platform)
    auto = [run_syncsim(config, folder / "out", []) for _ in range(repeats)]
    off = [run_syncsim(config, folder / "out", ["simulation.host_symmetry=off"]) for _ in range(before * repeats)]
    grid = [run_simgrid(platform) for _ in range(repeats)]
    sync_s, grid_s = simulated(auto), simulated(grid)
    if off and simulated(off) != sync_s:
        print(f"P={hosts} {mb} MB: host symmetry off simulates {simulated(off)!r} s, auto {sync_s!r} s")
    closed = closed_form_s(hosts, nbytes)
    row = {
        "P": hosts,
        "MB": nbytes / 1e6,
        "syncsim ms": sync_s * 1e3,
        "SimGrid ms": grid_s * 1e3,
        "closed ms": closed * 1e3,
        "sync/SG-1 %": (sync_s / grid_s - 1) * 100,
        "sync/closed-1 %": (sync_s / closed - 1) * 100,
        "SG/closed-1 %": (grid_s / closed - 1) * 100,
        "syncsim s": median(auto, "wall_s"),
        "in-run s": median(auto, "in_run_s"),
        "SimGrid s": median(grid, "wall_s"),
        "speed-up": median(grid, "wall_s") / median(auto, "wall_s"),
        "CPU speed-up": median(grid, "cpu_s") / median(auto, "cpu_s"),
    }
    if before:
        row["syncsim off s"] = median(off, "wall_s")
        row["in-run off s"] = median(off, "in_run_s")
        row["speed-up off"] = median(grid, "wall_s") / median(off, "wall_s")
        row["CPU speed-up off"] = median(grid, "cpu_s") / median(off, "cpu_s")
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[64, 128, 256, 512])
    parser.add_argument("--mb", type=float, nargs="+", default=[102.4, 1.024])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-before", action="store_true", help="skip the runs with host symmetry off")
    args = parser.parse_args(argv)
    if subprocess.run([SIMGRID_PYTHON, "-c", "import simgrid"], capture_output=True).returncode != 0:
        raise SystemExit(f"{SIMGRID_PYTHON} cannot import simgrid: apt-get install python3-simgrid")
    rows = []
    with tempfile.TemporaryDirectory(prefix="simgrid_ring_") as tmp:
        for mb in args.mb:
            for hosts in args.hosts:
                rows.append(measure(Path(tmp), hosts, mb, args.repeats, not args.no_before))
                print(pd.DataFrame(rows[-1:]).to_string(index=False, float_format=lambda v: f"{v:.4g}"), flush=True)
    table = pd.DataFrame(rows)
    print(f"\nmedian of {args.repeats} whole-process runs each (wall; CPU: user + system); simulated times identical")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
