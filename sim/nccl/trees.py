"""NCCL's double binary tree over a collective's hosts: which host is whose parent in each tree.

Across hosts NCCL runs a tree all-reduce on two binary trees at once, each carrying half of the data
(`src/graph/trees.cc` of NVIDIA/nccl). Hosts are numbered in the order their first rank appears. The
first tree is an in-order binary tree rooted at host 0: a host's parent clears its lowest set bit and
sets the next one up (or only clears it, where that host does not exist). The second tree is the
first mirrored (host h in the place of hosts - 1 - h) when the count is even, shifted by one host
when it is odd, so that a host inside one tree is a leaf of the other.

Every edge of a tree carries its half up (reduce) and down again (broadcast): one flow out of each
end per edge. A host's NICs therefore carry as many flows each way as it has edges in both trees.
"""

from __future__ import annotations

from functools import cache


def _parent(host: int, hosts: int) -> int:
    """The parent of `host` (> 0) in NCCL's first tree over `hosts` hosts."""
    bit = host & -host  # lowest set bit
    up = (host ^ bit) | (bit << 1)
    return up if up < hosts else host ^ bit


@cache
def tree_edges(hosts: int) -> tuple[tuple[int, int], ...]:
    """Every (child, parent) edge of both trees over `hosts` hosts: the first tree's, then the second's."""
    if hosts < 2:
        return ()
    first = [(h, _parent(h, hosts)) for h in range(1, hosts)]
    if hosts % 2 == 0:  # the mirror image: h stands where hosts - 1 - h does
        second = [(hosts - 1 - c, hosts - 1 - p) for c, p in first]
    else:  # shifted by one: h stands where h - 1 does
        second = [((c + 1) % hosts, (p + 1) % hosts) for c, p in first]
    return tuple(first + second)


@cache
def busiest_host_edges(hosts: int) -> int:
    """The most tree edges any host has in both trees: the flows its NICs carry each way."""
    degree = [0] * hosts
    for child, parent in tree_edges(hosts):
        degree[child] += 1
        degree[parent] += 1
    return max(degree, default=0)
