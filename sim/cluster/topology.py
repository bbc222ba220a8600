"""Physical clusters: GPUs, hosts, NICs, switches and links, built from the `cluster:` config.

    gpu --intra--> host --nic--> ToR --uplink--> core     (two_tier; a star has one switch)
    host --nic--> ToR --> aggregation --uplink--> spine  (fat_tree: sim.cluster.fat_tree)
    host --nic i--> rail switch i --uplink--> spine      (rail_optimized: sim.cluster.rails)

`sim.cluster.builder` holds the graph and the link table, `sim.cluster.sites` the single-site topologies,
`sim.cluster.datacenters` a cluster of several joined by WAN links.
"""

from __future__ import annotations

from sim.cluster.builder import GBPS, US, Builder, Cluster, Link, WanCable
from sim.cluster.datacenters import build_datacenters
from sim.cluster.sites import SITES, add_site, rack_infos
from sim.config import ClusterBase, MultiDatacenterCluster
from sim.errors import ConfigError

__all__ = ["GBPS", "US", "Cluster", "Link", "WanCable", "build_cluster"]


def build_cluster(cfg: ClusterBase, seed: int = 0) -> Cluster:
    """Build the physical cluster described by a validated `cluster:` config (`seed`: random placement)."""
    if isinstance(cfg, MultiDatacenterCluster):
        return build_datacenters(cfg, seed)
    topology = getattr(cfg, "topology", None)
    if topology not in SITES:
        raise ConfigError(
            f"cluster.topology: unsupported {type(cfg).__name__}; allowed: {', '.join(SITES)}, multi_datacenter"
        )
    b = Builder(cfg)
    racks = add_site(b, cfg)
    return b.finish(rack_infos(b, racks), seed)
