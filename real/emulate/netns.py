"""Apply an EmulationPlan with `ip` and `tc`, and delete namespaces again.

Everything is created inside namespaces this package names: veth pairs are made in the fabric
namespace with their host end placed straight into the host's namespace, so no interface, address
or route of the root namespace is ever created or changed. The root namespace is only read (its
routes, to avoid reusing a subnet in use).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from real.emulate.errors import EmulationError
from real.emulate.shaping import shaping_for

if TYPE_CHECKING:
    from real.emulate.plan import EmulationPlan

TOOLS = ("ip", "tc")


def require_tools() -> None:
    """EmulationError unless we are root and iproute2's `ip` and `tc` are installed."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise EmulationError(
            f"emulation needs iproute2: {' and '.join(missing)} not found on PATH (install it, e.g. apt-get install "
            "iproute2)"
        )
    if os.geteuid() != 0:
        raise EmulationError("emulation creates network namespaces, which needs root: run it as root (e.g. with sudo)")


def run(args: Sequence[str], stdin: Optional[str] = None) -> str:
    """Run one command (an argument list, never a shell line), feeding it `stdin`; its stdout, or
    EmulationError with its stderr."""
    try:
        done = subprocess.run(list(args), input=stdin, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise EmulationError(f"cannot run {args[0]!r}: {exc.strerror}") from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise EmulationError(f"`{' '.join(args)}` failed: {detail}")
    return done.stdout


def namespaces() -> set[str]:
    """Names of the network namespaces that exist (`ip netns list`)."""
    return {line.split()[0] for line in run(["ip", "netns", "list"]).splitlines() if line.strip()}


def root_subnets() -> list[ipaddress.IPv4Network]:
    """Destinations of the root namespace's IPv4 routes, the default route aside (read only)."""
    nets = []
    for line in run(["ip", "-4", "route", "show", "table", "all"]).splitlines():
        words = line.split()
        if words and words[0] in ("local", "broadcast", "unicast", "multicast", "anycast"):
            words = words[1:]
        if not words or words[0] == "default":
            continue
        try:
            nets.append(ipaddress.IPv4Network(words[0], strict=False))
        except ValueError:
            continue
    return nets


def check_subnet_free(subnet: str) -> None:
    """EmulationError if `subnet` overlaps a route of the root namespace."""
    net = ipaddress.IPv4Network(subnet)
    clashes = [str(r) for r in root_subnets() if r.overlaps(net) and r.prefixlen > 0]
    if clashes:
        raise EmulationError(
            f"emulate.subnet: {subnet} overlaps routes of this machine ({', '.join(sorted(set(clashes)))}); "
            "pick another private range with --subnet"
        )


def build(plan: EmulationPlan) -> None:
    """Create the plan's namespaces, bridges, veths, addresses and shaping qdiscs (the namespaces must not exist)."""
    fab = plan.fabric
    for ns in plan.namespaces:
        run(["ip", "netns", "add", ns])
        run(["ip", "-n", ns, "link", "set", "lo", "up"])
    for bridge in plan.bridges:
        # STP stays off (the fabric is a tree), so ports forward the moment they are up
        run(["ip", "-n", fab, "link", "add", bridge, "type", "bridge", "stp_state", "0"])
        run(["ip", "-n", fab, "link", "set", bridge, "up"])
    for h in plan.hosts:
        run(["ip", "-n", fab, "link", "add", h.port, "type", "veth", "peer", "name", h.interface, "netns", h.namespace])
        run(["ip", "-n", fab, "link", "set", h.port, "master", h.bridge, "up"])
        run(["ip", "-n", h.namespace, "addr", "add", f"{h.address}/{h.prefixlen}", "dev", h.interface])
        run(["ip", "-n", h.namespace, "link", "set", h.interface, "up"])
    for u in plan.uplinks:
        run(["ip", "-n", fab, "link", "add", u.rack_port, "type", "veth", "peer", "name", u.core_port])
        run(["ip", "-n", fab, "link", "set", u.rack_port, "master", u.bridge, "up"])
        run(["ip", "-n", fab, "link", "set", u.core_port, "master", u.core, "up"])
    for w in plan.wan:
        run(["ip", "-n", fab, "link", "add", w.a_port, "type", "veth", "peer", "name", w.b_port])
        run(["ip", "-n", fab, "link", "set", w.a_port, "master", w.a_bridge, "up"])
        run(["ip", "-n", fab, "link", "set", w.b_port, "master", w.b_bridge, "up"])
    for link in plan.shaped():
        lines = shaping_for(link.rate_bps).lines(link.device, plan.queue)
        try:
            run(["tc", "-n", link.namespace, "-batch", "-"], stdin="\n".join(lines) + "\n")
        except EmulationError as exc:
            hint = " (this kernel may lack htb or u32: try --queue fifo)" if plan.queue == "fair" else ""
            raise EmulationError(f"shaping {link.direction} ({plan.queue} queue): {exc}{hint}") from None


def pids(namespace: str) -> list[int]:
    """Processes running inside `namespace`."""
    return [int(p) for p in run(["ip", "netns", "pids", namespace]).split()]


def delete(namespace: str) -> None:
    """Delete one namespace; its veths (and their peers) and bridges go with it."""
    run(["ip", "netns", "del", namespace])
