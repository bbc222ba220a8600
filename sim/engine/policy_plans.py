"""The plan of each policy of a config: what its hooks issue over a run, found by calling them (a dry
run, no simulation), as the real backend does to create its process groups (real/groups.py).

A plan is what a policy decides from the cluster and the workload before any time passes: its phases
(Sync-Switch's), the gradient buckets, the server shards, and, in each phase, every op the ranks' hooks
issue at every step: its kind, its group's ranks in ring order (or its shard), its payload. Byte counts
are not part of it: they follow the model, which calibration measures. Two configs whose policies have
equal plans run the same algorithm; `real.calibrate.plans` uses this to keep the plan the real run used.

Steps: a synchronous phase of s steps calls every rank's hooks for each of its steps; an asynchronous
(shared-budget) phase deals its updates to the ranks round robin, since the real order follows timing.
An adaptive phase (Sync-Switch's online switching) is planned as if it never ended early.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Optional

from policies.base import Bucket, Policy, step_hooks
from policies.ops import Collective, Op, Pull, Push
from policies.phases import Phase, Progress
from sim.cluster.topology import build_cluster
from sim.compute.workload import compute_plan
from sim.config import Config
from sim.engine.faults import absences_of
from sim.engine.run import bind_policy

MAX_PHASES = 10_000  # a policy that keeps naming phases past this is a bug, not a plan


@dataclass(frozen=True, order=True)
class OpKey:
    """One kind of op a plan issues: where (phase, hook, bucket), what, and with whom."""

    phase: str
    hook: str
    bucket: int  # -1 for begin_step and end_step
    kind: str  # snake_case op class: all_reduce, reduce_scatter, push, wait_for_clock, ...
    members: tuple[int, ...]  # a collective's group in ring order; (shard,) for a push or pull; () else
    payload: str


@dataclass(frozen=True)
class PolicyPlan:
    """One policy's plan (see the module docstring); equal plans, equal algorithms."""

    label: str
    buckets: int
    phases: tuple[tuple[str, int], ...]  # (label, worker-iterations) in order
    shards: tuple[str, ...]  # the host of each server shard
    ops: Mapping[OpKey, int]  # how many times the ranks issue each (a collective: once per member)
    policy: Optional[Policy] = field(default=None, compare=False, repr=False)  # bound to the config

    def counts(self) -> Counter[tuple[str, int]]:
        """(kind, group size) -> ops: a collective once per group (its members issue it together), a
        push or pull once per rank; the size of a push or pull is 1."""
        out: Counter[tuple[str, int]] = Counter()
        for key, n in self.ops.items():
            size = len(key.members) if key.members and key.kind not in ("push", "pull") else 1
            out[(key.kind, size)] += n // size
        return out

    def describe(self) -> str:
        """A reader's summary, e.g. '4 buckets: 180 all_reduce of 2 ranks'."""
        counts = self.counts()
        ops = ", ".join(
            f"{n} {kind}" + (f" of {size} ranks" if kind not in ("push", "pull", "wait_for_clock") else "")
            for (kind, size), n in sorted(counts.items())
        )
        parts = [f"{self.buckets} bucket{'s' if self.buckets != 1 else ''}"]
        if len(self.phases) > 1:
            parts.append("phases " + " + ".join(f"{label} ({n} updates)" for label, n in self.phases))
        if self.shards:
            parts.append(f"{len(self.shards)} shard{'s' if len(self.shards) != 1 else ''}")
        return f"{', '.join(parts)}: {ops or 'no ops'}"


def policy_plans(config: Config) -> list[PolicyPlan]:
    """The plan of every policy of `config`, in config order (raises ConfigError as a run would)."""
    cluster = build_cluster(config.cluster, config.seed)
    plan = compute_plan(config.workload, cluster.gpu)
    workers = cluster.view.world_size
    buckets = [Bucket(b, bucket.nbytes, len(plan.buckets)) for b, bucket in enumerate(plan.buckets)]
    plans = []
    absences = absences_of(config, cluster)
    for index, entry in enumerate(config.policies):
        policy = bind_policy(entry, index, cluster, plan, config.workload.wire_precision, absences)
        phases: list[tuple[str, int]] = []
        ops: Counter[OpKey] = Counter()
        for phase, start in _phases(policy, config.iterations * workers, workers):
            phases.append((phase.label, phase.updates))
            live = policy.bound_view.membership.is_live
            for rank, step in _turns(phase, start, workers):
                if not live(rank, step):  # away (faults.departures): no hooks run
                    continue
                ops.update(_issued(phase.policy, phase.label, rank, step, buckets))
        shards = tuple(spec.host for spec in policy.all_servers())
        # the dry run moved `policy` through its phases
        fresh = bind_policy(entry, index, cluster, plan, config.workload.wire_precision, absences)
        plans.append(PolicyPlan(entry.display, len(buckets), tuple(phases), shards, dict(ops), fresh))
    return plans


def _phases(policy: Policy, budget: int, workers: int) -> Iterator[tuple[Phase[Policy], int]]:
    """Each phase with the step it starts at, every phase running its whole budget."""
    updates = 0
    for done in range(MAX_PHASES):
        progress = Progress(updates, budget, workers, done)
        phase = policy.next_phase(progress)
        if phase is None:
            return
        yield phase, progress.step
        updates += phase.updates
    raise RuntimeError(f"policy {policy.name!r} named more than {MAX_PHASES} phases; this is a bug")


def _turns(phase: Phase[Policy], start: int, workers: int) -> Iterator[tuple[int, int]]:
    """(rank, step) of every worker-iteration of the phase (asynchronous: dealt round robin)."""
    if phase.synchronous:
        for step in range(start, start + phase.updates // workers):
            for rank in range(workers):
                yield rank, step
    else:
        for update in range(phase.updates):
            yield update % workers, start + update // workers


def _issued(policy: Policy, label: str, rank: int, step: int, buckets: list[Bucket]) -> Iterator[OpKey]:
    for hook, bucket, op in step_hooks(policy, rank, step, buckets):
        payload = getattr(op, "payload", None)
        yield OpKey(label, hook, bucket, _kind(op), _members(op), payload.value if payload else "")


def _kind(op: Op) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", type(op).__name__).lower()


def _members(op: Op) -> tuple[int, ...]:
    if isinstance(op, Collective):
        return tuple(op.group.ranks)
    if isinstance(op, (Push, Pull)):
        return (op.shard,)
    return ()


def plan_change(before: PolicyPlan, after: PolicyPlan) -> str:
    """'<after> instead of <before>' for a reader (empty when the plans are equal)."""
    if before == after:
        return ""
    old, new = before.describe(), after.describe()
    if old != new:
        return f"{new} instead of {old}"
    if before.shards != after.shards:
        return f"shards on {list(after.shards)} instead of {list(before.shards)}"
    return f"{new}, with other groups of ranks"
