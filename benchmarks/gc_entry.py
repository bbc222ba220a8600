"""CPU time of small simulations run one after another in one process, with torch and pandas loaded
(as in a sweep's worker or the test suite): the garbage collection on entering a run as it is
(`sim.kernel.gc_quiet`: a full collection only once earlier runs left a quarter of the heap) against a
full collection on every entry (its earlier behaviour).

    python benchmarks/gc_entry.py [--runs 8] [--rounds 3]

Prints the median CPU seconds of `--runs` quickstart runs (2 iterations of 4 policies: 4 entries each)
per variant over `--rounds` alternating rounds, and their ratio.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas  # noqa: E402,F401  (the heap a test or sweep process holds)
import torch  # noqa: E402,F401

import sim.engine.run as run  # noqa: E402
import sim.kernel.gc_quiet as gc_quiet  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.config import load_config  # noqa: E402


@contextmanager
def full_every_time(first_generation: int = 2_000_000) -> Iterator[None]:
    """`quiet_gc` as it was before it kept count: a full collection on every entry."""
    gc.collect()
    gc.freeze()
    previous = gc.get_threshold()
    gc.set_threshold(first_generation, 50, 100)
    try:
        yield
    finally:
        gc.freeze()
        gc.set_threshold(*previous)
        gc.unfreeze()


def cpu_seconds(config: object, runs: int, full: bool) -> float:
    run.quiet_gc = full_every_time if full else gc_quiet.quiet_gc  # entered once per policy of a run
    start = time.process_time()
    for _ in range(runs):
        simulate(config)
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    config = load_config(ROOT / "configs" / "quickstart.yaml", ["iterations=2"])
    simulate(config)  # imports and compiled code warmed up
    times: dict[str, list[float]] = {"full on every entry": [], "as it is": []}
    for _ in range(args.rounds):
        times["full on every entry"].append(cpu_seconds(config, args.runs, True))
        times["as it is"].append(cpu_seconds(config, args.runs, False))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, median in medians.items():
        print(f"{name:>20}: {median:.2f} CPU-s for {args.runs} runs (median of {args.rounds})")
    print(f"ratio: {medians['full on every entry'] / medians['as it is']:.2f}x")


if __name__ == "__main__":
    main()
