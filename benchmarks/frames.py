"""Are a speed-up's results the same? Save every result table of the bundled configs, then compare two saves.

    git stash; python benchmarks/frames.py save /tmp/before; git stash pop
    python benchmarks/frames.py save /tmp/after
    python benchmarks/frames.py compare /tmp/before /tmp/after

Each config runs at most 6 iterations; the configs that take more than a few seconds (large zoo
models trained in numerics mode, real-backend validation) are left out. Wall-clock columns are
dropped: they are the only ones allowed to differ. A table whose rows are the same in another order
is reported as reordered, not as different; one whose float columns differ by under RTOL (1e-9) relative, and
nothing else, as float rounding, with its largest difference (host symmetry, sim/engine/symmetry.py, adds
link bytes between fewer events).
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

SLOW = ("real_zoo", "zen_deepfm_8x8", "gpt2", "validate_", "real_zen")
TABLES = ("summary", "iterations", "ops", "links", "utilization", "staleness", "faults", "phases", "accuracy")
WALL = ("wall_s", "events", "flows", "recomputes")
RTOL = 1e-9  # float columns that differ by less are rounding, not different answers
GENERAL = False  # save: every rank simulated (host symmetry off)


def configs() -> list[Path]:
    found = sorted([*ROOT.glob("configs/*.yaml"), *ROOT.glob("configs/papers/*.yaml")])
    return [p for p in found if not any(s in p.name for s in SLOW)]


def save(out: Path, steady: bool = False, general: bool = False) -> None:
    """`steady`: also every config without compute jitter, and small versions of the large benchmark
    jobs (no jitter either): where workers tie, same-instant event order is put to the test. `general`:
    every rank simulated (`simulation.host_symmetry: off`), to compare with the fast path's save."""
    global GENERAL
    GENERAL = general
    from sim.config import read_config

    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    for path in configs():
        data = read_config(path)  # a mapping, to change before it is validated
        data["iterations"] = min(data.get("iterations", 10), 6)
        os.chdir(path.parent)  # a plug-in policy's file lies beside its config
        _save(out / f"{path.stem}.pkl", data)
        if steady:
            data.setdefault("workload", {})["compute_jitter"] = 0.0
            _save(out / f"{path.stem}.steady.pkl", data)
        print(path.name, flush=True)
    if steady:
        from run_all import large_job

        for policy in ("ring", "hierarchical", "ps", "asp", "ds_sync"):
            _save(out / f"large_{policy}.steady.pkl", large_job(4, "bert_large", policy, 16, iterations=2))
            print(f"large job, {policy}", flush=True)


def _save(target: Path, data: dict) -> None:  # type: ignore[type-arg]
    from sim.api import simulate

    if GENERAL:
        data.setdefault("simulation", {})["host_symmetry"] = "off"
    result = simulate(data)
    frames = {}
    for name in TABLES:
        frame = getattr(result, name)
        if frame is not None:
            frames[name] = frame.drop(columns=[c for c in frame.columns if any(w in c for w in WALL)])
    target.write_bytes(pickle.dumps(frames))


def _sorted(frame, cols):  # type: ignore[no-untyped-def]
    return frame.sort_values(cols, ignore_index=True)


def _plain_strings(frame):  # type: ignore[no-untyped-def]
    """Text columns as objects: pandas stores strings with pyarrow when it is installed, so frames
    saved with and without it differ in dtype only."""
    if frame is None:
        return None
    text = [c for c in frame.columns if pd.api.types.is_string_dtype(frame[c])]
    return frame.astype({c: object for c in text}) if text else frame


def compare(a: Path, b: Path) -> int:
    differ = 0
    for left in sorted(a.glob("*.pkl")):
        x_all, y_all = pickle.loads(left.read_bytes()), pickle.loads((b / left.name).read_bytes())
        for name, x in x_all.items():
            x, y = _plain_strings(x), _plain_strings(y_all.get(name))
            if y is not None and x.equals(y):
                continue
            cols = list(x.columns)
            same = y is not None and x.sort_values(cols, ignore_index=True).equals(
                y.sort_values(cols, ignore_index=True)
            )
            rounding = None if same or y is None else _rounding(x, y)
            if rounding is not None:
                print(f"{left.stem} {name}: float rounding only (largest relative difference {rounding:.1e})")
                continue
            print(f"{left.stem} {name}: {'reordered' if same else 'DIFFERENT'}")
            differ += not same
    print(f"{differ} tables differ (beyond float rounding, {RTOL:g} relative)")
    return 1 if differ else 0


def _rounding(x, y):  # type: ignore[no-untyped-def]
    """The largest relative difference of two tables that differ only in float columns, by at most RTOL
    (sums added in other pieces: host symmetry integrates link bytes between fewer events); else None."""
    if list(x.columns) != list(y.columns) or len(x) != len(y):
        return None
    worst = 0.0
    for column in x.columns:
        a, b = x[column].to_numpy(), y[column].to_numpy()
        if a.dtype.kind != "f" or b.dtype.kind != "f":
            if not (a == b).all():
                return None
            continue
        if not np.allclose(a, b, rtol=RTOL, atol=0.0, equal_nan=True):
            return None
        both = np.isfinite(a) & (a != 0)
        if both.any():
            worst = max(worst, float(np.max(np.abs(b[both] - a[both]) / np.abs(a[both]))))
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    saver = sub.add_parser("save")
    saver.add_argument("out", type=Path)
    saver.add_argument("--steady", action="store_true", help="also without compute jitter (ties between workers)")
    saver.add_argument("--general", action="store_true", help="every rank simulated (simulation.host_symmetry: off)")
    cmp = sub.add_parser("compare")
    cmp.add_argument("a", type=Path)
    cmp.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "save":
        save(args.out, args.steady, args.general)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
