"""Who may start another iteration in a phase, and the decision points of adaptive phases
(policies.phases). `SharedClaims` is the rule of an asynchronous phase, plain Python so the real
backend's coordinating shard applies it too; `PhaseBudget` is the simulator's side of a phase.

Synchronous phase: every worker runs the phase's steps. Asynchronous phase (a policy with a shared
budget: ASP, SSP): workers share the phase's updates, so fast workers do more of them, the way
Sync-Switch counts ASP steps. Adaptive phases may end early:
- synchronous: before step k + 1 a worker waits until every worker has finished step k - 1; the
  first to get there has the policy observe step k - 1's timings in rank order, and the phase ends
  before step k + 1 on every worker if the policy says so;
- asynchronous: a claim carries the claimant's last timing, which the policy observes first; once
  the policy says the phase is over, claims are granted only until the run's worker-iterations
  make whole steps, so the next phase starts every worker at the same step, then refused.
"""

from __future__ import annotations

from typing import Optional, Union

import simpy

from policies.base import Policy
from policies.phases import Phase, Progress, Timing
from sim.engine.clocks import ClockBoard


class SharedClaims:
    """The claims of an asynchronous phase: `phase.updates` at most, fewer if it adapts."""

    def __init__(self, phase: Phase[Policy], policy: Policy, progress: Progress) -> None:
        """`policy`: the phased policy that observes (the phase's own policy runs the hooks)."""
        self.phase, self.policy = phase, policy
        self.before, self.world = progress.updates, progress.workers
        self.claimed = 0
        self.closed = False

    def claim(self, last: Optional[Timing]) -> bool:
        """May a worker start another iteration? `last`: its previous iteration in this phase."""
        if self.claimed >= self.phase.updates:
            return False
        if self.phase.adaptive and last is not None and not self.closed:
            self.policy.observe(last)
            self.closed = self.policy.phase_over()
        if self.closed and (self.before + self.claimed) % self.world == 0:
            return False
        self.claimed += 1
        return True


class PhaseBudget:
    def __init__(
        self, phase: Phase[Policy], policy: Policy, progress: Progress, clocks: ClockBoard, weight: int = 1
    ) -> None:
        """`policy`: the phased policy that observes (the phase's own policy runs the hooks). `weight`: the
        workers each simulated one stands for (host symmetry, sim/engine/symmetry.py)."""
        self.phase, self.policy, self.clocks, self.weight = phase, policy, clocks, weight
        self.start, self.world = progress.step, progress.workers
        self.steps = phase.steps(self.world)
        self.shared = None if phase.synchronous else SharedClaims(phase, policy, progress)
        self.claimed = 0  # synchronous phases
        self._timings: dict[int, dict[int, Timing]] = {}  # synchronous: step -> rank -> timing
        self._decided: dict[int, bool] = {}  # synchronous: step -> the phase ends after step + 1

    @property
    def used(self) -> int:
        """Worker-iterations this phase consumed."""
        return self.shared.claimed if self.shared is not None else self.claimed

    def claim(self, rank: int, step: int, last: Optional[Timing]) -> Union[bool, simpy.Event]:
        """May `rank` start `step`? A bool, or an event whose value is the answer (a decision point
        that waits for other workers). `last`: the claimant's previous iteration in this phase."""
        if self.shared is not None:
            return self.shared.claim(last)
        if step >= self.start + self.steps:
            return False
        if not self.phase.adaptive or step < self.start + 2:
            return self._grant()
        return self._synchronous_decision(step)

    def finished(self, timing: Timing) -> None:
        """A worker finished an iteration (synchronous adaptive phases keep it for the decision)."""
        if self.phase.adaptive and self.shared is None:
            self._timings.setdefault(timing.step, {})[timing.rank] = timing

    def _grant(self) -> bool:
        self.claimed += self.weight
        return True

    def _synchronous_decision(self, step: int) -> simpy.Event:
        """Before `step`: wait for every worker's step - 2, observe it once, answer for all."""
        seen = step - 2
        answer = self.clocks.env.event()

        def decide(_ev: object) -> None:
            if seen not in self._decided:
                for timing in sorted(self._timings.pop(seen).values(), key=lambda t: t.rank):
                    self.policy.observe(timing)
                self._decided[seen] = self.policy.phase_over()
            answer.succeed(False if self._decided[seen] else self._grant())

        self.clocks.wait(seen + 1).callbacks.append(decide)
        return answer
