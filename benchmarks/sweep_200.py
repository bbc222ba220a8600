"""A 200-point sweep on this machine: 4 policies x 50 uplink speeds, 16 GPUs, 20 iterations each.

    python benchmarks/sweep_200.py              # first run, re-run, and a run killed midway then resumed
    python benchmarks/sweep_200.py --jobs 2

Prints the wall time of the whole sweep (`syncsim sweep` in a subprocess, as a user runs it), of its
re-run (every point finished: nothing to run), and whether a run killed with SIGKILL after about half
its points, then run again, runs only the missing points and writes the uninterrupted run's table.
Issue 18's targets: <= 3 minutes, re-run <= 10 s, the same table.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent


def sweep_config() -> dict:
    return {
        "name": "sweep-200",
        "iterations": 20,
        "cluster": {"topology": "two_tier", "racks": 4, "hosts_per_rack": 4, "nic_gbps": 25, "uplink_gbps": 25},
        "workload": {"model": "resnet50", "batch_size": 32, "compute_jitter": 0.02},
        "policies": [{"name": "ring"}],
        "simulation": {"trace": False},
        "sweep": {
            "grid": {
                "policies[0].name": ["ring", "hierarchical", "ps", "ds_sync"],
                "cluster.uplink_gbps": [round(2.0 + 2.0 * i, 1) for i in range(50)],
            }
        },
    }


def sweep(config: Path, out: Path, jobs: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "sim.cli", "sweep", str(config), "--out", str(out), "--quiet", "--jobs", str(jobs)]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def timed(config: Path, out: Path, jobs: int) -> float:
    start = time.perf_counter()
    proc = sweep(config, out, jobs)
    output = proc.communicate()[0].decode()
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed ({proc.returncode}):\n{output}")
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "sweep.yaml"
        config.write_text(yaml.safe_dump(sweep_config(), sort_keys=False))
        whole = Path(tmp) / "whole"
        first = timed(config, whole, args.jobs)
        rerun = timed(config, whole, args.jobs)
        print(f"200-point sweep, {args.jobs} jobs: {first:.1f} s (target 180 s); re-run {rerun:.2f} s (target 10 s)")
        killed = Path(tmp) / "killed"
        proc = sweep(config, killed, args.jobs)
        while len(list(killed.glob("points/*/point.json"))) < 100 and proc.poll() is None:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        before = len(list(killed.glob("points/*/point.json")))
        resumed = timed(config, killed, args.jobs)
        same = pd.read_csv(killed / "sweep.csv").equals(pd.read_csv(whole / "sweep.csv"))
        print(f"killed (SIGKILL) after {before} points; the re-run took {resumed:.1f} s; table identical: {same}")
        return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
