"""A Chrome/Perfetto trace (JSON "Trace Event Format") of a result, for ui.perfetto.dev.

Per policy two processes: "<policy>: workers" with one track per rank (begin-step, forward,
backward, and the wait for synchronization after compute) and a "phases" track (which policy ran
when, with an instant marker at every switch), and "<policy>: communication" with one
track per collective group, one per rank for point-to-point ops, and counter tracks of link
utilisation. Times are microseconds of simulated time.

A real run's result (`Result.measured`) gives the same tracks from its measured timings, in
microseconds from the policy's start (each rank's clock zeroed after a barrier; docs/real.md). Its
compute spans are named for what the real backend times: "reads" (the on_forward programs) and
"forward + backward" (one autograd call). It has no link-utilisation counters: a real run cannot
see what each link carried.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import pandas as pd

PHASE_TRACK = 1_000_000  # the phases track of a policy's workers process


class Traced(Protocol):
    """The tables a trace is drawn from: a `Result` (`sim.results.result`) has them all."""

    summary: pd.DataFrame
    iterations: pd.DataFrame
    ops: pd.DataFrame
    utilization: pd.DataFrame
    faults: pd.DataFrame
    phases: pd.DataFrame
    measured: bool


def _span(name: str, pid: int, tid: int, start_s: float, end_s: float, **args: Any) -> dict[str, Any]:
    return {
        "name": name,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": start_s * 1e6,
        "dur": (end_s - start_s) * 1e6,
        "args": args,
    }


def _meta(kind: str, pid: int, name: str, tid: int = 0) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def chrome_trace(result: Traced, max_events: int) -> str:
    events: list[dict[str, Any]] = []
    dropped = 0

    def add(event: dict[str, Any]) -> None:
        nonlocal dropped
        if len(events) < max_events:
            events.append(event)
        else:
            dropped += 1

    forward, backward = ("reads", "forward + backward") if result.measured else ("forward", "backward")
    for i, label in enumerate(result.summary["policy"]):
        workers, comm = 2 * i + 1, 2 * i + 2
        add(_meta("process_name", workers, f"{label}: workers"))
        add(_meta("process_name", comm, f"{label}: communication"))
        for row in result.iterations[result.iterations["policy"] == label].itertuples(index=False):
            if row.begin_end_s > row.start_s:
                add(_span("begin step", workers, row.rank, row.start_s, row.begin_end_s, iteration=row.iteration))
            if row.forward_end_s > row.begin_end_s or not result.measured:  # a real run's policy may read nothing
                add(_span(forward, workers, row.rank, row.begin_end_s, row.forward_end_s, iteration=row.iteration))
            add(_span(backward, workers, row.rank, row.forward_end_s, row.compute_end_s, iteration=row.iteration))
            if row.end_s > row.compute_end_s:
                add(
                    _span(
                        "sync",
                        workers,
                        row.rank,
                        row.compute_end_s,
                        row.end_s,
                        iteration=row.iteration,
                        wait_s=float(row.wait_s),
                        comm_s=float(row.comm_s),
                    )
                )
        add(_meta("thread_name", workers, "phases", PHASE_TRACK))
        for row in result.phases[result.phases["policy"] == label].itertuples(index=False):
            mode = "synchronous" if row.synchronous else "asynchronous"
            name = f"phase {row.phase}: {row.phase_policy}"
            add(_span(name, workers, PHASE_TRACK, row.start_s, row.end_s, mode=mode))
            if row.phase > 0:
                switch = row.start_s - row.switch_s
                add(
                    {
                        "name": f"switch to {row.phase_policy}",
                        "ph": "i",
                        "s": "p",
                        "pid": workers,
                        "tid": PHASE_TRACK,
                        "ts": switch * 1e6,
                        "args": {"step": int(row.start_step), "switch_s": float(row.switch_s)},
                    }
                )
                if row.switch_s > 0:
                    add(_span("switch (checkpoint, restart)", workers, PHASE_TRACK, switch, row.start_s))
        for row in result.ops[result.ops["policy"] == label].itertuples(index=False):
            collective = row.rank < 0
            tid = int(row.group) if collective else 100_000 + int(row.rank)
            if collective:
                name = row.kind
            else:
                name = f"{row.kind} shard {row.shard}" if row.shard >= 0 else f"{row.kind} x{row.count}"
            add(
                _span(
                    name,
                    comm,
                    tid,
                    row.launched_s,
                    row.finished_s,
                    step=int(row.step),
                    nbytes=float(row.nbytes),
                    group_size=int(row.group_size),
                    issued_s=float(row.issued_s),
                )
            )
        for row in result.faults[result.faults["policy"] == label].itertuples(index=False):
            add(_span(f"{row.what}: {row.targets} {row.effect}={row.value:g}", comm, 99_999, row.start_s, row.end_s))
        if not len(result.utilization):  # a real run: no per-link data
            continue
        util = result.utilization[(result.utilization["policy"] == label) & (result.utilization["kind"] != "nic")]
        for time_s, rows in util.groupby("time_s", sort=True):
            values = {link: round(float(u), 4) for link, u in zip(rows["link"], rows["utilization"])}
            add({"name": "link utilisation", "ph": "C", "pid": comm, "tid": 0, "ts": time_s * 1e6, "args": values})
    clock = "measured, seconds from the policy's start" if result.measured else "simulated"
    meta = {"dropped_events": dropped, "max_events": max_events, "time": clock}
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ms", "otherData": meta})
