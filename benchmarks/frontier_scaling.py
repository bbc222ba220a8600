"""Issue 48's scaling curve: GPUs against wall seconds and peak memory, 1,024 to 131,072 H100.

    python benchmarks/frontier_scaling.py                       # hierarchical and ring, median of 3
    python benchmarks/frontier_scaling.py --repeats 1 --racks 4 16 --figure /tmp/curve.png

Each point is `syncsim run CONFIG --quiet` in a fresh process, as a user runs it (tables written), on
`run_all.frontier_job` with the GPU count scaled by racks of 32 hosts x 8 H100. The wall time is the whole
process's, from start to exit; the peak memory its maximum resident set (`wait4`). It prints a markdown table
and draws both curves on log-log axes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from run_all import frontier_job  # noqa: E402

RACKS = (4, 16, 64, 256, 512)
GPUS_PER_RACK = 256


def measure(racks: int, policy: str, folder: Path, symmetry: str) -> tuple[float, float]:
    """One `syncsim run`: (wall seconds, peak RSS in GB)."""
    job = frontier_job(racks, policy)
    job["simulation"]["host_symmetry"] = symmetry
    config = folder / f"{policy}_{racks}.yaml"
    config.write_text(yaml.safe_dump(job))
    command = [sys.executable, "-m", "sim.cli", "run", str(config), "--quiet", "--out", str(folder / "out")]
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{config.name}: exit {status}\n{proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1e6  # kB -> GB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--racks", type=int, nargs="+", default=list(RACKS))
    parser.add_argument("--policies", nargs="+", default=["hierarchical", "ring"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--symmetry", choices=("auto", "off"), default="auto", help="simulation.host_symmetry")
    parser.add_argument("--figure", type=Path, default=ROOT / "benchmarks" / "images" / "frontier_scaling.png")
    parser.add_argument("--replot", type=Path, help="draw the figure from this script's printed table, run nothing")
    args = parser.parse_args()
    rows = []
    if args.replot:  # the table this script printed before, drawn again
        rows = [
            (p, int(g.replace(",", "")), float(w.split()[0]), float(m.split()[0])) for p, g, w, m in _table(args.replot)
        ]
        draw(rows, args.figure)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies:
            for racks in args.racks:
                runs = [measure(racks, policy, Path(tmp), args.symmetry) for _ in range(args.repeats)]
                wall = statistics.median(w for w, _ in runs)
                peak = statistics.median(m for _, m in runs)
                rows.append((policy, racks * GPUS_PER_RACK, wall, peak))
                line = f"{policy} {racks * GPUS_PER_RACK} GPUs: {wall:.1f} s, {peak:.2f} GB"
                print(line, file=sys.stderr, flush=True)
    print(f"host_symmetry: {args.symmetry}; median of {args.repeats} whole `syncsim run` processes\n")
    print("| policy | GPUs | wall | peak RSS |\n| --- | ---: | ---: | ---: |")
    for policy, gpus, wall, peak in rows:
        print(f"| {policy} | {gpus:,} | {wall:.1f} s | {peak:.2f} GB |")
    draw(rows, args.figure)
    return 0


def _table(path: Path) -> list[list[str]]:
    """The rows of the markdown table in `path` (policy, GPUs, wall, peak)."""
    cells = [[c.strip() for c in line.strip().strip("|").split("|")] for line in path.read_text().splitlines()]
    return [c for c in cells if len(c) == 4 and c[1][:1].isdigit()]


def draw(rows: list[tuple[str, int, float, float]], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.6))
    for policy in dict.fromkeys(r[0] for r in rows):
        mine = [r for r in rows if r[0] == policy]
        left.plot([r[1] for r in mine], [r[2] for r in mine], "o-", label=policy)
        right.plot([r[1] for r in mine], [r[3] for r in mine], "o-", label=policy)
    for ax, label in ((left, "wall s (whole syncsim run)"), (right, "peak RSS, GB")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("GPUs (H100, 8 a host, 32 hosts a rack)")
        ax.set_ylabel(label)
        plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
        ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("BERT-large bf16, 2 iterations, two-tier 1:1 (benchmarks/frontier_scaling.py)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"\n![scaling curve]({path.relative_to(ROOT) if path.is_relative_to(ROOT) else path})")


if __name__ == "__main__":
    sys.exit(main())
