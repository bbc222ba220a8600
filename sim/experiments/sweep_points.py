"""One point of a sweep: simulated anywhere (here, in a pool process, on a Dask worker), kept here.

Each point's results go to `DIR/points/<key>/` (`key`: the hash of its resolved config): its
`summary.csv`, then `point.json` with its coordinates, status and decisions (what its `auto` settings
chose, decisions.csv's rows), written last and atomically. A
point whose `point.json` says "ok" is finished: a re-run skips it, so an interrupted sweep loses only
the points in flight, and a point that failed is tried again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from sim.config import Config
from sim.experiments.sweep import Point
from sim.files import atomic_write

POINT_FILE = "point.json"
SUMMARY_FILE = "summary.csv"


def point_folder(out: Path, point: Point) -> Path:
    return out / "points" / point.key


def finished(folder: Path) -> bool:
    try:
        return json.loads((folder / POINT_FILE).read_text())["status"] == "ok" and (folder / SUMMARY_FILE).exists()
    except (OSError, ValueError, KeyError):
        return False


def compute_point(config: Config, coords: dict[str, Any]) -> tuple[Optional[str], dict[str, Any]]:
    """Simulate one point: its summary table as CSV text (None if it failed) and its record (status,
    error, coordinates, wall time). Writes nothing, so it can run on another machine."""
    from sim.api import simulate  # imported where the point runs

    start = time.perf_counter()
    decisions: list[dict[str, Any]] = []
    try:
        result = simulate(config)
        summary: Optional[str] = result.summary.to_csv(index=False)
        decisions = result.decisions.to_dict("records")  # a few rows per policy: what `auto` chose, and why
        error = None
    except Exception as exc:  # a point's failure is recorded; the other points go on
        summary, error = None, f"{type(exc).__name__}: {' / '.join(str(exc).splitlines())}"
    record = {"status": "ok" if error is None else "failed", "error": error, "coords": _plain(coords)}
    record["decisions"] = decisions
    record["wall_s"] = round(time.perf_counter() - start, 3)
    return summary, record


def keep_point(folder: Path, summary: Optional[str], record: dict[str, Any]) -> Optional[str]:
    """Write a point's files (`point.json` last: its "ok" says the point is done); returns its error."""
    folder.mkdir(parents=True, exist_ok=True)
    if summary is not None:
        atomic_write(folder / SUMMARY_FILE, summary)
    atomic_write(folder / POINT_FILE, json.dumps(record, indent=1))
    return record["error"]  # type: ignore[no-any-return]


def run_point(config: Config, folder: str, coords: dict[str, Any]) -> Optional[str]:
    """Simulate one point and keep its results here; returns None, or the error that stopped it."""
    return keep_point(Path(folder), *compute_point(config, coords))


OnDone = Callable[[Point, Optional[str]], None]


def _plain(coords: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(coords, default=str))
