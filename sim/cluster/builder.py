"""A cluster's graph, link table and logical view, and the builder the topologies add nodes and cables with.

Every cable is full duplex: two directed links, each with its own capacity and latency. Node kinds:
`gpu` (a rank's endpoint), `host` (a GPU host's PCIe/NVLink fabric, where its NIC attaches),
`server` (a host without GPUs), `switch` (ToR, core, a star's switch, a datacenter's WAN border).

A GPU host's `nics_per_host` NICs are one link of their summed bandwidth: on rail-aligned fabrics
(DGX/HGX) each GPU reaches its own NIC over PCIe with GPUDirect RDMA and every rail is non-blocking, so
a host's traffic shares the NICs' total as max-min shares one link.

Conversion from config units happens here and in the topologies, once: gbps -> bytes/s, us -> s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

import networkx as nx
import numpy as np

from policies.view import ClusterView, HostInfo, RackInfo
from sim.catalog.gpus import GpuSpec, get_gpu
from sim.config import ClusterBase
from sim.errors import ConfigError

GBPS = 1e9 / 8  # bytes per second in one Gbit/s
US = 1e-6


@dataclass(frozen=True)
class Link:
    src: str
    dst: str
    capacity: float  # bytes/s
    latency: float  # s
    kind: str  # intra (GPU-host) | nic (host-network) | uplink (ToR-core) | fabric (switch-switch, WAN links too)


@dataclass(frozen=True)
class WanCable:
    """A WAN link between two datacenters (docs/wan.md): its two directed links and their physics."""

    a: str  # datacenter names
    b: str
    links: tuple[int, int]  # a -> b, b -> a
    bandwidth: float  # bytes/s per direction, as configured (bandwidth_gbps)
    rtt: float  # s; each direction's latency is rtt / 2
    flow_cap: float  # bytes/s one flow may move across it: connections * window / rtt (inf: no limit)
    trace: Optional[tuple[tuple[float, ...], tuple[float, ...]]] = None  # times (s), bandwidths (bytes/s)


@dataclass
class Cluster:
    """A built cluster: its graph (edges carry a `link` id), link table, ranks and logical view."""

    graph: nx.DiGraph
    links: list[Link]
    rank_gpus: tuple[str, ...]  # rank -> gpu node
    view: ClusterView
    gpu: GpuSpec
    rack_links: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]  # rack -> (links out of it, links into it)
    wan: tuple[WanCable, ...] = ()
    datacenters: dict[str, tuple[str, ...]] = field(default_factory=dict)  # datacenter -> its hosts

    @property
    def capacity(self) -> np.ndarray:
        return np.array([link.capacity for link in self.links])

    @property
    def latency(self) -> np.ndarray:
        return np.array([link.latency for link in self.links])

    @property
    def world_size(self) -> int:
        return len(self.rank_gpus)

    @property
    def flow_cap(self) -> Optional[np.ndarray]:
        """Per link, the most one flow may move across it (bytes/s; inf: no limit); None when no link limits."""
        capped = [cable for cable in self.wan if np.isfinite(cable.flow_cap)]
        if not capped:
            return None
        out = np.full(len(self.links), np.inf)
        for cable in capped:
            out[list(cable.links)] = cable.flow_cap
        return out

    @property
    def capacity_traces(self) -> list[tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]]:
        """(links, times in s, capacity factors relative to the configured bandwidth) of each traced link."""
        return [
            (cable.links, cable.trace[0], tuple(bps / cable.bandwidth for bps in cable.trace[1]))
            for cable in self.wan
            if cable.trace is not None
        ]


class Builder:
    """Adds nodes and cables; `use` switches the per-site settings (a datacenter's own NICs, GPUs per host)."""

    def __init__(self, cfg: ClusterBase) -> None:
        self.gpu = get_gpu(cfg.gpu)
        self.placement = cfg.placement
        self.graph = nx.DiGraph()
        self.links: list[Link] = []
        self.hosts: dict[str, dict] = {}  # name -> {rack, gpus, ranks, server, intra}
        self.rank_gpus: list[str] = []
        self.owned: dict[str, set[str]] = {}  # rack -> switches of its own beyond its hosts' (a pod's aggregation)
        self.use(cfg)

    def use(self, cfg: ClusterBase) -> None:
        """Take hosts' and links' settings from `cfg` from now on."""
        self.cfg = cfg
        self.intra_bps = (cfg.intra_host_gbps or self.gpu.intra_host_gbps) * GBPS

    def node(self, name: str, kind: str, **attrs: object) -> None:
        if name in self.graph:
            raise ConfigError(f"cluster: node name {name!r} is used twice")
        self.graph.add_node(name, kind=kind, **attrs)

    def cable(self, a: str, b: str, capacity: float, latency: float, kind: str) -> tuple[int, int]:
        """A full-duplex cable; returns its link ids (a -> b, b -> a)."""
        for src, dst in ((a, b), (b, a)):
            if self.graph.has_edge(src, dst):
                raise ConfigError(f"cluster: two links join {a!r} and {b!r}; merge them into one")
            self.graph.add_edge(src, dst, link=len(self.links))
            self.links.append(Link(src, dst, capacity, latency, kind))
        return len(self.links) - 2, len(self.links) - 1

    def host(self, name: str, gpus: int, rack: str | None, server: bool = False) -> None:
        self.node(name, "server" if server else "host", rack=rack)
        gpu_nodes = []
        for j in range(gpus):
            gpu = f"{name}.g{j}"
            self.node(gpu, "gpu", host=name)
            self.cable(gpu, name, self.intra_bps, self.cfg.intra_host_latency_us * US, "intra")
            gpu_nodes.append(gpu)
        self.hosts[name] = {"rack": rack, "gpus": gpu_nodes, "ranks": (), "server": server, "intra": self.intra_bps}

    def own(self, rack: str, switch: str) -> None:
        """Count `switch` inside `rack` though no host of it is cabled there (a pod's aggregation switch)."""
        self.owned.setdefault(rack, set()).add(switch)

    def place_ranks(self, seed: int) -> None:
        """Number the GPUs (ranks) host by host, in the order the placement deals the hosts."""
        hosts = [name for name, h in self.hosts.items() if h["gpus"]]
        if self.placement == "scattered":  # one host from each rack in turn
            by_rack: dict[object, list[str]] = {}
            for name in hosts:
                by_rack.setdefault(self.hosts[name]["rack"], []).append(name)
            columns = list(by_rack.values())
            hosts = [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]
        elif self.placement == "random":
            hosts = [hosts[i] for i in np.random.default_rng(seed).permutation(len(hosts))]
        for name in hosts:
            first = len(self.rank_gpus)
            self.rank_gpus.extend(self.hosts[name]["gpus"])
            self.hosts[name]["ranks"] = tuple(range(first, len(self.rank_gpus)))

    def nic_bps(self, server: bool) -> float:
        """A host's network bandwidth: a GPU host's NICs together (rails), a server host's one NIC."""
        if server:
            return (self.cfg.server_nic_gbps or self.cfg.nic_gbps) * GBPS
        return self.cfg.nic_gbps * self.cfg.nics_per_host * GBPS

    def port_bps(self, node: str) -> float:
        """The summed capacity of the links out of `node` (what it can send at once)."""
        return sum(self.links[d["link"]].capacity for _, _, d in self.graph.out_edges(node, data=True))

    def finish(self, racks: dict[str, RackInfo], seed: int) -> Cluster:
        self.place_ranks(seed)
        host_infos = {
            name: HostInfo(name, h["rack"], h["ranks"], self._nic_of(name), h["intra"])
            for name, h in self.hosts.items()
        }
        servers = tuple(name for name, h in self.hosts.items() if h["server"])
        rank_hosts = tuple(self.graph.nodes[g]["host"] for g in self.rank_gpus)
        if not rank_hosts:
            raise ConfigError("cluster: no GPUs; at least one host needs gpus >= 1")
        view = ClusterView(rank_hosts, host_infos, racks, servers)
        rack_links = self.rack_boundaries(racks)
        return Cluster(self.graph, self.links, tuple(self.rank_gpus), view, self.gpu, rack_links)

    def rack_inside(self, rack_hosts: Sequence[str]) -> set[str]:
        """A rack's hosts and its own switches: those whose hosts all sit in the rack (its ToR)."""
        members = set(rack_hosts)
        switches = {s for h in members for s in self.graph.successors(h) if self.graph.nodes[s]["kind"] == "switch"}

        def own(switch: str) -> bool:
            hosts = {n for n in self.graph.successors(switch) if self.graph.nodes[n]["kind"] in ("host", "server")}
            return hosts <= members

        racks = {self.hosts[h]["rack"] for h in members if h in self.hosts}
        owned = {s for r in racks for s in self.owned.get(r, ())}
        return members | owned | {s for s in switches if own(s)}

    def rack_uplink(self, rack_hosts: Sequence[str]) -> float:
        """Capacity from a rack to the rest of the fabric: the min cut between the rack's hosts (with
        its own switches) and every other node."""
        inside = self.rack_inside(rack_hosts)
        outside = [n for n in self.graph if n not in inside and self.graph.nodes[n]["kind"] != "gpu"]
        if not outside:
            return float("inf")
        flow = nx.DiGraph()
        for src, dst, d in self.graph.edges(data=True):
            flow.add_edge(src, dst, capacity=self.links[d["link"]].capacity)
        for n in inside:
            flow.add_edge("_src", n, capacity=float("inf"))
        for n in outside:
            flow.add_edge(n, "_dst", capacity=float("inf"))
        return float(nx.minimum_cut_value(flow, "_src", "_dst"))

    def _nic_of(self, host: str) -> float:
        return sum(
            self.links[d["link"]].capacity
            for _, dst, d in self.graph.out_edges(host, data=True)
            if self.graph.nodes[dst]["kind"] != "gpu"
        )

    def rack_boundaries(self, racks: dict[str, RackInfo]) -> dict[str, tuple[tuple[int, ...], tuple[int, ...]]]:
        """Per rack, the links leaving and entering it (its hosts and own switches): its uplinks.

        One pass over the links for all racks, so building a cluster of many racks stays linear."""
        rack_of: dict[str, str] = {}
        for name, rack in racks.items():
            for node in self.rack_inside(rack.hosts):
                rack_of[node] = name
        out: dict[str, list[int]] = {name: [] for name in racks}
        into: dict[str, list[int]] = {name: [] for name in racks}
        for i, link in enumerate(self.links):
            a, b = rack_of.get(link.src), rack_of.get(link.dst)
            if a == b or link.kind == "intra":
                continue
            if a is not None:
                out[a].append(i)
            if b is not None:
                into[b].append(i)
        return {name: (tuple(out[name]), tuple(into[name])) for name in racks}
