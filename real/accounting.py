"""From every rank's raw timings to the simulator's result rows (sim/results/tables.py), on rank 0.

Wait vs comm follows the simulator's definition: *wait* is time a rank was blocked on other workers,
i.e. from its own issue of a collective until the last member issued it (a launched collective: from
the rank's Wait for it, if that began before the last member issued it; from its launch, never), plus
the time servers held
its pulls and clock waits; *comm* is the rest of the non-compute time. Ranks report times relative
to their own start of the policy, taken right after a barrier, so on one machine (or with
synchronized clocks) member issue times compare directly.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from real.device_use import DeviceUse
from sim.compute.sparse_traffic import received_imbalance
from sim.engine.worker import BlockedTime, IterationRow


@dataclass
class RankReport:
    """What one worker process measured in one policy (times in seconds from its policy start)."""

    rank: int
    rows: list[IterationRow] = field(default_factory=list)
    collectives: list[tuple] = field(default_factory=list)  # real.executor.CollectiveRecord
    p2p: list[tuple] = field(default_factory=list)  # real.executor.P2PRecord
    blocked: list[tuple[int, float, float]] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    # every `eval_every` iterations (synchronous budgets): (iteration, seconds, parameters, losses so far,
    # the policy's global model buffer or None)
    snapshots: list[tuple] = field(default_factory=list)
    phases: list[tuple] = field(default_factory=list)  # rows of sim.results.tables.PHASE_FIELDS (times from the start)
    checkpoints: list = field(default_factory=list)  # the model restarted from at each switch (tensors)
    serving: bool = True  # the last phase ran parameter-server shards
    parameters: object = None  # final flat parameters (a tensor)
    global_tensor: str | None = None  # the last phase policy's global model buffer (Policy.global_tensor)
    global_model: object = None  # that buffer at the end (a tensor), when the policy names one
    error: str | None = None
    device_use: DeviceUse | None = None  # where it trained (real/device_use.py)
    loss_scale: float = float("nan")  # fp16: the loss scale at the end
    # (step, recomputes): steps whose fp16 gradient overflowed and was computed again (real/precision.py);
    # the recompute is inside the step's compute span, and the other ranks wait for it
    overflows: list[tuple[int, int]] = field(default_factory=list)
    # (range, slice) per bucket this rank owns a shard of at the end of each step (sim.numerics.shards): the
    # same every step; rank 0 takes the other elements of its parameters and snapshots from their owners
    owned: list = field(default_factory=list)


def _traffic(members: Sequence[tuple]) -> tuple[float, float]:
    """A sparse call's bytes on the wire (what its members sent) and max / mean of what they
    received; NaN for dense calls, whose records carry no received bytes."""
    received = [r[8] if len(r) > 8 else -1 for r in members]
    if min(received) < 0:
        return float("nan"), float("nan")
    return float(sum(r[5] for r in members)), received_imbalance(np.asarray(received, dtype=float))


def account(reports: Sequence[RankReport]) -> tuple[list[IterationRow], list[tuple]]:
    """Iteration rows with wait_s filled in, and op rows (sim/results/tables.py OP_FIELDS)."""
    blocked = BlockedTime()
    calls: dict[tuple, list[tuple]] = defaultdict(list)
    for report in reports:
        for step, start, end in report.blocked:
            blocked.add(report.rank, step, start, end)
        for record in report.collectives:
            step, rank, key, seq = record[:4]
            calls[(key, seq)].append(record)
    groups: dict[tuple[int, ...], int] = {}
    nan = float("nan")
    ops: list[tuple] = []
    for (key, _seq), members in sorted(calls.items(), key=lambda kv: min(r[6] for r in kv[1])):
        last = max(r[6] for r in members)
        for record in members:  # blocked from its issue (a launched call: its Wait, if any) to the last issue
            step, since = (record[9], record[10]) if len(record) > 10 else (record[0], record[6])
            if step >= 0:
                blocked.add(record[1], step, since, last)
        first = min(members, key=lambda r: r[6])
        gid = groups.setdefault(key, len(groups))
        ops.append(
            (first[0], -1, first[4], gid, len(key), -1, 1, float(first[5]), first[6], last, max(r[7] for r in members))
            + _traffic(members)
        )
    for report in reports:
        for step, rank, kind, shard, count, nbytes, issued, finished in report.p2p:
            row = (step, rank, kind, -1, 1, shard, count, float(nbytes), issued, issued, finished, float(nbytes), nan)
            ops.append(row)
    rows: list[IterationRow] = []
    for report in reports:
        for step, rank, start, begin_end, forward_end, compute_end, end, compute_s, _, phase in report.rows:
            wait = blocked.pop_wait(rank, step, start, end, [(forward_end, compute_end)])
            rows.append((step, rank, start, begin_end, forward_end, compute_end, end, compute_s, wait, phase))
    return rows, ops
