"""Runs a sweep's points in parallel processes, keeps each point's results, and builds one tidy table.

Each point's results go to `DIR/points/<key>/` (`key`: the hash of its resolved config): its
`summary.csv`, then `point.json` with its coordinates and status, written last and atomically. A
point whose `point.json` says "ok" is finished: a re-run skips it, so an interrupted sweep loses only
the points in flight, and a point that failed is tried again. The tidy table, `DIR/sweep.csv`, has
one row per point and policy: the point's index and key, one column per axis (seed included), then
every summary column; it is built from the kept files in point order, so it does not depend on the
order points finished in or on how many runs it took. `DIR/errors.csv` lists the points that did
not validate or failed, with their coordinates.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from sim.config import Config
from sim.output import atomic_path, atomic_write
from sim.sweep import Point, Sweep

POINT_FILE = "point.json"
SUMMARY_FILE = "summary.csv"
TABLE_FILE = "sweep.csv"
PARQUET_FILE = "sweep.parquet"
ERRORS_FILE = "errors.csv"


@dataclass
class SweepOutcome:
    table: pd.DataFrame
    errors: pd.DataFrame
    ran: int  # points run by this call
    skipped: int  # points finished by an earlier call


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
    try:
        summary: Optional[str] = simulate(config).summary.to_csv(index=False)
        error = None
    except Exception as exc:  # a point's failure is recorded; the other points go on
        summary, error = None, f"{type(exc).__name__}: {' / '.join(str(exc).splitlines())}"
    record = {"status": "ok" if error is None else "failed", "error": error, "coords": _plain(coords)}
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


def run_sweep(
    sweep: Sweep,
    out: Path,
    jobs: Optional[int] = None,
    on_done: Optional[OnDone] = None,
    dask: Optional[str] = None,
) -> SweepOutcome:
    """Run every valid point not finished before (`jobs` processes; 1: in this process; or on the
    Dask scheduler at `dask`), then write and return the tidy table and the errors. `on_done(point,
    error)` is called as each one ends."""
    out.mkdir(parents=True, exist_ok=True)
    todo = [p for p in sweep.points if p.config is not None and not finished(point_folder(out, p))]
    skipped = sum(1 for p in sweep.points if p.config is not None) - len(todo)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    if dask is not None:
        from sim.sweep_dask import run_on_dask

        run_on_dask(dask, todo, out, on_done)
    elif jobs == 1:
        for point in todo:
            error = run_point(point.config, str(point_folder(out, point)), point.coords)  # type: ignore[arg-type]
            if on_done is not None:
                on_done(point, error)
    else:
        _run_parallel(todo, out, jobs, on_done)
    table, errors = collect(sweep, out)
    atomic_write(out / TABLE_FILE, table.to_csv(index=False))
    with atomic_path(out / PARQUET_FILE) as tmp:
        table.to_parquet(tmp, index=False)
    atomic_write(out / ERRORS_FILE, errors.to_csv(index=False))
    return SweepOutcome(table, errors, len(todo), skipped)


def _run_parallel(todo: list[Point], out: Path, jobs: int, on_done: Optional[OnDone]) -> None:
    """At most `jobs` points at a time; on an interrupt, points not started are cancelled."""
    pending = iter(todo)
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        running: dict[Future[Optional[str]], Point] = {}
        try:
            while True:
                while len(running) < jobs and (point := next(pending, None)) is not None:
                    future = pool.submit(run_point, point.config, str(point_folder(out, point)), point.coords)  # type: ignore[arg-type]
                    running[future] = point
                if not running:
                    return
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    point = running.pop(future)
                    if on_done is not None:
                        on_done(point, future.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def collect(sweep: Sweep, out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy table and the errors, from the files the points left, in point order."""
    frames, errors = [], []
    for point in sweep.points:
        coords = {axis: _cell(point.coords.get(axis)) for axis in sweep.axes}
        if point.config is None:
            errors.append({"point": point.index, **coords, "error": f"config: {point.error}"})
            continue
        folder = point_folder(out, point)
        try:
            record = json.loads((folder / POINT_FILE).read_text())
        except (OSError, ValueError):
            continue  # not run yet (an interrupted sweep): neither a row nor an error
        if record.get("status") != "ok":
            errors.append({"point": point.index, **coords, "error": record.get("error")})
            continue
        summary = pd.read_csv(folder / SUMMARY_FILE)
        head = pd.DataFrame({"point": point.index, "key": point.key, **coords}, index=summary.index)
        frames.append(pd.concat([head, summary], axis=1))
    table = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["point", "key", *sweep.axes])
    return table, pd.DataFrame(errors, columns=["point", *sweep.axes, "error"])


def _cell(value: Any) -> Any:
    """A coordinate as a table cell: lists and mappings as JSON text."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value


def _plain(coords: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(coords, default=str))
