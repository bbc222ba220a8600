"""From a `cluster:` config to an EmulationPlan: namespaces, bridges, veths, addresses and rates.

Pure: nothing here touches the system, so every naming and rate rule is testable without root.
The plan reads the cluster the simulator builds (sim.cluster.topology.build_cluster), so host names, racks,
NIC rates and rack uplinks (including the non-blocking default) are the simulator's by construction.

    host ns  h0:eth0 ==veth== fabric:h0-p -- [tor0] --tor0-up ==veth== core-tor0-- [core] -- ...
    (star: every host port on one bridge `switch`, no uplinks;
     multi_datacenter: each datacenter so, prefixed `d<i>`, and WAN veths between their top bridges:
     real.emulate.datacenters)

`core_switches > 1` becomes one core bridge: the simulator splits a rack's uplink evenly over the
cores, so the rack's total uplink (what one veth carries here) is the same.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from real.emulate.datacenters import plan_datacenters
from real.emulate.names import DEFAULT_SUBNET, FABRIC, check_interface, check_tag, namespace_name, tag_from_name
from real.emulate.parts import CORE_BRIDGE, HostPlan, UplinkPlan, WanPlan, host_plan
from real.emulate.shaping import check_queue
from sim.cluster.topology import build_cluster
from sim.config import ClusterBase, Config, CustomCluster, MultiDatacenterCluster, StarCluster, TwoTierCluster
from sim.errors import ConfigError

STAR_BRIDGE = "switch"
FAST_BPS = 1e9  # gloo on a couple of cores cannot fill links faster than about this


@dataclass(frozen=True)
class ShapedLink:
    """One direction of one link: the veth end whose egress qdisc shapes it."""

    namespace: str
    device: str
    rate_bps: int
    direction: str  # e.g. "h0 -> tor0"


@dataclass(frozen=True)
class EmulationPlan:
    tag: str
    topology: str
    scale: float
    subnet: str
    fabric: str  # the namespace holding the bridges and uplinks
    bridges: tuple[str, ...]
    hosts: tuple[HostPlan, ...]
    uplinks: tuple[UplinkPlan, ...]
    queue: str = "fair"  # the links' queueing discipline (real.emulate.shaping.QUEUES)
    wan: tuple[WanPlan, ...] = ()  # multi_datacenter only

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace the plan creates, the fabric first."""
        return (self.fabric, *(h.namespace for h in self.hosts))

    def shaped(self) -> tuple[ShapedLink, ...]:
        """Both directions of every link: qdiscs shape egress only, so each veth end carries one."""
        links: list[ShapedLink] = []
        for h in self.hosts:
            links.append(ShapedLink(h.namespace, h.interface, h.rate_bps, f"{h.name} -> {h.bridge}"))
            links.append(ShapedLink(self.fabric, h.port, h.rate_bps, f"{h.bridge} -> {h.name}"))
        for u in self.uplinks:
            links.append(ShapedLink(self.fabric, u.rack_port, u.rate_bps, f"{u.bridge} -> {u.core}"))
            links.append(ShapedLink(self.fabric, u.core_port, u.rate_bps, f"{u.core} -> {u.bridge}"))
        for w in self.wan:
            links.append(ShapedLink(self.fabric, w.a_port, w.rate_bps, f"wan {w.a} -> {w.b}"))
            links.append(ShapedLink(self.fabric, w.b_port, w.rate_bps, f"wan {w.b} -> {w.a}"))
        return tuple(links)

    def notes(self) -> list[str]:
        """Warnings worth printing before the emulation is used."""
        notes = [wan_delay_note(w) for w in self.wan]
        fast = max(link.rate_bps for link in self.shaped())
        if fast > FAST_BPS:
            notes.append(
                f"links up to {fast / 1e6:,.0f} Mbit/s: gloo on a few CPU cores tops out near 1 Gbit/s, so "
                "such links will not be the bottleneck; lower them with --scale"
            )
        return notes


