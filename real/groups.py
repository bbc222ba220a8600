"""The process groups a policy will use, found by a dry run of its hooks and created once.

`torch.distributed.new_group` is a rendezvous of the whole world (every process must call it for
every group, in the same order), so the groups cannot be created lazily when one rank first meets
them. Policies are pure functions of (settings, plan, state, args), so calling every hook of every
rank and step ahead of the run lists exactly the groups the run will use, in the same order on every
process.

Each group gets the run's `--timeout` (without one, `new_group` falls back to torch's default: 30
minutes on gloo, 10 on NCCL, and a frozen peer would hold its members that long). NCCL sets a
group's communicator up on the group's first collective, and its connections per algorithm and per
pair of members on first use; `ProcessGroups.warm_up` makes those calls before the policy's clock
starts, so the setup is not counted in step 0's communication. A policy's groups are destroyed when
it ends (`ProcessGroups.destroy`): every policy creates its own, and NCCL communicators hold GPU
memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.base import Bucket, Policy, step_hooks
from policies.ops import Collective, Group

# more distinct groups than this (e.g. a random shuffle schedule over many steps) would spend minutes
# in rendezvous; such a run should use a cyclic schedule
MAX_GROUPS = 1024


def planned_groups(policy: Policy, workers: int, steps: int, buckets: Sequence[Bucket]) -> list[Group]:
    """Every group of two or more ranks the policy's collectives use in `steps` steps, in first-use
    order (members' order ignored: one process group serves every ring order of the same ranks). A rank
    away at a step (`faults.departures`, policies.membership) runs no hook there, so only live (rank, step)
    pairs are dry-run: the groups of the live ranks, and those that hand joiners their state, are created."""
    seen: dict[tuple[int, ...], Group] = {}
    view = policy.view  # None: an unbound policy (DDP hooks' plans), every rank live
    live = view.membership.is_live if view is not None and view.membership.changes else None
    for step in range(steps):
        for rank in range(workers):
            if live is not None and not live(rank, step):
                continue
            for _, _, op in step_hooks(policy, rank, step, buckets):
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
    """torch process groups for a policy's groups; every process of the world must construct it,
    and destroy it, in the same order as the others."""

    def __init__(self, groups: Sequence[Group], timeout_s: Optional[float] = None) -> None:
        """`timeout_s`: how long a collective on any of the groups may wait (None: torch's default)."""
        timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
        self._groups: dict[tuple[int, ...], Any] = {}
        for group in groups:
            key = tuple(sorted(group.ranks))
            self._groups[key] = dist.new_group(list(key), timeout=timeout)

    def __len__(self) -> int:
        return len(self._groups)

    def get(self, group: Group) -> Any:
        try:
            return self._groups[tuple(sorted(group.ranks))]
        except KeyError:
            raise KeyError(f"{group!r} was not planned; the policy's hooks are not deterministic") from None

    def warm_up(self, rank: int, device: torch.device) -> None:
        """Set up every group `rank` belongs to, with one-element calls on `device`: an all-reduce
        (NCCL creates the communicator), an all-gather (the ring) and an all-to-all (a connection to
        every other member, which the ring reduce-scatter's point-to-point steps use). Every process
        takes the groups in creation order, the same everywhere, so no two members wait for each
        other in opposite orders; on CUDA each group's calls finish before the next group's start.
        Run before the policy's clock starts."""
        for key, pg in self._groups.items():
            if rank not in key:
                continue
            p = len(key)
            one = torch.zeros(1, device=device)
            dist.all_reduce(one, group=pg)
            dist.all_gather([torch.empty(1, device=device) for _ in range(p)], one, group=pg)
            dist.all_to_all_single(torch.empty(p, device=device), torch.zeros(p, device=device), group=pg)
            if device.type == "cuda":
                torch.cuda.synchronize(device)

    def destroy(self) -> None:
        """Free every group (an NCCL communicator holds GPU memory); call once the policy's work on
        them is finished, on every process, after the others' last use (a barrier). A process outside
        a group holds a placeholder that `destroy_process_group` ignores."""
        for pg in self._groups.values():
            dist.destroy_process_group(pg)
        self._groups.clear()


def group_order(group: Group) -> list[int]:
    """Member positions in torch's group-rank order: `new_group` numbers members by global rank."""
    ranks = sorted(group.ranks)
    return [group.ranks.index(r) for r in ranks]
