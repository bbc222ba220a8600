"""Routes over the topology: shortest paths through switches, ECMP where several are equal.

Hosts never forward traffic: a route climbs from its source endpoint to the first switch (a GPU to
its host, a host to its NIC's switch), crosses the switch fabric by a shortest path, and descends to
the destination. A host cabled to another host (back to back, no switch) reaches it over that cable;
a route never passes through a third host, so every route is a simple path (validation refuses
wiring where two hosts would need one: `sim.config.custom_topology`). Among equal-cost fabric paths
one is chosen by a stable hash of (seed, source, destination, channel), as switches hash a
connection's 5-tuple: a connection keeps its path, and different seeds give different collisions.

On a rail-optimized fabric (switches and GPUs with a `rail` attribute, sim.cluster.rails) a route to a
GPU keeps to that GPU's rail: NCCL's PXN moves the data over NVLink to the source host's GPU on the
destination's rail and sends it from that GPU's NIC (NVIDIA's NCCL 2.12 release notes and its blog
"Doubling all2all performance with NCCL 2.12", 2022), so it never crosses between rails in the spine.
A route to a server host keeps to the source GPU's rail. `hops` gives a collective's hops (a ring's, a
tree's edges): between two hosts one route per rail, as NCCL's channels each cross on a rail of their own.
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Sequence

import networkx as nx

from sim.cluster.topology import Cluster
from sim.errors import ConfigError

Path = tuple[int, ...]  # link ids in order


class Router:
    def __init__(self, cluster: Cluster, seed: int = 0) -> None:
        self.graph = cluster.graph
        self.seed = seed
        self._kind = kinds = nx.get_node_attributes(self.graph, "kind")
        self._switches = [n for n, k in kinds.items() if k == "switch"]
        # a copy, not a view: a view filters every neighbour lookup, and route searches make millions of them
        self._fabric = self.graph.subgraph(self._switches).copy()
        self._chains: dict[str, list[str]] = {}
        self._climbs: dict[str, Path] = {}  # a chain's links, up (`_climb`) and down (`_descent`)
        self._descents: dict[str, Path] = {}
        self._fabric_paths: dict[tuple[str, str], list[Path]] = {}
        self._routes: dict[tuple[str, str, Hashable], Path] = {}
        rails = nx.get_node_attributes(self.graph, "rail")
        self._rail_of = {n: r for n, r in rails.items() if kinds[n] == "gpu"}
        self._rail_switch = {n: r for n, r in rails.items() if kinds[n] == "switch"}
        self._channels: dict[tuple[str, str, frozenset[int]], tuple[Path, ...]] = {}
        self._link_dst: dict[int, str] | None = None
        self._host = nx.get_node_attributes(self.graph, "host") if self._rail_of else {}

    def ring_hops(self, nodes: Sequence[str]) -> list[tuple[Path, ...]]:
        """The routes of each hop of a ring through GPU `nodes` (node i to i+1), one per channel (`hops`)."""
        return self.hops([(src, nodes[(i + 1) % len(nodes)]) for i, src in enumerate(nodes)], nodes)

    def hops(self, pairs: Sequence[tuple[str, str]], group: Sequence[str]) -> list[tuple[Path, ...]]:
        """The routes from GPU a to GPU b of each pair of a collective over GPU nodes `group`, one per
        channel. On a rail-optimized fabric a hop between two hosts on each of which the group has GPUs
        on several common rails spreads over those rails, one route (and an equal share) each, as NCCL's
        channels each cross on a NIC of their own; any other hop has the one route of `path`."""
        if not self._rail_of:
            return [(self.path(a, b),) for a, b in pairs]
        host = self._host
        rails_on: dict[str, set[int]] = {}
        for node in group:
            if node in self._rail_of:
                rails_on.setdefault(host[node], set()).add(self._rail_of[node])
        out = []
        for src, dst in pairs:
            shared: frozenset[int] = frozenset()
            if host.get(src) != host.get(dst):
                shared = frozenset(rails_on.get(host.get(src), set()) & rails_on.get(host.get(dst), set()))
            if len(shared) < 2:
                out.append((self.path(src, dst),))
                continue
            key = (src, dst, shared)
            found = self._channels.get(key)
            if found is None:
                found = self._channels[key] = tuple(self._route(src, dst, 0, rail) for rail in sorted(shared))
            out.append(found)
        return out

    def path(self, src: str, dst: str, channel: Hashable = 0) -> Path:
        """Link ids from node `src` to node `dst` (empty when they are the same node)."""
        key = (src, dst, channel)
        route = self._routes.get(key)
        if route is None:
            route = self._route(src, dst, channel)
            self._routes[key] = route
        return route

    def _route(self, src: str, dst: str, channel: Hashable, rail: int | None = None) -> Path:
        if src == dst:
            return ()
        if rail is None:  # PXN: the destination GPU's rail, else (to a server) the source GPU's
            rail = self._rail_of.get(dst, self._rail_of.get(src))
        up, down = self._chain(src), self._chain(dst)
        meet = next((n for n in up if n in down), None)
        if meet is not None:  # e.g. two GPUs of one host: up the source's chain to `meet`, down the other's
            climbed, below = up.index(meet), down.index(meet)
            descent = self._descent(dst, down)
            return self._climb(src, up)[:climbed] + descent[len(descent) - below :]
        options = self._fabric_options(up[-1], down[-1])
        if rail is not None:
            options = self._on_rail(up[-1], down[-1], rail, options)
        choice = zlib.crc32(f"{self.seed}|{src}|{dst}|{channel}".encode()) % len(options)
        return self._climb(src, up) + options[choice] + self._descent(dst, down)

    def _climb(self, node: str, chain: list[str]) -> Path:
        """The links of `node`'s chain, upwards (each node's once: a 131,072-GPU plan routes each GPU
        dozens of times, and every link looked up in the graph costs a networkx view)."""
        links = self._climbs.get(node)
        if links is None:
            links = self._climbs[node] = self._links(chain)
        return links

    def _descent(self, node: str, chain: list[str]) -> Path:
        """The links of `node`'s chain, downwards to it."""
        links = self._descents.get(node)
        if links is None:
            links = self._descents[node] = self._links(list(reversed(chain)))
        return links

    def _chain(self, node: str) -> list[str]:
        """`node` and the nodes up to its first switch: at most GPU -> host -> switch.

        The climb takes only a GPU's one link to its host and a host's link to its one switch, so it
        never passes through another host (a chain of hosts cabled to each other once grew without
        end). A host with several networked neighbours (multi-homed, or cabled to another host) ends
        its chain; the rest of the route is a shortest path through switches (`_fabric_options`)."""
        chain = self._chains.get(node)
        if chain is None:
            kind = self._kind[node]
            if kind == "gpu":  # a GPU's one link, to its host, then the host's chain (worked out once a host)
                chain = [node, *self._chain(next(iter(self.graph.successors(node))))]
            else:
                chain = [node]
                if kind != "switch":
                    ups = [n for n in self.graph.successors(node) if self._kind[n] != "gpu"]
                    if len(ups) == 1 and self._kind[ups[0]] == "switch":
                        chain.append(ups[0])
            self._chains[node] = chain
        return chain

    def _fabric_options(self, a: str, b: str) -> list[Path]:
        key = (a, b)
        options = self._fabric_paths.get(key)
        if options is None:
            if a == b:
                options = [()]
            else:  # shortest paths are simple, and hosts other than the two ends are not in the graph
                graph = self._fabric if a in self._fabric and b in self._fabric else self._with_endpoints(a, b)
                try:
                    options = [self._links(p) for p in nx.all_shortest_paths(graph, a, b)]
                except nx.NetworkXNoPath:
                    raise ConfigError(f"cluster: no route from {a!r} to {b!r} through switches") from None
                options.sort()
            self._fabric_paths[key] = options
        return options

    def _on_rail(self, a: str, b: str, rail: int, options: list[Path]) -> list[Path]:
        """Of the fabric paths from `a` to `b`, those whose rail switches are all on `rail` (all of
        them where none is: a host without that rail, or a fabric without rails)."""
        key = (a, b, ("rail", rail))
        found = self._fabric_paths.get(key)  # type: ignore[arg-type]
        if found is None:
            links = self._links_of
            found = [p for p in options if all(self._rail_switch.get(links(i), rail) == rail for i in p)] or options
            self._fabric_paths[key] = found  # type: ignore[index]
        return found

    def _links_of(self, link: int) -> str:
        """The node a link of the graph enters."""
        if self._link_dst is None:
            self._link_dst = {d["link"]: v for _, v, d in self.graph.edges(data=True)}
        return self._link_dst[link]

    def _with_endpoints(self, a: str, b: str) -> nx.DiGraph:
        return self.graph.subgraph([*self._switches, a, b])

    def _links(self, nodes: list[str]) -> Path:
        return tuple(self.graph.edges[u, v]["link"] for u, v in zip(nodes, nodes[1:]))
