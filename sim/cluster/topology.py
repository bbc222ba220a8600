"""Physical clusters: GPUs, hosts, NICs, switches and links, built from the `cluster:` config.

Every cable is full duplex: two directed links, each with its own capacity and latency. Node kinds:
`gpu` (a rank's endpoint), `host` (a GPU host's PCIe/NVLink fabric, where its NIC attaches),
`server` (a host without GPUs), `switch` (ToR, core, or the single switch of a star).

    gpu --intra--> host --nic--> ToR --uplink--> core     (two_tier; a star has one switch)

A GPU host's `nics_per_host` NICs are one link of their summed bandwidth: on rail-aligned fabrics
(DGX/HGX) each GPU reaches its own NIC over PCIe with GPUDirect RDMA and every rail is non-blocking, so
a host's traffic shares the NICs' total as max-min shares one link.

Conversion from config units happens here, once: gbps -> bytes/s, us -> s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np

from policies.view import ClusterView, HostInfo, RackInfo
from sim.catalog.gpus import GpuSpec, get_gpu
from sim.config import ClusterBase, CustomCluster, StarCluster, TwoTierCluster
from sim.errors import ConfigError

GBPS = 1e9 / 8  # bytes per second in one Gbit/s
US = 1e-6


@dataclass(frozen=True)
class Link:
    src: str
    dst: str
    capacity: float  # bytes/s
    latency: float  # s
    kind: str  # intra (GPU-host) | nic (host-network) | uplink (ToR-core) | fabric (custom switch-switch)


@dataclass
class Cluster:
    """A built cluster: its graph (edges carry a `link` id), link table, ranks and logical view."""

    graph: nx.DiGraph
    links: list[Link]
    rank_gpus: tuple[str, ...]  # rank -> gpu node
    view: ClusterView
    gpu: GpuSpec
    rack_links: dict[str, tuple[tuple[int, ...], tuple[int, ...]]]  # rack -> (links out of it, links into it)

    @property
    def capacity(self) -> np.ndarray:
        return np.array([link.capacity for link in self.links])

    @property
    def latency(self) -> np.ndarray:
        return np.array([link.latency for link in self.links])

    @property
    def world_size(self) -> int:
        return len(self.rank_gpus)


class _Builder:
    def __init__(self, cfg: ClusterBase) -> None:
        self.cfg = cfg
        self.gpu = get_gpu(cfg.gpu)
        self.graph = nx.DiGraph()
        self.links: list[Link] = []
        self.hosts: dict[str, dict] = {}  # name -> {rack, gpus, nic}
        self.rank_gpus: list[str] = []
        self.intra_bps = (cfg.intra_host_gbps or self.gpu.intra_host_gbps) * GBPS

    def node(self, name: str, kind: str, **attrs: object) -> None:
        if name in self.graph:
            raise ConfigError(f"cluster: node name {name!r} is used twice")
        self.graph.add_node(name, kind=kind, **attrs)

    def cable(self, a: str, b: str, capacity: float, latency: float, kind: str) -> None:
        for src, dst in ((a, b), (b, a)):
            if self.graph.has_edge(src, dst):
                raise ConfigError(f"cluster: two links join {a!r} and {b!r}; merge them into one")
            self.graph.add_edge(src, dst, link=len(self.links))
            self.links.append(Link(src, dst, capacity, latency, kind))

    def host(self, name: str, gpus: int, rack: str | None, server: bool = False) -> None:
        self.node(name, "server" if server else "host", rack=rack)
        gpu_nodes = []
        for j in range(gpus):
            gpu = f"{name}.g{j}"
            self.node(gpu, "gpu", host=name)
            self.cable(gpu, name, self.intra_bps, self.cfg.intra_host_latency_us * US, "intra")
            gpu_nodes.append(gpu)
        self.hosts[name] = {"rack": rack, "gpus": gpu_nodes, "ranks": (), "server": server}

    def place_ranks(self, seed: int) -> None:
        """Number the GPUs (ranks) host by host, in the order the placement deals the hosts."""
        hosts = [name for name, h in self.hosts.items() if h["gpus"]]
        if self.cfg.placement == "scattered":  # one host from each rack in turn
            by_rack: dict[object, list[str]] = {}
            for name in hosts:
                by_rack.setdefault(self.hosts[name]["rack"], []).append(name)
            columns = list(by_rack.values())
            hosts = [col[i] for i in range(max(map(len, columns))) for col in columns if i < len(col)]
        elif self.cfg.placement == "random":
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

    def finish(self, racks: dict[str, RackInfo], seed: int) -> Cluster:
        self.place_ranks(seed)
        host_infos = {
            name: HostInfo(name, h["rack"], h["ranks"], self._nic_of(name), self.intra_bps)
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

        return members | {s for s in switches if own(s)}

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


def build_cluster(cfg: ClusterBase, seed: int = 0) -> Cluster:
    """Build the physical cluster described by a validated `cluster:` config (`seed`: random placement)."""
    if isinstance(cfg, StarCluster):
        return _star(cfg).finish({}, seed)
    if isinstance(cfg, TwoTierCluster):
        return _two_tier(cfg, seed)
    if isinstance(cfg, CustomCluster):
        return _custom(cfg, seed)
    raise ConfigError(f"cluster.topology: unsupported {type(cfg).__name__}; allowed: star, two_tier, custom")


def _star(cfg: StarCluster) -> _Builder:
    b = _Builder(cfg)
    lat = cfg.link_latency_us * US
    b.node("switch", "switch")
    for i in range(cfg.hosts):
        b.host(f"h{i}", cfg.gpus_per_host, None)
        b.cable(f"h{i}", "switch", b.nic_bps(False), lat, "nic")
    for i in range(cfg.server_hosts):
        b.host(f"ps{i}", 0, None, server=True)
        b.cable(f"ps{i}", "switch", b.nic_bps(True), lat, "nic")
    return b


def _two_tier(cfg: TwoTierCluster, seed: int) -> Cluster:
    b = _Builder(cfg)
    lat = cfg.link_latency_us * US
    uplink = cfg.uplink_gbps * GBPS if cfg.uplink_gbps else cfg.hosts_per_rack * b.nic_bps(False)
    cores = [f"core{c}" for c in range(cfg.core_switches)]
    for core in cores:
        b.node(core, "switch")
    rack_hosts: dict[str, list[str]] = {}
    for r in range(cfg.racks):
        tor = f"tor{r}"
        b.node(tor, "switch", rack=f"rack{r}")
        for core in cores:
            b.cable(tor, core, uplink / len(cores), lat, "uplink")
        rack_hosts[f"rack{r}"] = []
        for i in range(cfg.hosts_per_rack):
            name = f"h{r * cfg.hosts_per_rack + i}"
            b.host(name, cfg.gpus_per_host, f"rack{r}")
            b.cable(name, tor, b.nic_bps(False), lat, "nic")
            rack_hosts[f"rack{r}"].append(name)
    for i in range(cfg.server_hosts):
        r = i % cfg.racks  # spread server hosts over the racks
        b.host(f"ps{i}", 0, f"rack{r}", server=True)
        b.cable(f"ps{i}", f"tor{r}", b.nic_bps(True), lat, "nic")
        rack_hosts[f"rack{r}"].append(f"ps{i}")
    racks = {name: RackInfo(name, tuple(hosts), uplink) for name, hosts in rack_hosts.items()}
    return b.finish(racks, seed)


def _custom(cfg: CustomCluster, seed: int) -> Cluster:
    b = _Builder(cfg)
    for node in cfg.nodes:
        if node.kind == "switch":
            b.node(node.name, "switch")
        else:
            gpus = 0 if node.kind == "server" else (node.gpus or cfg.gpus_per_host)
            b.host(node.name, gpus, node.rack, server=node.kind == "server")
    for link in cfg.links:  # wiring checked when the config was validated (sim.config.custom_topology)
        ends = {b.graph.nodes[link.a]["kind"], b.graph.nodes[link.b]["kind"]}
        gbps = link.gbps or cfg.nic_gbps * (cfg.nics_per_host if "host" in ends else 1)
        lat = (cfg.link_latency_us if link.latency_us is None else link.latency_us) * US
        b.cable(link.a, link.b, gbps * GBPS, lat, "nic" if ends & {"host", "server"} else "fabric")
    rack_hosts: dict[str, list[str]] = {}
    for name, h in b.hosts.items():
        if h["rack"] is not None:
            rack_hosts.setdefault(h["rack"], []).append(name)
    racks = {r: RackInfo(r, tuple(hosts), _rack_uplink(b, hosts)) for r, hosts in rack_hosts.items()}
    return b.finish(racks, seed)


def _rack_uplink(b: _Builder, rack_hosts: list[str]) -> float:
    """Capacity from a rack to the rest of the fabric: the min cut between the rack's hosts (with
    its own switches) and every other node."""
    inside = b.rack_inside(rack_hosts)
    outside = [n for n in b.graph if n not in inside and b.graph.nodes[n]["kind"] != "gpu"]
    if not outside:
        return float("inf")
    flow = nx.DiGraph()
    for src, dst, d in b.graph.edges(data=True):
        flow.add_edge(src, dst, capacity=b.links[d["link"]].capacity)
    for n in inside:
        flow.add_edge("_src", n, capacity=float("inf"))
    for n in outside:
        flow.add_edge(n, "_dst", capacity=float("inf"))
    return float(nx.minimum_cut_value(flow, "_src", "_dst"))
