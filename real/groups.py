"""The process groups a policy will use, found by a dry run of its hooks and created once.

`torch.distributed.new_group` is a rendezvous of the whole world (every process must call it for
every group, in the same order), so the groups cannot be created lazily when one rank first meets
them. Policies are pure functions of (settings, plan, state, args), so calling every hook of every
rank and step ahead of the run lists exactly the groups the run will use, in the same order on every
process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from policies.base import Bucket, Policy
from policies.ops import Collective, Group, step_ops

# more distinct groups than this (e.g. a random shuffle schedule over many steps) would spend minutes
# in rendezvous; such a run should use a cyclic schedule
MAX_GROUPS = 1024


def planned_groups(policy: Policy, workers: int, steps: int, buckets: Sequence[Bucket]) -> list[Group]:
    """Every group of two or more ranks the policy's collectives use in `steps` steps, in first-use
    order (members' order ignored: one process group serves every ring order of the same ranks)."""
    seen: dict[tuple[int, ...], Group] = {}
    for step in range(steps):
        for rank in range(workers):
            programs = [policy.begin_step(rank, step)]
            programs += [policy.on_forward(rank, step, b) for b in buckets[::-1]]
            programs += [policy.on_gradients(rank, step, b) for b in buckets]
            programs.append(policy.end_step(rank, step))
            for program in programs:
                for op in (op for item in program for op in step_ops(item)):
                    if isinstance(op, Collective) and op.group.size > 1:
                        key = tuple(sorted(op.group.ranks))
                        if key not in seen:
                            seen[key] = op.group
                            if len(seen) > MAX_GROUPS:
                                raise ValueError(
                                    f"policy {policy.name!r} uses more than {MAX_GROUPS} distinct groups in "
                                    f"{steps} steps; the real backend creates every group up front "
                                    "(use a cyclic schedule or fewer iterations)"
                                )
    return list(seen.values())


class ProcessGroups:
    """torch process groups for a policy's groups; every process of the world must construct it."""

    def __init__(self, groups: Sequence[Group]) -> None:
        self._groups: dict[tuple[int, ...], Any] = {}
        for group in groups:
            key = tuple(sorted(group.ranks))
            self._groups[key] = dist.new_group(list(key))

    def __len__(self) -> int:
        return len(self._groups)

    def get(self, group: Group) -> Any:
        try:
            return self._groups[tuple(sorted(group.ranks))]
        except KeyError:
            raise KeyError(f"{group!r} was not planned; the policy's hooks are not deterministic") from None


def group_order(group: Group) -> list[int]:
    """Member positions in torch's group-rank order: `new_group` numbers members by global rank."""
    ranks = sorted(group.ranks)
    return [group.ranks.index(r) for r in ranks]
