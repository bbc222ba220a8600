"""Phases: a run as a sequence of stretches, each under one policy's hooks, servers and budget kind.

Most policies are one phase from start to end. A *phased* policy (Sync-Switch) changes mode mid-run:
BSP then ASP, or BSP until a straggler appears and back after it. Backends drive every policy the
same way, so the switch is written once, here, and not in each backend:

1. `policy.next_phase(progress)` names the next phase (None: the run is over). A phase is a policy
   (whose hooks, `servers()` and `shared_budget` apply while it lasts) and the number of
   worker-iterations it may use: a synchronous phase of s steps uses s x workers, an asynchronous
   one hands its updates out one claim at a time.
2. A phase ends when its budget is used, or early when the phase is `adaptive` and the policy's
   `phase_over()` says so. Adaptive phases feed the policy the timing of every finished
   worker-iteration through `observe`, at *decision points* that both backends place identically:
   - synchronous phase: when a worker finishes step k, it waits until every worker has finished step
     k - 1 (the real backend gathers those timings with an all-gather issued a step earlier), the
     timings of step k - 1 are observed once, in rank order, and if `phase_over()` the phase ends
     after step k on every worker;
   - asynchronous phase: every claim for another iteration carries the claimant's last timing; it
     is observed, and if `phase_over()` this claim and every later one in the phase is refused.
3. Between phases the backend *switches*, as Sync-Switch does: every worker stops, the model is
   checkpointed (the servers' parameters, or the replicas' mean without servers), every worker and
   server restarts from it in the new mode, and the switch costs `switch_cost_s` of idle time.

Steps are numbered across phases: a phase starts at step `progress.step` (worker-iterations so far
over workers) on every worker, so a synchronous phase after an asynchronous one starts in step on
all workers, and parameter-server reads after a switch are never skipped as a step 0's are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class Budgeted(Protocol):
    """What a phase reads of its policy: whether workers share its updates (`Policy.shared_budget`).
    A phase holds a `policies.base.Policy`; the phase types sit below it, so they name only this."""

    @property
    def shared_budget(self) -> bool: ...


P = TypeVar("P", bound=Budgeted, covariant=True)


@dataclass(frozen=True)
class Progress:
    """Where a run stands when a backend asks for the next phase."""

    updates: int  # worker-iterations done so far
    budget: int  # worker-iterations of the whole run (the config's iterations x workers)
    workers: int
    phases: int  # phases finished so far

    @property
    def step(self) -> int:
        """The step the next phase starts at, on every worker."""
        return self.updates // self.workers

    @property
    def left(self) -> int:
        return self.budget - self.updates


@dataclass(frozen=True)
class Phase(Generic[P]):
    """One stretch of a run: `policy`'s hooks, servers and budget kind, for at most `updates`
    worker-iterations. `adaptive` phases observe timings and may end early (`Policy.phase_over`);
    `switch_cost_s` is the idle time of the switch *into* this phase (none for the first)."""

    policy: P
    updates: int
    label: str
    adaptive: bool = False
    switch_cost_s: float = 0.0

    @property
    def synchronous(self) -> bool:
        return not self.policy.shared_budget

    def steps(self, workers: int) -> int:
        """Steps of a synchronous phase (every worker runs them all)."""
        return self.updates // workers


@dataclass(frozen=True)
class Timing:
    """One finished worker-iteration as an adaptive policy observes it (seconds; `wait_s` of
    `seconds` was spent blocked on other workers, so `seconds - wait_s` is this worker's own pace)."""

    rank: int
    step: int
    seconds: float
    wait_s: float

    @property
    def busy_s(self) -> float:
        return max(0.0, self.seconds - self.wait_s)
