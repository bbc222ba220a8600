"""Divide-and-shuffle patterns for DS-Sync: islands, local and mixing partitions, and their checks.

Small pure functions over tuples of ranks, so that `policies.ds_sync` stays a thin shell and each
piece can be tested alone. A *pattern* is a partition of the ranks into groups (tuples of ranks; a
group's order is its ring order); a *schedule* is the sequence of patterns the steps walk through.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from math import ceil

import numpy as np

from policies.view import ClusterView

Ranks = tuple[int, ...]
Pattern = list[Ranks]

# oversubscription is a ratio of float sums: 4 NICs over an equal uplink must read as non-blocking
OVERSUBSCRIBED = 1.0 + 1e-9


def islands(view: ClusterView) -> list[Ranks]:
    """The bottleneck-free regions of the cluster, ordered by their first rank.

    When some rack's uplink is oversubscribed, each physical rack is an island (ranks grouped by
    `view.rack_of`, whatever their numbering); otherwise the whole cluster is one. Inside an island
    ranks go host by host (hosts in order of their first rank), ascending within a host, so that a
    chunk of consecutive ranks crosses as few NICs as it can.
    """
    first_of_host: dict[str, int] = {}
    for rank in range(view.world_size):
        first_of_host.setdefault(view.host_of(rank), rank)
    order = sorted(range(view.world_size), key=lambda r: (first_of_host[view.host_of(r)], r))
    if not any(rack.oversubscription(view.hosts) > OVERSUBSCRIBED for rack in view.racks.values()):
        return [tuple(order)]
    by_rack: dict[object, list[int]] = {}  # hosts outside any rack share the key None: one island
    for rank in order:
        by_rack.setdefault(view.rack_of(rank), []).append(rank)
    return sorted((tuple(ranks) for ranks in by_rack.values()), key=min)


def chunk(ranks: Ranks, size: int, shift: int = 0) -> Pattern:
    """`ranks` rotated left by `shift`, cut into consecutive groups of `size` (the last may be smaller)."""
    if not ranks:
        return []
    shift %= len(ranks)
    rotated = ranks[shift:] + ranks[:shift]
    return [rotated[i : i + size] for i in range(0, len(rotated), size)]


def local_chunks(ranks: Ranks, size: int, parity: int) -> Pattern:
    """An island's local groups of `size`; odd `parity` shifts the cut by ceil(size/2).

    Every cut between two groups of the even chunking falls inside a group of the odd one, so the
    two chunkings together connect the island (when size >= 2).
    """
    shift = ceil(size / 2) if parity % 2 and size < len(ranks) else 0
    return chunk(ranks, size, shift)


def local_pattern(islands: Sequence[Ranks], sizes: Sequence[int], parity: int) -> Pattern:
    """Every island chunked locally: no group leaves its island."""
    return sorted((g for island, size in zip(islands, sizes) for g in local_chunks(island, size, parity)), key=min)


def island_pairs(count: int, which: int) -> list[tuple[int, int]]:
    """Matchings of `count` islands: M_0 = (0,1),(2,3),...; M_1 = (1,2),(3,4),...,(count-1,0).

    The wrap-around pair exists only for an even count; with an odd count one island sits out of
    each matching. Either way M_0 and M_1 together form a connected graph over the islands (a ring,
    or a path for odd counts), and no island is in two pairs of one matching.
    """
    if count < 2:
        return []
    if which % 2 == 0:
        return [(i, i + 1) for i in range(0, count - 1, 2)]
    pairs = [(i, i + 1) for i in range(1, count - 1, 2)]
    if count % 2 == 0:
        pairs.append((count - 1, 0))
    return pairs


def mixing_pattern(islands: Sequence[Ranks], sizes: Sequence[int], k: int) -> Pattern:
    """The k-th mixing pattern: the islands paired by M_(k mod 2); in each pair one ambassador per
    island (the island's rank k mod its size) forms a 2-rank group with the other's ambassador. The
    other ranks are grouped locally, in chunks of the island's size (shifted on odd k).

    Each rack is in at most one pair and sends one ambassador, so each uplink direction carries one
    flow: no two groups contend on a rack uplink.
    """
    ambassador: dict[int, int] = {}
    pattern: Pattern = []
    for a, b in island_pairs(len(islands), k):
        ambassador[a] = islands[a][k % len(islands[a])]
        ambassador[b] = islands[b][k % len(islands[b])]
        pattern.append(tuple(sorted((ambassador[a], ambassador[b]))))
    for j, (island, size) in enumerate(zip(islands, sizes)):
        rest = tuple(r for r in island if r != ambassador[j]) if j in ambassador else island
        pattern += local_chunks(rest, size, k)
    return sorted(pattern, key=min)


def shuffle_pattern(world: int, size: int, seed: int, step: int) -> Pattern:
    """A seeded random permutation of all ranks cut into groups of `size`, each in rank order.

    A pure function of (seed, step), so every rank (and every backend) computes the same one.
    """
    order = np.random.default_rng([seed, step]).permutation(world).tolist()
    return sorted((tuple(sorted(order[i : i + size])) for i in range(0, world, size)), key=min)


def partition_problem(pattern: Iterable[Sequence[int]], world: int) -> str | None:
    """Why `pattern` is not a partition of ranks 0..world-1 (every rank in exactly one group), or None."""
    seen: dict[int, int] = {}
    for index, group in enumerate(pattern):
        if len(group) == 0:
            return f"group {index} is empty"
        for rank in group:
            if not 0 <= rank < world:
                return f"group {index} names rank {rank}, but the ranks are 0..{world - 1}"
            if rank in seen:
                where = f"twice in group {index}" if seen[rank] == index else f"in groups {seen[rank]} and {index}"
                return f"rank {rank} is {where}"
            seen[rank] = index
    if len(seen) < world:
        missing = [r for r in range(world) if r not in seen]
        return f"{'rank' if len(missing) == 1 else 'ranks'} {spans(missing)} in no group"
    return None


class Components:
    """Union-find over ranks: which ranks a set of groups connects (path halving, union by size)."""

    def __init__(self, world: int) -> None:
        self.parent = list(range(world))
        self.size = [1] * world
        self.count = world

    def find(self, rank: int) -> int:
        parent = self.parent
        while parent[rank] != rank:
            parent[rank] = parent[parent[rank]]
            rank = parent[rank]
        return rank

    def join(self, group: Sequence[int]) -> None:
        """Connect every member of `group`."""
        root = self.find(group[0])
        for rank in group[1:]:
            other = self.find(rank)
            if other != root:
                if self.size[other] > self.size[root]:
                    root, other = other, root
                self.parent[other] = root
                self.size[root] += self.size[other]
                self.count -= 1

    def parts(self) -> list[Ranks]:
        """The connected parts, each in rank order, ordered by their first rank."""
        by_root: dict[int, list[int]] = {}
        for rank in range(len(self.parent)):
            by_root.setdefault(self.find(rank), []).append(rank)
        return [tuple(ranks) for ranks in by_root.values()]


def components(patterns: Iterable[Iterable[Sequence[int]]], world: int) -> list[Ranks]:
    """The parts of the graph joining ranks that share a group in any of `patterns` (one part = connected)."""
    union = Components(world)
    for pattern in patterns:
        for group in pattern:
            union.join(group)
    return union.parts()


def disconnection(parts: Sequence[Ranks]) -> str:
    """A reader's account of ranks that never average together, e.g. '2 parts: {0-3} and {4-7}'."""
    shown = [f"{{{spans(p)}}}" for p in parts[:4]]
    listed = (
        f"{', '.join(shown)} and {len(parts) - 4} more"
        if len(parts) > 4
        else f"{', '.join(shown[:-1])} and {shown[-1]}"
    )
    return f"{len(parts)} parts that never share a group: {listed}"


def spans(ranks: Iterable[int], limit: int = 6) -> str:
    """Ranks as compact ranges: [0, 1, 2, 3, 8, 9] -> '0-3, 8-9' (at most `limit` ranges shown)."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    text = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:limit]]
    return ", ".join(text) + (", ..." if len(runs) > limit else "")
