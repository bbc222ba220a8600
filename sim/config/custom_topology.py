"""What a custom topology's nodes and links can get wrong, all found at validation (so `syncsim check`
lists every problem at once) without building the cluster (`sim.cluster.topology` builds it from a
validated config)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import networkx as nx

from sim.config.link_ends import link_end_problems


def wiring_problems(nodes: Sequence[Any], links: Sequence[Any], gpus_per_host: int) -> list[str]:
    """One line per problem: names used twice or taken by a host's GPU, fields a node's kind ignores,
    links to unknown nodes, to themselves or twice between one pair, a network in several parts, and
    two hosts that only another host joins (hosts do not forward traffic)."""
    problems: list[str] = []
    kinds: dict[str, str] = {}
    gpus = {n.name: n.gpus or gpus_per_host for n in nodes if n.kind == "host"}
    for i, node in enumerate(nodes):
        host, dot_g, index = node.name.rpartition(".g")
        if node.name in kinds:
            problems.append(f"nodes[{i}].name: node name {node.name!r} is used twice")
        elif dot_g and index.isascii() and index.isdigit() and len(index) < 8 and int(index) < gpus.get(host, 0):
            problems.append(f"nodes[{i}].name: {node.name!r} is the name of host {host!r}'s GPU {index}")
        kinds.setdefault(node.name, node.kind)
        if node.gpus is not None and node.kind != "host":
            problems.append(f"nodes[{i}].gpus: applies only to kind host (a {node.kind} has no GPUs)")
        if node.rack is not None and node.kind == "switch":
            problems.append(f"nodes[{i}].rack: applies only to hosts and servers (a switch's rack follows its hosts)")
    graph = nx.Graph()
    graph.add_nodes_from(kinds)
    found, edges = link_end_problems(
        links,
        kinds,
        "links",
        "unknown node {end!r}; allowed: the names under cluster.nodes",
        "a link joins two different nodes",
    )
    problems.extend(found)
    graph.add_edges_from(edges)
    if graph.number_of_nodes() and not nx.is_connected(graph):
        parts = sorted(min(part) for part in nx.connected_components(graph))
        shown = ", ".join(map(repr, parts[:10])) + (f" and {len(parts) - 10:,} more" if len(parts) > 10 else "")
        problems.append(f"links: the network is not connected ({len(parts):,} separate parts, containing {shown})")
    elif pair := _pair_without_route(graph, kinds):
        problems.append(
            f"links: no route joins {pair[0]!r} and {pair[1]!r}: hosts do not forward traffic, so two hosts"
            " need a switch in common (or a path of switches) or a direct link"
        )
    return problems


def _pair_without_route(graph: nx.Graph, kinds: dict[str, str]) -> tuple[str, str] | None:
    """Two hosts (or servers) that no path of switches or direct link joins, or None.

    A route is a direct host-host link or a path whose inner nodes are all switches, so two hosts can
    talk when they touch one connected part of the switch fabric or are cabled to each other. Hosts
    touching the same parts are grouped, so the common case (one fabric) costs one pass over the hosts;
    groups with no part in common must be fully cabled to each other, which ends at the first gap."""
    switches = [n for n, k in kinds.items() if k == "switch"]
    part_of = {n: i for i, part in enumerate(nx.connected_components(graph.subgraph(switches))) for n in part}
    groups: dict[frozenset[int], list[str]] = {}
    for name, kind in kinds.items():
        if kind != "switch":
            groups.setdefault(frozenset(part_of[n] for n in graph[name] if n in part_of), []).append(name)
    keys = list(groups)
    for i, first in enumerate(keys):
        for second in keys[i:]:
            if first & second:
                continue
            for a in groups[first]:
                for b in groups[second]:
                    if a != b and not graph.has_edge(a, b):
                        return (a, b) if a < b else (b, a)
    return None
