"""When and what numerics mode evaluates: the consensus model (and each replica) on the held-out split.

Sharded state (policies/fsdp.py): each replica is evaluated as its full model (`Replicas.full`: the
elements it does not own taken from their owners, as FSDP's full state dict gathers them).

The consensus model is `Replicas.consensus`: the servers' model, else the policy's global model
(`Policy.global_tensor`, DiLoCo's anchor: worker 0's copy, which every worker holds alike), else the mean
of the replicas; `scored` names which (`accuracy.csv`'s `scored` column).

An *iteration* here is `updates / workers`: all workers' completed iterations divided by the world
size, the unit in which Sync-Switch equates ASP's per-worker updates with BSP steps. Evaluation runs
at iteration 0, every `eval_every` iterations, and once more at the end.

With a synchronous budget (every worker runs the same iterations) iteration k is evaluated as each
replica stood when it finished its own k-th iteration (copied then), once the last worker has: a
worker that is ahead (DS-Sync's rack-local groups) is not caught half-way through step k + 1. The
real backend evaluates the same states (`real/results.py`). With a shared budget (ASP, SSP), where
workers' counts differ, the replicas and servers are evaluated as they are when the total count
reaches a multiple of `eval_every x workers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from policies.membership import Membership
from sim.numerics.replicas import Replicas
from sim.numerics.shards import full_models

# (iteration, simulated time, worker (-1: consensus), train loss, held-out loss, held-out accuracy)
AccuracyRow = tuple[float, float, int, float, float, float]


class Evaluator:
    def __init__(self, replicas: Replicas, every: int, workers: bool, synchronous: bool) -> None:
        self.replicas, self.every, self.workers, self.synchronous = replicas, every, workers, synchronous
        self.world = replicas.world
        self.completed = 0  # worker-iterations
        self.evaluated_at = -1
        self.rows: list[AccuracyRow] = []
        self._done = [0] * self.world  # synchronous: iterations each worker finished
        # iteration -> rank -> (params, losses, global model, owned slices)
        self._copies: dict[int, dict[int, tuple]] = {}
        self._scored: list[str] = []  # the models the consensus rows scored, in order, each once

    @property
    def membership(self) -> Membership:
        """Workers away at some steps are neither waited for nor scored."""
        return self.replicas.membership

    def begin_phase(self, synchronous: bool, start: int) -> None:
        """A phase starts at step `start` on every worker (policies.phases); its budget kind decides
        how iterations are evaluated, as above."""
        self.synchronous = synchronous
        self._done = [start] * self.world
        self._copies.clear()

    def iteration_done(self, now: float, rank: int) -> None:
        self.completed += 1
        if not self.synchronous:
            if self.completed % (self.every * self.world) == 0:
                self.evaluate(now)
            return
        self._done[rank] += 1
        k = self._done[rank]
        if k % self.every:
            return
        live = self.membership.live(k - 1)  # the workers that trained step k - 1
        losses = self.replicas.losses[rank]
        held = self.replicas.global_model(rank) if rank == live[0] else None
        owned = self.replicas.replicas[rank].owned()
        copy = (self.replicas.params[rank].clone(), list(losses), None if held is None else held.clone(), owned)
        self._copies.setdefault(k, {})[rank] = copy
        losses.clear()
        if len(self._copies[k]) == len(live):  # the last worker finished iteration k
            copies = self._copies.pop(k)
            params = full_models(torch.stack([copies[r][0] for r in live]), [copies[r][3] for r in live])
            self._rows(k, now, params, [copies[r][1] for r in live], copies[live[0]][2], live)
            self.evaluated_at = self.completed

    def skipped(self, rank: int, steps: int) -> None:
        """`rank` was away for `steps` steps (faults.departures): they count as done, with no copy."""
        if self.synchronous:
            self._done[rank] += steps

    def evaluate(self, now: float) -> None:
        """The replicas (and servers) as they are now."""
        if self.completed == self.evaluated_at:
            return
        self.evaluated_at = self.completed
        reps = self.replicas
        windows = [list(worker) for worker in reps.losses]
        for worker in reps.losses:
            worker.clear()
        if not self.membership.changes:
            self._rows(self.completed / self.world, now, reps.full(), windows)
            return
        live = list(self.membership.live(max(self._done) - 1))
        self._rows(float(max(self._done)), now, reps.full(live), [windows[r] for r in live], None, live)

    @property
    def scored(self) -> str:
        """Which model the consensus rows scored: `mean` (of the replicas), `servers`, or the policy's
        global tensor (`anchor`); phases that scored different ones: `mean, then anchor`."""
        return ", then ".join(self._scored) or self.replicas.scored

    def _rows(
        self,
        iteration: float,
        now: float,
        params: torch.Tensor,
        windows: list[list[float]],
        global_model: Optional[torch.Tensor] = None,
        ranks: Sequence[int] = (),
    ) -> None:
        """Rows for the replicas `params` (one row per worker of `ranks`, default all) and their consensus
        (`global_model`: the first of them's copy of the policy's global model taken with `params`)."""
        task, reps = self.replicas.task, self.replicas
        ranks = ranks or range(self.world)
        if not self._scored or self._scored[-1] != reps.scored:
            self._scored.append(reps.scored)
        if global_model is None and reps.global_tensor is not None:
            global_model = reps.stores[ranks[0]].tensors[reps.global_tensor]
        loss, accuracy = task.evaluate(reps.consensus(params, global_model))
        self.rows.append((iteration, now, -1, _mean([x for w in windows for x in w]), loss, accuracy))
        if self.workers:
            for i, r in enumerate(ranks):
                loss, accuracy = task.evaluate(params[i])
                self.rows.append((iteration, now, r, _mean(windows[i]), loss, accuracy))


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
