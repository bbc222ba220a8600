"""A cluster across datacenters (docs/wan.md): every datacenter built as its own topology, under its
name, and WAN links between their border switches.

Each datacenter gets a border switch named after it, cabled to its gateways (a star's switch, a two-tier
datacenter's core switches, a custom one's `gateway`) with no latency and the gateway's own port
capacity, so the border never limits what the gateway could send; WAN links join the borders. Routes
take the fewest hops through switches, so traffic between two datacenters crosses the WAN links of the
shortest chain of datacenters, and traffic inside one never leaves it (a detour through a border is
longer than the datacenter's own fabric).
"""

from __future__ import annotations

import math
from dataclasses import replace

from sim.cluster.builder import GBPS, Builder, Cluster, WanCable
from sim.cluster.sites import Racks, add_site, rack_infos
from sim.config import MultiDatacenterCluster
from sim.config.reading import MB
from sim.config.wan import ResolvedWan, read_trace


def build_datacenters(cfg: MultiDatacenterCluster, seed: int) -> Cluster:
    b = Builder(cfg)
    racks: Racks = {}
    members: dict[str, tuple[str, ...]] = {}
    for name, dc in zip(cfg.names, cfg.datacenters):
        b.use(dc)
        before = len(b.hosts)
        # a star's hosts (and a custom datacenter's that name no rack) are in a rack named after the datacenter
        racks.update(add_site(b, dc, f"{name}.", name))
        members[name] = tuple(list(b.hosts)[before:])
        b.node(name, "switch", datacenter=name)
        for gateway in dc.gateways:
            b.cable(f"{name}.{gateway}", name, b.port_bps(f"{name}.{gateway}"), 0.0, "fabric")
    b.use(cfg)
    traces: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    wan = tuple(_wan_cable(b, link, traces) for link in cfg.wan_links())
    cluster = b.finish(rack_infos(b, racks), seed)
    cluster.wan, cluster.datacenters = wan, members
    cluster.view = replace(cluster.view, datacenters=members)  # policies group ranks by datacenter
    return cluster


def _wan_cable(b: Builder, link: ResolvedWan, traces: dict) -> WanCable:
    rtt = link.rtt_ms * 1e-3
    ids = b.cable(link.a, link.b, link.bandwidth_gbps * GBPS, rtt / 2, "fabric")
    window = link.connection_window_mb
    flow_cap = link.connections * window * MB / rtt if window is not None else math.inf
    trace = None
    if link.bandwidth_trace is not None:
        path = link.bandwidth_trace
        if path not in traces:  # a trace every link shares is read once
            times, gbps = read_trace(path, f"{link.where}.bandwidth_trace")
            traces[path] = (times, tuple(g * GBPS for g in gbps))
        trace = traces[path]
    return WanCable(link.a, link.b, ids, link.bandwidth_gbps * GBPS, rtt, flow_cap, trace)