def wan_delay_note(w: WanPlan) -> str:
    """What an emulated WAN link does not reproduce: its round trip, and so its window ceiling."""
    return (
        f"WAN {w.a} <-> {w.b}: shaped at {w.rate_bps / 1e6:,.1f} Mbit/s each way, but NO DELAY is added "
        f"(rtt_ms {w.rtt_ms:g} in the config; this kernel has no netem): its round trip is the machine's own "
        "(measure it with real.emulate.probe.ping), and the window / RTT ceiling of each connection is not emulated"
    )


def plan_config(
    config: Config,
    tag: Optional[str] = None,
    *,
    scale: float = 1.0,
    subnet: str = DEFAULT_SUBNET,
    queue: str = "fair",
) -> EmulationPlan:
    """The plan for a whole config: its `cluster:` section, tag from its `name` unless given."""
    tag = check_tag(tag) if tag is not None else tag_from_name(config.name)
    return plan_cluster(config.cluster, tag, scale=scale, subnet=subnet, seed=config.seed, queue=queue)


def plan_cluster(
    cluster: ClusterBase,
    tag: str,
    *,
    scale: float = 1.0,
    subnet: str = DEFAULT_SUBNET,
    seed: int = 0,
    queue: str = "fair",
) -> EmulationPlan:
    """The plan for one `cluster:` config; link rates are the config's times `scale`, queued by `queue`."""
    check_tag(tag)
    try:
        check_queue(queue)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    supported = isinstance(cluster, (StarCluster, TwoTierCluster, MultiDatacenterCluster))
    if isinstance(cluster, CustomCluster) or not supported:
        topology = getattr(cluster, "topology", type(cluster).__name__)
        raise ConfigError(f"cluster.topology: emulation supports star, two_tier and multi_datacenter, got {topology!r}")
    if not scale > 0:
        raise ConfigError(f"emulate.scale: must be > 0, got {scale}")
    view = build_cluster(cluster, seed).view
    net = _subnet(subnet)
    capacity = net.num_addresses - 2  # network and broadcast addresses
    if len(view.hosts) > capacity:
        raise ConfigError(f"emulate.subnet: {subnet} has {capacity} host addresses, the cluster {len(view.hosts)}")

    def bps(bytes_per_s: float) -> int:
        rate = int(round(bytes_per_s * 8 * scale))
        if rate < 1000:
            raise ConfigError(f"emulate.scale: {scale} makes a link of {rate} bit/s; the least tc shapes is 1 kbit/s")
        return rate

    fabric = namespace_name(tag, FABRIC)
    if isinstance(cluster, MultiDatacenterCluster):
        bridges, hosts, uplinks, wan = plan_datacenters(cluster, view, tag, net, bps)
        return EmulationPlan(tag, cluster.topology, scale, str(net), fabric, bridges, hosts, uplinks, queue, wan)
    tors = {rack: f"tor{i}" for i, rack in enumerate(view.racks)}
    hosts = []
    for i, (name, info) in enumerate(view.hosts.items()):
        bridge = tors[info.rack] if isinstance(cluster, TwoTierCluster) else STAR_BRIDGE
        hosts.append(host_plan(name, name, info.rack, tag, net, i, bridge, bps(info.nic_bytes_per_s)))
    uplinks = tuple(
        UplinkPlan(rack, tor, f"{tor}-up", check_interface(f"{CORE_BRIDGE}-{tor}", rack), bps(r.uplink_bytes_per_s))
        for rack, r in view.racks.items()
        for tor in (tors[rack],)
    )
    bridges = (STAR_BRIDGE,) if isinstance(cluster, StarCluster) else (*tors.values(), CORE_BRIDGE)
    return EmulationPlan(tag, cluster.topology, scale, str(net), fabric, bridges, tuple(hosts), uplinks, queue)


def _subnet(text: str) -> ipaddress.IPv4Network:
    try:
        net = ipaddress.IPv4Network(text, strict=True)
    except ValueError as exc:
        raise ConfigError(f"emulate.subnet: {text!r} is not an IPv4 network like {DEFAULT_SUBNET} ({exc})") from None
    if not net.is_private:
        raise ConfigError(f"emulate.subnet: {text} is not a private range; use one inside 10.0.0.0/8 or 172.16.0.0/12")
    return net
