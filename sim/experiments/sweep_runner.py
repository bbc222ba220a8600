"""Runs a sweep's points (in parallel processes, in this one, or on Dask: `sim.experiments.sweep_dask`)
and builds one tidy table from the files each point kept (`sim.experiments.sweep_points`).

The tidy table, `DIR/sweep.csv`, has one row per point and policy: the point's index and key, one
column per axis (seed included), then every summary column; it is built from the kept files in point
order, so it does not depend on the order points finished in or on how many runs it took.
`DIR/errors.csv` lists the points that did not validate or failed, with their coordinates;
`DIR/decisions.csv` what each finished point's `auto` settings chose and why (a run's decisions.csv,
with the point's index, key and coordinates in front).
`DIR/sweep.json` names the config (figures redrawn from the folder say which config they show).

Pool workers die with the sweep: on Linux each asks the kernel for SIGKILL when its parent dies
(PR_SET_PDEATHSIG), so a SIGKILLed sweep leaves no orphan simulating on; they ignore Ctrl-C (the
terminal sends it to all of them), and on Ctrl-C or SIGTERM the sweep stops them itself.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import multiprocessing
import os
import signal
import sys
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from sim.experiments.sweep import Point, Sweep
from sim.experiments.sweep_points import POINT_FILE, SUMMARY_FILE, OnDone, finished, point_folder, run_point
from sim.files import atomic_path, atomic_write

TABLE_FILE = "sweep.csv"
PARQUET_FILE = "sweep.parquet"
ERRORS_FILE = "errors.csv"
NAME_FILE = "sweep.json"
DECISIONS_FILE = "decisions.csv"


@dataclass
class SweepOutcome:
    table: pd.DataFrame
    errors: pd.DataFrame
    ran: int  # points run by this call
    skipped: int  # points finished by an earlier call


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
    atomic_write(out / NAME_FILE, json.dumps({"config": sweep.name}) + "\n")
    todo = [p for p in sweep.points if p.config is not None and not finished(point_folder(out, p))]
    skipped = sum(1 for p in sweep.points if p.config is not None) - len(todo)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    if dask is not None:
        from sim.experiments.sweep_dask import run_on_dask

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
    atomic_write(out / DECISIONS_FILE, collect_decisions(sweep, out).to_csv(index=False))
    return SweepOutcome(table, errors, len(todo), skipped)


def _run_parallel(todo: list[Point], out: Path, jobs: int, on_done: Optional[OnDone]) -> None:
    """At most `jobs` points at a time; on an interrupt, points not started are cancelled."""
    pending = iter(todo)
    forked = multiprocessing.get_context().get_start_method() == "fork"  # else the parent is a fork server
    with ProcessPoolExecutor(
        max_workers=jobs, initializer=die_with_parent, initargs=(os.getpid() if forked else None,)
    ) as pool:
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
            _stop_workers(pool)  # points in flight are lost (a re-run does them); finished ones are kept
            raise


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: Optional[int]) -> None:
    """A pool worker's start: SIGKILL when its parent (`parent`, or a fork server) dies (Linux), Ctrl-C
    left to the sweep, SIGTERM back to its default (the command line's handler was inherited at fork)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's processes (they ignore Ctrl-C, and a point can run for minutes)."""
    terminate = getattr(pool, "terminate_workers", None)  # Python 3.14
    if terminate is not None:
        terminate()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            process.terminate()


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


def config_name(out: Path) -> Optional[str]:
    """The name of the config whose sweep `out` holds; None for a folder from before it was recorded."""
    try:
        name = json.loads((out / NAME_FILE).read_text()).get("config")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


def collect_decisions(sweep: Sweep, out: Path) -> pd.DataFrame:
    """Every finished point's decisions, in point order (none for points run before they were recorded)."""
    frames = []
    for point in sweep.points:
        if point.config is None:
            continue
        try:
            record = json.loads((point_folder(out, point) / POINT_FILE).read_text())
        except (OSError, ValueError):
            continue
        rows = pd.DataFrame(record.get("decisions") or [], columns=["policy", "setting", "value", "why"])
        coords = {axis: _cell(point.coords.get(axis)) for axis in sweep.axes}
        head = pd.DataFrame({"point": point.index, "key": point.key, **coords}, index=rows.index)
        frames.append(pd.concat([head, rows], axis=1))
    columns = ["point", "key", *sweep.axes, "policy", "setting", "value", "why"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _cell(value: Any) -> Any:
    """A coordinate as a table cell: lists and mappings as JSON text."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (list, dict)) else value
