"""Sharded state (policies/fsdp.py): which elements of a bucket a rank owns after a ReduceScatter, and the
full model its owners hold together.

Shard boundaries follow FSDP's flat parameter, which pads a unit to a multiple of the group size: member i
of p owns the i-th chunk of ceil(n / p) elements, clipped to the unit (the last members may own fewer, or
none). Between a ReduceScatter and the AllGather that gathers its slices back, a rank's values outside its
slice are not its to read: the owners stepped them (the local optimizer steps only the slice it owns). The
full model (FSDP's full state dict, gathered before every evaluation and at the end of a run) takes each
element from the ranks that own it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Range = tuple[int, int]
Owned = Sequence[tuple[Range, Range]]  # (the range a ReduceScatter split, the slice this rank kept) per bucket


def shards(a: int, b: int, p: int) -> list[Range]:
    """[a, b) split among p members as FSDP pads a flat parameter: chunks of ceil((b - a) / p) elements."""
    chunk = -(-(b - a) // p)
    return [(min(a + i * chunk, b), min(a + (i + 1) * chunk, b)) for i in range(p)]


def full_models(params: torch.Tensor, owned: Sequence[Owned]) -> torch.Tensor:
    """`params` (one row per rank) with each row's elements outside its owned slices replaced by the mean of
    the rows that own them (one owner under full sharding; under hybrid sharding the replicas of a shard, which
    hold the same values). Rows that own everything (no pending ReduceScatter) come back as they are; so does
    an element nobody owns. Non-owned values are never read (they may be stale, or freed memory)."""
    if not any(owned):  # nobody holds a shard (every policy but a sharded one): no mask to build
        return params
    mine = torch.ones(params.shape, dtype=torch.bool, device=params.device)
    for row, spans in enumerate(owned):
        for (a, b), (lo, hi) in spans:
            mine[row, a:lo] = False
            mine[row, hi:b] = False
    if bool(mine.all()):
        return params
    owners = mine.sum(dim=0)
    total = torch.where(mine, params, torch.zeros_like(params)).sum(dim=0)
    value = total / owners.clamp(min=1).to(params.dtype)
    return torch.where(mine | (owners == 0), params, value)
