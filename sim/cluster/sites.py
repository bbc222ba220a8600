"""The single-site topologies (star, two_tier, fat_tree, rail_optimized, custom) added to a `Builder`, their
node and rack names under a prefix where the site is one datacenter of several (`sim.cluster.datacenters`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from policies.view import RackInfo
from sim.cluster.builder import GBPS, US, Builder
from sim.cluster.fat_tree import add_fat_tree
from sim.cluster.rails import add_rails
from sim.config import CustomCluster, StarCluster, TwoTierCluster

# rack -> (its hosts, its configured uplink in bytes/s, or None: the min cut, once the cluster is whole)
Racks = dict[str, tuple[list[str], Optional[float]]]


def add_star(b: Builder, cfg: StarCluster, prefix: str = "", rack: Optional[str] = None) -> Racks:
    """Hosts on one switch; `rack`: the rack its hosts are in (none on a star of its own)."""
    lat = cfg.link_latency_us * US
    switch = f"{prefix}switch"
    b.node(switch, "switch")
    members = []
    for i in range(cfg.hosts):
        b.host(f"{prefix}h{i}", cfg.gpus_per_host, rack)
        b.cable(f"{prefix}h{i}", switch, b.nic_bps(False), lat, "nic")
        members.append(f"{prefix}h{i}")
    for i in range(cfg.server_hosts):
        b.host(f"{prefix}ps{i}", 0, rack, server=True)
        b.cable(f"{prefix}ps{i}", switch, b.nic_bps(True), lat, "nic")
        members.append(f"{prefix}ps{i}")
    return {rack: (members, None)} if rack is not None else {}


def add_two_tier(b: Builder, cfg: TwoTierCluster, prefix: str = "", rack: Optional[str] = None) -> Racks:
    """Racks of hosts under ToR switches, each ToR cabled to every core switch."""
    lat = cfg.link_latency_us * US
    uplink = cfg.uplink_gbps * GBPS if cfg.uplink_gbps else cfg.hosts_per_rack * b.nic_bps(False)
    cores = [f"{prefix}core{c}" for c in range(cfg.core_switches)]
    for core in cores:
        b.node(core, "switch")
    rack_hosts: dict[str, list[str]] = {}
    for r in range(cfg.racks):
        tor, name = f"{prefix}tor{r}", f"{prefix}rack{r}"
        b.node(tor, "switch", rack=name)
        for core in cores:
            b.cable(tor, core, uplink / len(cores), lat, "uplink")
        rack_hosts[name] = []
        for i in range(cfg.hosts_per_rack):
            host = f"{prefix}h{r * cfg.hosts_per_rack + i}"
            b.host(host, cfg.gpus_per_host, name)
            b.cable(host, tor, b.nic_bps(False), lat, "nic")
            rack_hosts[name].append(host)
    for i in range(cfg.server_hosts):
        r = i % cfg.racks  # spread server hosts over the racks
        b.host(f"{prefix}ps{i}", 0, f"{prefix}rack{r}", server=True)
        b.cable(f"{prefix}ps{i}", f"{prefix}tor{r}", b.nic_bps(True), lat, "nic")
        rack_hosts[f"{prefix}rack{r}"].append(f"{prefix}ps{i}")
    return {name: (hosts, uplink) for name, hosts in rack_hosts.items()}


def add_custom(b: Builder, cfg: CustomCluster, prefix: str = "", rack: Optional[str] = None) -> Racks:
    """Explicit nodes and links; `rack`: the rack of hosts that name none (none on a site of its own)."""
    added = []
    for node in cfg.nodes:
        name = prefix + node.name
        if node.kind == "switch":
            b.node(name, "switch")
        else:
            gpus = 0 if node.kind == "server" else (node.gpus or cfg.gpus_per_host)
            b.host(name, gpus, rack if node.rack is None else prefix + node.rack, server=node.kind == "server")
            added.append(name)
    for link in cfg.links:  # wiring checked when the config was validated (sim.config.custom_topology)
        a, z = prefix + link.a, prefix + link.b
        ends = {b.graph.nodes[a]["kind"], b.graph.nodes[z]["kind"]}
        gbps = link.gbps or cfg.nic_gbps * (cfg.nics_per_host if "host" in ends else 1)
        lat = (cfg.link_latency_us if link.latency_us is None else link.latency_us) * US
        b.cable(a, z, gbps * GBPS, lat, "nic" if ends & {"host", "server"} else "fabric")
    racks: Racks = {}
    for name in added:
        if (r := b.hosts[name]["rack"]) is not None:
            racks.setdefault(r, ([], None))[0].append(name)
    return racks


SITES: dict[str, Callable[..., Racks]] = {
    "star": add_star,
    "two_tier": add_two_tier,
    "fat_tree": add_fat_tree,
    "rail_optimized": add_rails,
    "custom": add_custom,
}


def rack_infos(b: Builder, racks: Racks) -> dict[str, RackInfo]:
    """The racks as policies see them; an uplink not configured is the rack's min cut to the rest."""
    return {
        name: RackInfo(name, tuple(hosts), b.rack_uplink(hosts) if uplink is None else uplink)
        for name, (hosts, uplink) in racks.items()
    }


def add_site(b: Builder, cfg: Any, prefix: str = "", rack: Optional[str] = None) -> Racks:
    """Add the site `cfg` describes (by its `topology`)."""
    return SITES[cfg.topology](b, cfg, prefix, rack)
