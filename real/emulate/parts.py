"""The parts an emulation plan is made of (real.emulate.plan): hosts, rack uplinks and WAN links, each a veth
with its names and rate. Pure values, shared by the single-site plan and the datacenters' (real.emulate.datacenters)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from real.emulate.names import check_interface, namespace_name

HOST_INTERFACE = "eth0"
CORE_BRIDGE = "core"


@dataclass(frozen=True)
class HostPlan:
    """One emulated host: its namespace and address, and its NIC veth (host end, fabric end)."""

    name: str
    rack: Optional[str]
    namespace: str
    address: str
    prefixlen: int
    interface: str  # the host end, in `namespace`
    port: str  # the fabric end, a port of `bridge`
    bridge: str
    rate_bps: int


@dataclass(frozen=True)
class UplinkPlan:
    """One rack's uplink: a veth inside the fabric namespace from its ToR bridge to the core bridge."""

    rack: str
    bridge: str
    rack_port: str  # on `bridge`; its egress is the rack -> core direction
    core_port: str  # on the core bridge; its egress is core -> rack
    rate_bps: int
    core: str = CORE_BRIDGE  # the core bridge (`d<i>core` in datacenter <i> of a multi_datacenter cluster)


@dataclass(frozen=True)
class WanPlan:
    """One WAN link: a veth inside the fabric namespace between two datacenters' top bridges (a star's
    switch, a two-tier datacenter's core; the simulator's border switch is not built: real.emulate.datacenters).

    No delay is added (this kernel has no netem): `rtt_ms` is the config's, kept to report beside
    the round trip the emulated link really has."""

    a: str  # datacenter names, as in the config
    b: str
    a_bridge: str
    b_bridge: str
    a_port: str  # on `a_bridge`; its egress is a -> b
    b_port: str  # on `b_bridge`; its egress is b -> a
    rate_bps: int
    rtt_ms: float


def host_plan(
    name: str, node: str, rack: Optional[str], tag: str, net: ipaddress.IPv4Network, k: int, bridge: str, rate_bps: int
) -> HostPlan:
    """Host `name` (the simulator's), emulated as `node`: namespace and fabric port named after `node`, the
    k-th address of `net`, its NIC veth on `bridge` at `rate_bps`."""
    return HostPlan(
        name=name,
        rack=rack,
        namespace=namespace_name(tag, node),
        address=str(net.network_address + 1 + k),
        prefixlen=net.prefixlen,
        interface=HOST_INTERFACE,
        port=check_interface(f"{node}-p", f"cluster host {name!r}"),
        bridge=bridge,
        rate_bps=rate_bps,
    )
