"""The rail-optimized fabric (`topology: rail_optimized`), as NVIDIA's DGX SuperPOD cables it: in each rail
group NIC i of every host goes to the group's rail switch i, and every rail switch to every spine switch.

    gpu --intra--> host --nic i--> rail switch i (of the group) --uplink--> spine

A host's NICs are separate links here (on star and two-tier clusters they are one link of their sum).
GPU g of a host sits on rail g * nics_per_host // gpus_per_host (node attribute `rail`, as the rail
switches carry theirs); `sim.cluster.routing` keeps a flow to a GPU on that GPU's rail (PXN) and spreads
a ring's hop between hosts over the rails (NCCL's channels). A rail switch's uplink is its hosts' NICs
over rail_oversubscription, split evenly over the spines. Server hosts (no GPUs) hang off the spines.
"""

from __future__ import annotations

from typing import Optional

from sim.cluster.builder import GBPS, US, Builder
from sim.config import RailOptimizedCluster


def rail_uplink(cfg: RailOptimizedCluster) -> float:
    """Bytes/s one rail switch sends to the spine tier."""
    return cfg.hosts_per_group * cfg.nic_gbps * GBPS / cfg.rail_oversubscription


def add_rails(
    b: Builder, cfg: RailOptimizedCluster, prefix: str = "", rack: Optional[str] = None
) -> dict[str, tuple[list[str], Optional[float]]]:
    """Rail groups; returns each group (as a rack) with its hosts and its uplink to the spine."""
    lat, nic = cfg.link_latency_us * US, cfg.nic_gbps * GBPS
    up = rail_uplink(cfg)
    spines = [f"{prefix}spine{s}" for s in range(cfg.spine_switches)]
    for spine in spines:
        b.node(spine, "switch")
    groups: dict[str, tuple[list[str], Optional[float]]] = {}
    per_rail = cfg.gpus_per_host // cfg.nics_per_host
    for g in range(cfg.rail_groups):
        group = f"{prefix}group{g}"
        rails = [f"{prefix}rail{g}.{i}" for i in range(cfg.nics_per_host)]
        for i, switch in enumerate(rails):
            b.node(switch, "switch", rack=group, rail=i)
            for spine in spines:
                b.cable(switch, spine, up / len(spines), lat, "uplink")
        hosts = []
        for k in range(cfg.hosts_per_group):
            name = f"{prefix}h{g * cfg.hosts_per_group + k}"
            b.host(name, cfg.gpus_per_host, group)
            for j, gpu in enumerate(b.hosts[name]["gpus"]):
                b.graph.nodes[gpu]["rail"] = j // per_rail
            for switch in rails:
                b.cable(name, switch, nic, lat, "nic")
            hosts.append(name)
        groups[group] = (hosts, up * len(rails))
    for i in range(cfg.server_hosts):
        b.host(f"{prefix}ps{i}", 0, None, server=True)
        b.cable(f"{prefix}ps{i}", spines[i % len(spines)], b.nic_bps(True), lat, "nic")
    return groups
