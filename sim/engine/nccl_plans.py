"""Collectives under the NCCL model: what each group's collective looks like to NCCL's tuner, and the
flows that carry the algorithm it picks (sim/nccl, docs/fidelity.md).

A ring runs on the group's ring paths (member i to i+1); across hosts as two transfers, its hops
inside hosts and its hops between them (their network links only: GPUDirect RDMA), each carrying what
the tuner says (`Choice.wire_per_path`, `net_wire_per_path`). A tree runs its chains on the ring's
hops inside hosts and, between hosts, on the edges of NCCL's two trees (sim/nccl/trees.py: each edge
both ways, between the hosts' first members), so racks see the tree's own load on their uplinks;
NVLS each member's links to and from its NVSwitch (the host node), and NVLS-tree those plus the
trees' edges. All-to-all is one flow per ordered pair. Plans are remembered per
(op type, group, size), group layouts per (op type, group), and the tuner's choices per shape: groups
repeat, so do bucket sizes, and many groups (every host's) share a shape.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import networkx as nx
import numpy as np

from policies.ops import AllGather, AllReduce, AllToAll, Barrier, Collective, Group, ReduceScatter
from sim.cluster.routing import Path, Router
from sim.cluster.topology import Cluster
from sim.config import SimulationConfig
from sim.nccl.fabrics import Fabric, fabric_of, with_constants
from sim.nccl.trees import busiest_host_edges, tree_edges
from sim.nccl.tuner import Choice, Shape, predict, ranked
from sim.network.flows import Network

PLAN_CACHE_LIMIT = 200_000  # plans, group layouts and choices kept (groups may change every step)


@dataclass
class _Layout:
    """A group's collective as the tuner sees it, less its size, and the paths it can run on."""

    shape: Shape
    seen: Shape  # the shape on the network NCCL's tuner sees (the same object where they agree)
    paths: tuple[Path, ...]  # the ring's (all-to-all: every pair's)
    inside: tuple[Path, ...]  # the ring's hops inside hosts
    between: tuple[Path, ...]  # the ring's hops between hosts, their network links only
    tree: tuple[Path, ...]  # the edges of NCCL's two trees between hosts, both ways, network links only
    tree_ways: int  # the trees' channels (their paths hold one set of edges per channel, one after another)
    ranks: tuple[int, ...]
    host_paths: Callable[[int], tuple[Path, Path]]
    ways: int  # the ring's channels (its paths hold one ring per channel, one after another)
    _switch: tuple[Path, ...] | None = None

    def switch_paths(self) -> tuple[Path, ...]:
        """Every member's links to and from its NVSwitch (NVLS), worked out once."""
        if self._switch is None:
            self._switch = tuple(p for r in self.ranks for p in self.host_paths(r))
        return self._switch


@dataclass
class Pick:
    """What NCCL's tuner picked for one kind of collective on one group shape, over the sizes it picked
    it for (bytes `low` to `high`); at `high`, its own estimate and that of the next best option
    (`runner_up`: "algorithm/protocol", empty when nothing else could run)."""

    low: float
    high: float
    estimate_s: float
    runner_up: str = ""
    runner_up_s: float = math.nan


class Plan(NamedTuple):
    """A choice and its paths: `paths` carry `choice.wire_per_path` each, and a ring's or tree's
    paths between hosts (`net_paths`, their network links only) `choice.net_wire_per_path`, each
    shared by the `ways` (`net_ways`) channels whose rings they belong to (rails: `Router.ring_hops`)."""

    choice: Choice
    paths: tuple[Path, ...]
    net_paths: tuple[Path, ...] = ()
    ways: int = 1
    net_ways: int = 1


_KIND = {AllReduce: "all_reduce", Barrier: "all_reduce", ReduceScatter: "reduce_scatter", AllGather: "all_gather"}


