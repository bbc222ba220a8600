"""Numerics mode's rule for a dense collective whose values travel in a `wire` type (policies.wire): each
member's chunk is rounded as it would travel, reduced in the order `wire_cast.reduced_chunk` gives, and what
every member receives is what travelled. `Replicas.collective_done` calls it; docs/policies.md states it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import torch

from policies.ops import AllGather, AllReduce, Collective, ReduceScatter
from sim.errors import PolicyError
from sim.numerics.replica import Range, Replica, partition
from sim.numerics.shards import shards
from sim.numerics.wire_cast import reduced_chunk, round_trip

Rows = Sequence[torch.Tensor]  # one flat tensor per rank, indexed by rank


def same_sizes(policy: str, op: Collective, ranges: Sequence[Range]) -> None:
    """Members of one collective hold tensors of one size; a policy that breaks this is a PolicyError."""
    if len({b - a for a, b in ranges}) != 1:
        raise PolicyError(f"policy {policy!r}: members of {op!r} hold tensors of different sizes {ranges}")


def wired(
    op: Collective,
    data: Rows,
    ranks: Sequence[int],
    buckets: Mapping[int, Optional[int]],
    reps: Sequence[Replica],
    policy: str,
    ranges: Optional[Sequence[Range]] = None,
) -> None:
    """A dense op with a `wire` on the members' rows `data` (`reps`: their replicas, for ranges and reduce-scatter
    slices): the members' chunks reduced and gathered as `wire_cast` says (`ranges`: the members' ranges when
    the caller resolved them, a fragment's gathered copies)."""
    wire, block, p = op.wire, op.block, len(ranks)
    assert wire is not None
    if isinstance(op, AllGather):
        whole = []
        for r in ranks:
            enclosing = reps[r].pop_slice(buckets[r])
            whole.append(enclosing if enclosing is not None else reps[r].range(buckets[r]))
        same_sizes(policy, op, whole)
        parts = [shards(a, b, p) for a, b in whole]
        arrived = [round_trip(data[r][parts[i][i][0] : parts[i][i][1]], wire, block) for i, r in enumerate(ranks)]
        for j, q in enumerate(ranks):  # every member, the sender too, holds what travelled
            for i in range(p):
                a, b = parts[j][i]
                data[q][a:b] = arrived[i]
        return
    if not isinstance(op, (AllReduce, ReduceScatter)):
        raise PolicyError(f"policy {policy!r}: numerics mode has no rule for {op!r} with a wire")
    if ranges is None:
        ranges = [reps[r].range(buckets[r]) for r in ranks]
        same_sizes(policy, op, ranges)
    gather = isinstance(op, AllReduce)  # an all-reduce's chunks as before; a reduce-scatter's are the shards
    parts = [partition(a, b, [1.0] * p) if gather else shards(a, b, p) for a, b in ranges]
    chunks = [[data[q][parts[j][c][0] : parts[j][c][1]] for j, q in enumerate(ranks)] for c in range(p)]
    reduced = [reduced_chunk(chunks[c], c, wire, block, gather) / p for c in range(p)]
    for i, r in enumerate(ranks):
        if gather:
            for c in range(p):
                lo, hi = parts[i][c]
                data[r][lo:hi] = reduced[c]
        else:
            lo, hi = parts[i][i]
            data[r][lo:hi] = reduced[i]
            reps[r].push_slice(buckets[r], (lo, hi))
