"""The cluster as counts (`Shape`): what `build_cluster` would build, counted from the validated config
without building it, for the cost estimate (`sim.estimate.cost`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.config import Config, CustomCluster, FatTreeCluster, MultiDatacenterCluster, RailOptimizedCluster, StarCluster


@dataclass(frozen=True)
class Shape:
    """The cluster as counts: ranks, hosts, racks, directed links, links on a cross-host path."""

    workers: int
    hosts: int
    racks: int
    hosts_per_rack: float
    gpus_per_host: int  # the most on one host
    server_hosts: int
    links: int
    path_links: float
    oversubscribed: bool
    datacenters: int = 1


def shape_of(config: Config) -> Shape:
    """Count what `build_cluster` would build, without building it."""
    c = config.cluster
    if isinstance(c, MultiDatacenterCluster):
        return _datacenters_shape(c)
    return _site_shape(c)


def _datacenters_shape(c: MultiDatacenterCluster) -> Shape:
    """The datacenters' shapes added up, with their border switches and WAN links (docs/wan.md); a star
    datacenter is one rack."""
    sites = [_site_shape(dc) for dc in c.datacenters]
    racks = sum(max(s.racks, 1) for s in sites)
    hosts = sum(s.hosts for s in sites)
    borders = sum(len(dc.gateways) for dc in c.datacenters)
    return Shape(
        sum(s.workers for s in sites), hosts, racks, hosts / racks, max(s.gpus_per_host for s in sites),
        sum(s.server_hosts for s in sites), sum(s.links for s in sites) + 2 * (borders + len(c.wan_links())),
        max(s.path_links for s in sites) + 3, any(s.oversubscribed for s in sites), len(c.datacenters),
    )  # fmt: skip


def _site_shape(c: Any) -> Shape:
    if isinstance(c, CustomCluster):
        gpus = [n.gpus or c.gpus_per_host for n in c.nodes if n.kind == "host"]
        racks = len({n.rack for n in c.nodes if n.kind == "host" and n.rack is not None})
        servers = sum(1 for n in c.nodes if n.kind == "server")
        w = sum(gpus)
        return Shape(w, len(gpus), racks, len(gpus) / max(racks, 1), max(gpus, default=1), servers,
                     2 * (w + len(c.links)), 6.0, racks > 1)  # fmt: skip
    if isinstance(c, FatTreeCluster):  # a pod is a rack; a path climbs to the ToR, aggregation or spine tier
        tors, aggs = c.pods * c.racks_per_pod, c.pods * c.aggregation_switches
        hosts = tors * c.hosts_per_rack
        w = hosts * c.gpus_per_host
        links = 2 * (w + hosts + c.server_hosts + tors * c.aggregation_switches + aggs * c.spine_switches)
        climb = 8.0 if c.pods > 1 else 6.0 if c.racks_per_pod > 1 else 4.0
        over = c.tor_oversubscription > 1 or c.pod_oversubscription > 1
        return Shape(w, hosts, c.pods, hosts / c.pods, c.gpus_per_host, c.server_hosts, links, climb, over)
    if isinstance(c, RailOptimizedCluster):  # a rail group is a rack; between groups a path climbs to a spine
        hosts = c.rail_groups * c.hosts_per_group
        w = hosts * c.gpus_per_host
        rails = c.rail_groups * c.nics_per_host
        links = 2 * (w + hosts * c.nics_per_host + c.server_hosts + rails * c.spine_switches)
        return Shape(w, hosts, c.rail_groups, c.hosts_per_group, c.gpus_per_host, c.server_hosts, links,
                     6.0 if c.rail_groups > 1 else 4.0, c.rail_oversubscription > 1)  # fmt: skip
    hosts = c.hosts if isinstance(c, StarCluster) else c.racks * c.hosts_per_rack
    w = hosts * c.gpus_per_host
    if isinstance(c, StarCluster):
        links = 2 * (w + hosts + c.server_hosts)
        return Shape(w, hosts, 0, hosts, c.gpus_per_host, c.server_hosts, links, 4.0, False)
    links = 2 * (w + hosts + c.server_hosts + c.racks * c.core_switches)
    over = c.uplink_gbps is not None and c.uplink_gbps < c.hosts_per_rack * c.nic_gbps
    return Shape(w, hosts, c.racks, c.hosts_per_rack, c.gpus_per_host, c.server_hosts, links,
                 6.0 if c.racks > 1 else 4.0, over)  # fmt: skip
