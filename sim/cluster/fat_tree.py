"""The three-tier fat tree (`topology: fat_tree`): hosts under ToR switches, a pod's ToRs under its
aggregation switches, every aggregation switch under every spine switch.

    host --nic--> ToR --fabric--> aggregation --uplink--> spine

Each tier's uplink is its downlinks over that tier's oversubscription: a ToR sends hosts_per_rack x a
host's NICs / tor_oversubscription up (split evenly over the pod's aggregation switches), a pod its ToRs'
uplinks / pod_oversubscription (split evenly over its aggregation switches' cables to the spines).
Policies see a pod as a rack, so a rack's uplink is the pod's to the spine.
"""

from __future__ import annotations

from typing import Optional

from sim.cluster.builder import US, Builder
from sim.config import FatTreeCluster


def tier_uplinks(b: Builder, cfg: FatTreeCluster) -> tuple[float, float]:
    """Bytes/s a ToR sends to its pod's aggregation tier, and a pod to the spine tier."""
    tor = cfg.hosts_per_rack * b.nic_bps(False) / cfg.tor_oversubscription
    return tor, cfg.racks_per_pod * tor / cfg.pod_oversubscription


def add_fat_tree(
    b: Builder, cfg: FatTreeCluster, prefix: str = "", rack: Optional[str] = None
) -> dict[str, tuple[list[str], Optional[float]]]:
    """Pods of racks; returns each pod (as a rack) with its hosts and its uplink to the spine."""
    lat = cfg.link_latency_us * US
    tor_up, pod_up = tier_uplinks(b, cfg)
    spines = [f"{prefix}spine{s}" for s in range(cfg.spine_switches)]
    for spine in spines:
        b.node(spine, "switch")
    pods: dict[str, list[str]] = {}
    tors: list[tuple[str, str]] = []  # (ToR, its pod), for the server hosts
    host = 0
    for p in range(cfg.pods):
        pod = f"{prefix}pod{p}"
        aggs = [f"{prefix}agg{p}.{a}" for a in range(cfg.aggregation_switches)]
        for agg in aggs:
            b.node(agg, "switch", rack=pod)
            b.own(pod, agg)  # the pod's own switch: its cables to the spines are the pod's uplink
            for spine in spines:
                b.cable(agg, spine, pod_up / (len(aggs) * len(spines)), lat, "uplink")
        pods[pod] = []
        for r in range(cfg.racks_per_pod):
            tor = f"{prefix}tor{p}.{r}"
            b.node(tor, "switch", rack=pod)
            tors.append((tor, pod))
            for agg in aggs:
                b.cable(tor, agg, tor_up / len(aggs), lat, "fabric")
            for _ in range(cfg.hosts_per_rack):
                name = f"{prefix}h{host}"
                b.host(name, cfg.gpus_per_host, pod)
                b.cable(name, tor, b.nic_bps(False), lat, "nic")
                pods[pod].append(name)
                host += 1
    for i in range(cfg.server_hosts):  # spread over the racks, as on a two-tier cluster
        tor, pod = tors[i % len(tors)]
        b.host(f"{prefix}ps{i}", 0, pod, server=True)
        b.cable(f"{prefix}ps{i}", tor, b.nic_bps(True), lat, "nic")
        pods[pod].append(f"{prefix}ps{i}")
    return {pod: (hosts, pod_up) for pod, hosts in pods.items()}
