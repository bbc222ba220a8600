"""Checks on every op a policy yields, shared by both backends: a bad op fails with a message naming
the policy, the rank, the step and the op, before anything is sent."""

from __future__ import annotations

import math

from policies.ops import ALLREDUCE_ALGORITHMS, AllReduce, Collective, Group, Op, Pull, Push, WaitForClock
from sim.errors import PolicyError


class OpValidator:
    def __init__(self, policy: str, world: int, shards: int) -> None:
        self.policy, self.world, self.shards = policy, world, shards
        self._members: dict[Group, frozenset[int]] = {}  # validated groups -> member sets

    def fail(self, rank: int, step: int, op: object, why: str) -> PolicyError:
        return PolicyError(f"policy {self.policy!r} yielded {op!r} on rank {rank} at step {step}: {why}")

    def check(self, rank: int, step: int, op: object) -> None:
        if not isinstance(op, Op):
            raise self.fail(rank, step, op, "not an op from policies.ops")
        nbytes = getattr(op, "nbytes", 0.0)
        if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
            raise self.fail(rank, step, op, "nbytes must be a finite number >= 0")
        if isinstance(op, Collective):
            members = self._members.get(op.group)
            if members is None:  # check each distinct group once: every rank issues the same ones
                bad = [r for r in op.group.ranks if not (isinstance(r, int) and 0 <= r < self.world)]
                if bad:
                    raise self.fail(rank, step, op, f"ranks {bad} do not exist (world size {self.world})")
                members = self._members[op.group] = frozenset(op.group.ranks)
            if rank not in members:
                raise self.fail(rank, step, op, f"rank {rank} is not a member of the group")
            if isinstance(op, AllReduce) and op.algorithm not in ALLREDUCE_ALGORITHMS:
                raise self.fail(rank, step, op, f"unknown algorithm; allowed: {', '.join(ALLREDUCE_ALGORITHMS)}")
        elif isinstance(op, (Push, Pull)):
            if not 0 <= op.shard < self.shards:
                raise self.fail(rank, step, op, f"no shard {op.shard}; the policy declared {self.shards} shards")
        elif isinstance(op, WaitForClock):
            if not isinstance(op.min_clock, int):
                raise self.fail(rank, step, op, "min_clock must be an int")
        else:
            raise self.fail(rank, step, op, "the backend has no rule for this op type")
