"""How long `syncsim` commands take as whole processes, interpreter start to exit, where the work is small.

    python benchmarks/startup.py [--repeats 7] [--root CHECKOUT]

Times `syncsim --help`, `syncsim list`, and `syncsim check` and `syncsim run --quiet --no-plot` of
`benchmarks/simgrid_ring.py`'s 512-host config (one ring all-reduce of 102.4 MB, one GPU a host, ideal
network: a few tenths of a second of simulation), each as `python -m sim.cli` in a fresh process. Beside
them, the floor no run can go under: a bare interpreter, and one that imports the libraries a run needs
(numpy, simpy, pydantic, PyYAML, networkx, pandas). Prints medians of `--repeats`: wall seconds and CPU
seconds (user + system).

`--root` runs another checkout's `sim` (a `git worktree` of an older commit) with this interpreter, so
that before and after are timed alike.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from simgrid_ring import write_config  # noqa: E402

LIBRARIES = "import numpy, simpy, pydantic, yaml, networkx, pandas"


def timed(cmd: list[str], root: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of `cmd` in `root`; a failure stops the benchmark."""
    env = os.environ | {"PYTHONPATH": str(root)}
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--root", type=Path, default=HERE.parent, help="the checkout whose `sim` runs")
    args = parser.parse_args()
    root = args.root.resolve()
    with tempfile.TemporaryDirectory(prefix="syncsim_startup_") as folder:
        config = write_config(Path(folder), 512, 102.4)
        syncsim = [sys.executable, "-m", "sim.cli"]
        cases = {
            "python (bare)": [sys.executable, "-c", "pass"],
            "python + a run's libraries": [sys.executable, "-c", LIBRARIES],
            "syncsim --help": [*syncsim, "--help"],
            "syncsim list": [*syncsim, "list"],
            "syncsim check (512 hosts)": [*syncsim, "check", str(config)],
            "syncsim run (512 hosts)": [*syncsim, "run", str(config), "--quiet", "--no-plot", "--out", f"{folder}/out"],
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for _ in range(args.repeats):  # interleaved, so that a burst of load touches every case alike
            for name, cmd in cases.items():
                times[name].append(timed(cmd, root))
    print(f"{root} (median of {args.repeats}; wall s, CPU s)")
    for name, runs in times.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        print(f"  {name:<30} {wall:6.3f}  {cpu:6.3f}")


if __name__ == "__main__":
    main()
