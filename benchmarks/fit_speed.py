"""Wall seconds of the two fits the test suite and `python -m sim.*.fit` run: the compute model's
(sim/compute/fit.py: all rows, then held out by model) and the NCCL model's (sim/nccl/fit.py: all
published rows), in this checkout and optionally in another one (an older commit's worktree).

    python benchmarks/fit_speed.py [--repeats 3] [--against DIR]

Prints the median of `--repeats` runs of each fit, each run in a fresh process (its tables built
once beforehand, as a test module's fixture does), and with `--against` the ratio to DIR's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

TIMING = """
import json, time
from sim.compute import fit as compute_fit
try:
    from sim.compute.fit_rows import fitted_rows
except ImportError:  # an older checkout, before the rows had a module of their own
    fitted_rows = compute_fit.fitted_rows
from sim.nccl import fit as nccl_fit
from sim.nccl.published import rows
compute_rows, nccl_rows = fitted_rows(), rows()
compute_fit.fit(compute_rows[:5])  # op tables of the first rows built, imports done
out = {}
for name, call in (
    ("compute fit", lambda: compute_fit.fit(compute_rows)),
    ("compute held out", lambda: compute_fit.held_out(compute_rows)),
    ("nccl fit", lambda: nccl_fit.fit(nccl_rows)),
):
    start = time.perf_counter()
    call()
    out[name] = time.perf_counter() - start
print(json.dumps(out))
"""


def timings(checkout: Path, repeats: int) -> dict[str, float]:
    """Median wall seconds per fit over `repeats` fresh processes in `checkout`."""
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", TIMING], cwd=checkout, check=True, capture_output=True, text=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {name: statistics.median(run[name] for run in runs) for name in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--against", type=Path, help="another checkout to time the same way")
    args = parser.parse_args()
    here = timings(ROOT, args.repeats)
    there = timings(args.against, args.repeats) if args.against else {}
    for name, seconds in here.items():
        line = f"{name:>17}: {seconds:6.2f} s (median of {args.repeats})"
        if name in there:
            line += f"; {args.against}: {there[name]:6.2f} s, {there[name] / seconds:.1f}x"
        print(line)


if __name__ == "__main__":
    main()