class NcclPlanner:
    """Chooses NCCL's algorithm and protocol for each collective and names the paths that carry it.

    `network`: 1 for the links between hosts (NICs, switches), 0 for a host's own; `path(a, b)`: the
    route between two ranks' GPUs; `host_paths(rank)`: its GPU's links to and from
    its host (the NVSwitch). `seen`: the capacities NCCL's tuner picks by (default `capacity`): NCCL
    knows its hosts' NVLink and NICs, not the switches behind them, so an oversubscribed uplink does
    not change what it picks, only how long that takes."""

    def __init__(
        self,
        graph: nx.DiGraph,
        rank_nodes: Sequence[str],
        capacity: np.ndarray,
        latency: np.ndarray,
        network: np.ndarray,
        fabric: Fabric,
        path: Callable[[int, int], Path],
        host_paths: Callable[[int], tuple[Path, Path]],
        algorithm: str = "auto",
        protocol: str = "auto",
        seen: np.ndarray | None = None,
        hops: Callable[[Sequence[tuple[int, int]], Sequence[int]], list[tuple[Path, ...]]] | None = None,
    ) -> None:
        self.rank_host = [graph.nodes[node]["host"] for node in rank_nodes]
        self.capacity, self.network, self.fabric = capacity, network, fabric
        self.seen = capacity if seen is None else seen
        self.path, self.host_paths = path, host_paths
        self.hops = hops or (lambda pairs, _group: [(path(a, b),) for a, b in pairs])
        self.algorithm, self.protocol = algorithm, protocol
        self._network_latency = latency * network  # a link's latency if it is a network link, else 0
        self._plans: dict[tuple[type, Group, float], Plan] = {}
        self._layouts: dict[tuple[type, Group], _Layout] = {}
        self._choices: dict[tuple[Shape, Shape], Choice] = {}  # groups of one shape (every host's, say) share them
        # (kind, ranks, hosts, algorithm, protocol) -> the sizes it was picked for: written when a choice is
        # made, not per collective (decisions.csv, sim/engine/decisions.py)
        self.picks: dict[tuple[str, int, int, str, str], Pick] = {}
        self._live: Network | None = None
        self._latency_version = -1
        self._added = np.zeros_like(self._network_latency)  # delay on top of each network link's own

    def follow(self, net: Network) -> None:
        """Watch `net`'s link latencies for delays added on top of the cables' (a straggler's `delay_ms`).
        NCCL picks its algorithm and protocol from its own tables, blind to such a delay, so the choice
        stays the one for the nominal network; the collective then waits the extra delay of its slowest
        hop between hosts on each network step of its slowest chunk's path (`Shape.path_steps`)."""
        self._live = net
        self._latency_version = -1

    def _refresh(self) -> None:
        if self._live is not None and self._live.latency_version != self._latency_version:
            self._latency_version = self._live.latency_version
            self._added = np.maximum(self._live.latency * self.network - self._network_latency, 0.0)
            self._plans.clear()  # plans made under other delays

    def known(self, op: Collective) -> Plan | None:
        """The plan of `op` if one was made already."""
        self._refresh()
        return self._plans.get(_key(op))

    def plan(self, op: Collective, ring: tuple[Path, ...], ways: int = 1) -> Plan:
        """The choice for `op` and the paths it runs on (`ring`: the group's ring paths, `ways` channel
        rings one after another, each carrying an equal share)."""
        self._refresh()
        key = _key(op)
        found = self._plans.get(key)
        if found is None:
            if len(self._plans) >= PLAN_CACHE_LIMIT:
                self._plans.clear()
            found = self._plans[key] = self._make(op, ring, key[2], ways)
        return found

    def _make(self, op: Collective, ring: tuple[Path, ...], nbytes: float, ways: int) -> Plan:
        key = (type(op), op.group)
        layout = self._layouts.get(key)
        if layout is None:
            if len(self._layouts) >= PLAN_CACHE_LIMIT:
                self._layouts.clear()
            layout = self._layouts[key] = self._layout(op, ring, ways)
        shape = dataclasses.replace(layout.shape, nbytes=nbytes)
        seen = shape if layout.seen is layout.shape else dataclasses.replace(layout.seen, nbytes=nbytes)
        choice = self._choices.get((seen, shape))
        if choice is None:
            if len(self._choices) >= PLAN_CACHE_LIMIT:
                self._choices.clear()
            options = ranked(seen, self.fabric, self.algorithm, self.protocol)
            choice = options[0]
            self._remember(seen, options)
            if seen is not shape:  # what NCCL picked, on the network as it is
                choice = predict(shape, self.fabric, choice.algorithm, choice.protocol) or choice
            self._choices[(seen, shape)] = choice
        delay = max((float(self._added[list(p)].sum()) for p in layout.between), default=0.0)
        if delay:
            extra = shape.path_steps * delay
            choice = dataclasses.replace(choice, latency_s=choice.latency_s + extra, seconds=choice.seconds + extra)
        if choice.algorithm in ("nvls", "nvls_tree"):  # each GPU to and from its NVSwitch (and the trees)
            return Plan(choice, layout.switch_paths(), layout.tree, 1, layout.tree_ways)
        if choice.algorithm == "tree":
            return Plan(choice, layout.inside, layout.tree, layout.ways, layout.tree_ways)
        if layout.between and not isinstance(op, AllToAll):
            return Plan(choice, layout.inside, layout.between, layout.ways, layout.ways)
        return Plan(choice, layout.paths)

    def _remember(self, seen: Shape, options: list[Choice]) -> None:
        """Widen the sizes over which the first of `options` was picked for `seen`'s kind and group shape."""
        best = options[0]
        key = (seen.kind, seen.ranks, seen.hosts, best.algorithm, best.protocol)
        pick = self.picks.get(key)
        runner = next((c for c in options[1:] if (c.algorithm, c.protocol) != (best.algorithm, best.protocol)), None)
        if pick is None:
            pick = self.picks[key] = Pick(seen.nbytes, seen.nbytes, best.tuner_seconds)
        elif seen.nbytes < pick.high:
            pick.low = min(pick.low, seen.nbytes)
            return
        pick.high, pick.estimate_s = seen.nbytes, best.tuner_seconds
        if runner is not None:
            pick.runner_up, pick.runner_up_s = f"{runner.algorithm}/{runner.protocol}", runner.tuner_seconds

    def _layout(self, op: Collective, ring: tuple[Path, ...], ways: int = 1) -> _Layout:
        """Where `op`'s group sits, as the tuner sees it (with nbytes 0), and the paths each algorithm uses.
        A hop's rates are its `ways` channels' together."""
        ranks = op.group.ranks
        hosts = [self.rank_host[r] for r in ranks]
        per_host: dict[str, int] = {}
        for host in hosts:
            per_host[host] = per_host.get(host, 0) + 1
        if isinstance(op, AllToAll):
            paths = tuple(self.path(a, b) for a in ranks for b in ranks if a != b)
            kind = "all_to_all"
        else:
            paths, kind = ring, _KIND[type(op)]
        crossing = [hosts[i] != hosts[(i + 1) % len(hosts)] for i in range(len(hosts))] * (len(ring) // len(hosts))
        inside = tuple(p for p, c in zip(ring, crossing) if not c)
        # GPUDirect RDMA: a GPU reaches its NIC over PCIe, not through its NVLink (the GPU-host link)
        between = tuple(tuple(link for link in p if self.network[link]) for p, c in zip(ring, crossing) if c)
        tree, tree_ways = self._tree_paths(ranks, hosts) if kind == "all_reduce" and len(per_host) > 1 else ((), 1)
        nvls = self._nvls_rate(ranks) if min(per_host.values()) > 1 else 0.0

        def shape_on(capacity: np.ndarray) -> Shape:
            return Shape(
                kind,
                0.0,
                len(ranks),
                len(per_host),
                max(per_host.values()),
                _alone_rate(paths, capacity) * (1 if kind == "all_to_all" else ways),  # a pair's, or a ring hop's
                len(between) // ways,
                max((float(self._network_latency[list(p)].sum()) for p in between), default=0.0),
                _alone_rate(inside, capacity) * ways,
                _alone_rate(between, capacity) * ways,
                nvls,
                _alone_rate(tree, capacity) * tree_ways if tree else 0.0,
                busiest_host_edges(len(per_host)) if tree else 0,
            )

        shape = shape_on(self.capacity)
        seen = shape_on(self.seen) if self.seen is not self.capacity else shape
        if seen == shape:  # the same object, so plans can tell by identity that NCCL sees the network as it is
            seen = shape
        return _Layout(shape, seen, paths, inside, between, tree, tree_ways, ranks, self.host_paths, ways)

    def _tree_paths(self, ranks: Sequence[int], hosts: Sequence[str]) -> tuple[tuple[Path, ...], int]:
        """The network links between the hosts of every edge of NCCL's two trees, both ways (hosts
        numbered as their first member appears, joined through that member), and the channels they
        are spread over (`hops`: one set of edges per channel, one after another)."""
        first: dict[str, int] = {}
        for rank, host in zip(ranks, hosts):
            first.setdefault(host, rank)
        members = list(first.values())
        network = self.network
        out = []
        edges = [(members[child], members[parent]) for child, parent in tree_edges(len(members))]
        pairs = [pair for a, b in edges for pair in ((a, b), (b, a))]
        routes = self.hops(pairs, ranks)
        ways = math.lcm(*map(len, routes))
        out = [tuple(link for link in hop[c % len(hop)] if network[link]) for c in range(ways) for hop in routes]
        return tuple(out), ways

    def _nvls_rate(self, ranks: Sequence[int]) -> float:
        """Bytes/s each member reaches into and out of its NVSwitch with NVLS (0: the GPUs have none)."""
        if not self.fabric.nvls_gbs:
            return 0.0
        links = [link for r in ranks for p in self.host_paths(r) for link in p]
        return min(self.fabric.nvls_gbs * 1e9, float(self.capacity[links].min()))


def _key(op: Collective) -> tuple[type, Group, float]:
    return type(op), op.group, 0.0 if isinstance(op, Barrier) else float(op.nbytes)


def _alone_rate(paths: Sequence[Path], capacity: np.ndarray) -> float:
    """The rate every path gets when these paths alone share the network at one common rate."""
    links, counts = np.unique(np.fromiter((link for p in paths for link in p), dtype=np.int64), return_counts=True)
    if not len(links):  # no such paths
        return float("inf")
    return float((capacity[links] / counts).min())


def nccl_capacity(cluster: Cluster, fabric: Fabric) -> np.ndarray:
    """Link capacities as NCCL reaches them: a GPU's NVLink at what NCCL's rings sustain (never above
    the configured link); a network link at the share of its line rate the fabric's transport reaches
    (sim/nccl/transports.py: headers and acks, and the plugin's own limits)."""
    capacity = cluster.capacity
    intra = np.array([link.kind == "intra" for link in cluster.links])
    if fabric.ring_gbs:
        capacity[intra] = np.minimum(capacity[intra], fabric.ring_gbs * 1e9)
    capacity[~intra] *= fabric.transport.nic_share  # transport hook
    return capacity


def planner_for(cluster: Cluster, simulation: SimulationConfig, router: Router, capacity: np.ndarray) -> NcclPlanner:
    """The planner of a run under the NCCL model, on links of `capacity` (`nccl_capacity`)."""
    gpus = cluster.rank_gpus
    host = {gpu: cluster.graph.nodes[gpu]["host"] for gpu in gpus}

    def path(a: int, b: int) -> Path:
        return router.path(gpus[a], gpus[b])

    def host_paths(rank: int) -> tuple[Path, Path]:
        gpu = gpus[rank]
        return router.path(gpu, host[gpu]), router.path(host[gpu], gpu)

    def hops(pairs: Sequence[tuple[int, int]], group: Sequence[int]) -> list[tuple[Path, ...]]:
        return router.hops([(gpus[a], gpus[b]) for a, b in pairs], [gpus[r] for r in group])

    beyond_nics = np.array([link.kind in ("uplink", "fabric") for link in cluster.links])
    return NcclPlanner(
        cluster.graph,
        gpus,
        capacity,
        cluster.latency,
        np.array([link.kind != "intra" for link in cluster.links], dtype=float),
        with_constants(fabric_of(cluster.gpu.name, simulation.nccl.transport), simulation.nccl.constants.model_dump()),
        path,
        host_paths,
        simulation.nccl.algorithm,
        simulation.nccl.protocol,
        np.where(beyond_nics, np.inf, capacity) if beyond_nics.any() else None,
        hops,
    )
