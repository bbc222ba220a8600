"""The plan of a `multi_datacenter` cluster (docs/wan.md, docs/emulation.md "Across datacenters").

Each datacenter is built as a star or two_tier cluster would be, its names prefixed `d<i>` (its place
in `cluster.datacenters`): hosts `d0h0`, `d1ps0`, bridges `d0sw` (star) or `d0tor<r>` and `d0core`
(two_tier). Names come from the place, not the datacenter's `name`, because a name may hold capitals,
`-` and `_`, which a namespace node may not, and may be longer than an interface name leaves room for.

Each WAN link is a veth in the fabric namespace between the two datacenters' top bridges (a star's
switch, a two-tier datacenter's core), shaped at the link's bandwidth at both ends. The simulator's
border switch is not built: its cables to the gateways have the gateways' own port capacity, so they
never limit (sim/cluster/datacenters.py), and a bridge port is as unlimited. No delay is added: this
kernel has no netem (see `WanPlan`).

The WAN links must form a tree: the bridges run without STP, and a loop of bridges would forward a
broadcast round it forever. On a tree the only path between two datacenters is the simulator's
fewest-hop route.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from policies.view import ClusterView
from real.emulate.names import check_interface
from real.emulate.parts import HostPlan, UplinkPlan, WanPlan, host_plan
from sim.cluster.builder import GBPS
from sim.config import MultiDatacenterCluster, StarCluster, TwoTierCluster
from sim.errors import ConfigError

Rate = Callable[[float], int]  # bytes/s in the config -> shaped bit/s (the plan's scale applied)


def top_bridge(index: int, datacenter: object) -> str:
    """The bridge datacenter `index`'s WAN links attach to: a star's switch, a two-tier datacenter's core."""
    return f"d{index}sw" if isinstance(datacenter, StarCluster) else f"d{index}core"


def plan_datacenters(
    cluster: MultiDatacenterCluster, view: ClusterView, tag: str, net: ipaddress.IPv4Network, bps: Rate
) -> tuple[tuple[str, ...], tuple[HostPlan, ...], tuple[UplinkPlan, ...], tuple[WanPlan, ...]]:
    """Bridges, hosts, rack uplinks and WAN links of `cluster`, whose simulated view is `view`."""
    index = {name: i for i, name in enumerate(cluster.names)}
    for i, dc in enumerate(cluster.datacenters):
        if not isinstance(dc, (StarCluster, TwoTierCluster)):
            raise ConfigError(
                f"cluster.datacenters[{i}].topology: emulation supports star and two_tier datacenters, "
                f"got {dc.topology!r}"
            )
    links = cluster.wan_links()
    if len(links) != len(cluster.datacenters) - 1:
        raise ConfigError(
            f"cluster.wan.links: emulation needs the WAN links to form a tree ({len(cluster.datacenters) - 1} links "
            f"for {len(cluster.datacenters)} datacenters, got {len(links)}): its bridges run without STP, so a loop "
            "of links would circulate broadcasts; list the pairs to join with `links:`"
        )
    for link in links:
        if link.bandwidth_trace is not None:
            raise ConfigError(
                f"{link.where}.bandwidth_trace: emulation shapes each link at one fixed rate; remove the trace "
                "to emulate this cluster"
            )

    dc_of = {host: dc for dc, hosts in view.datacenters.items() for host in hosts}
    bridges: list[str] = []
    tors: dict[str, str] = {}  # rack -> its ToR bridge (two_tier datacenters)
    for name, dc in zip(cluster.names, cluster.datacenters):
        i = index[name]
        if isinstance(dc, TwoTierCluster):
            racks = [r for r, info in view.racks.items() if dc_of[info.hosts[0]] == name]
            for r, rack in enumerate(racks):
                tors[rack] = f"d{i}tor{r}"
            bridges += [tors[rack] for rack in racks]
        bridges.append(top_bridge(i, dc))

    hosts = []
    for k, (host, info) in enumerate(view.hosts.items()):
        dc_name = dc_of[host]
        i = index[dc_name]
        local = host[len(dc_name) + 1 :]  # `east.h0` -> `h0`
        node = f"d{i}{local}"
        bridge = tors.get(info.rack) or top_bridge(i, cluster.datacenters[i])
        hosts.append(host_plan(host, node, info.rack, tag, net, k, bridge, bps(info.nic_bytes_per_s)))

    uplinks = []
    for rack, tor in tors.items():
        core = top_bridge(index[dc_of[view.racks[rack].hosts[0]]], None)
        where = f"cluster rack {rack!r}"
        uplinks.append(
            UplinkPlan(
                rack=rack,
                bridge=tor,
                rack_port=check_interface(f"{tor}-up", where),
                core_port=check_interface(f"{core}-{tor.split('tor', 1)[1]}", where),
                rate_bps=bps(view.racks[rack].uplink_bytes_per_s),
                core=core,
            )
        )

    wan = []
    for link in links:
        i, j = index[link.a], index[link.b]
        wan.append(
            WanPlan(
                a=link.a,
                b=link.b,
                a_bridge=top_bridge(i, cluster.datacenters[i]),
                b_bridge=top_bridge(j, cluster.datacenters[j]),
                a_port=check_interface(f"wan{i}-{j}", link.where),
                b_port=check_interface(f"wan{j}-{i}", link.where),
                rate_bps=bps(link.bandwidth_gbps * GBPS),
                rtt_ms=link.rtt_ms,
            )
        )
    return tuple(bridges), tuple(hosts), tuple(uplinks), tuple(wan)
