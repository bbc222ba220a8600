"""When and what numerics mode evaluates: the consensus model (and each replica) on the held-out split.

An *iteration* here is `updates / workers`: all workers' completed iterations divided by the world
size, the unit in which Sync-Switch equates ASP's per-worker updates with BSP steps. Evaluation runs
at iteration 0, every `eval_every` iterations, and once more at the end.
"""

from __future__ import annotations

from sim.numerics.replicas import Replicas

# (iteration, simulated time, worker (-1: consensus), train loss, held-out loss, held-out accuracy)
AccuracyRow = tuple[float, float, int, float, float, float]


class Evaluator:
    def __init__(self, replicas: Replicas, every: int, workers: bool) -> None:
        self.replicas, self.every, self.workers = replicas, every, workers
        self.world = replicas.world
        self.completed = 0  # worker-iterations
        self.evaluated_at = -1
        self.rows: list[AccuracyRow] = []

    def iteration_done(self, now: float) -> None:
        self.completed += 1
        if self.completed % (self.every * self.world) == 0:
            self.evaluate(now)

    def evaluate(self, now: float) -> None:
        if self.completed == self.evaluated_at:
            return
        self.evaluated_at = self.completed
        iteration = self.completed / self.world
        reps, task = self.replicas, self.replicas.task
        losses = reps.losses
        recent = [x for worker in losses for x in worker]
        loss, accuracy = task.evaluate(reps.consensus())
        self.rows.append((iteration, now, -1, _mean(recent), loss, accuracy))
        if self.workers:
            for r in range(self.world):
                loss, accuracy = task.evaluate(reps.params[r])
                self.rows.append((iteration, now, r, _mean(losses[r]), loss, accuracy))
        for worker in losses:
            worker.clear()


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
