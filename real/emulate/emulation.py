"""A running emulation as the launcher sees it: for each cluster host, its namespace, address and interface."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import real.emulate.state as state
from real.emulate.errors import EmulationError
from real.emulate.plan import EmulationPlan, ShapedLink


@dataclass(frozen=True)
class EmulatedHost:
    """Where one cluster host lives: run its processes in `namespace`; they reach others at `address`."""

    namespace: str
    address: str
    interface: str
    rack: Optional[str] = None
    nic_bps: int = 0


@dataclass(frozen=True)
class Emulation:
    """An emulated cluster, built by `up` or found again with `Emulation.load(tag)`."""

    tag: str
    topology: str
    scale: float
    subnet: str
    fabric: str
    hosts: dict[str, EmulatedHost]
    links: tuple[ShapedLink, ...] = ()
    namespaces: tuple[str, ...] = field(default=())
    queue: str = "fair"  # the links' queueing discipline

    @classmethod
    def from_plan(cls, plan: EmulationPlan) -> Emulation:
        hosts = {h.name: EmulatedHost(h.namespace, h.address, h.interface, h.rack, h.rate_bps) for h in plan.hosts}
        return cls(
            plan.tag,
            plan.topology,
            plan.scale,
            plan.subnet,
            plan.fabric,
            hosts,
            plan.shaped(),
            plan.namespaces,
            plan.queue,
        )

    @classmethod
    def load(cls, tag: str, state_dir: state.StateDir = None) -> Emulation:
        """The emulation `up` recorded under `tag` (EmulationError if there is none)."""
        return cls.from_dict(state.read(tag, state_dir))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Emulation:
        try:
            return cls(
                tag=data["tag"],
                topology=data["topology"],
                scale=float(data["scale"]),
                subnet=data["subnet"],
                fabric=data["fabric"],
                hosts={name: EmulatedHost(**h) for name, h in data["hosts"].items()},
                links=tuple(ShapedLink(**link) for link in data.get("links", ())),
                namespaces=tuple(data["namespaces"]),
                queue=data.get("queue", "fifo"),  # emulations recorded before disciplines were tbf FIFOs
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise EmulationError(f"emulation state of {data.get('tag')!r} is incomplete ({exc!r})") from None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tag": self.tag,
            "topology": self.topology,
            "scale": self.scale,
            "subnet": self.subnet,
            "fabric": self.fabric,
            "namespaces": list(self.namespaces),
            "hosts": {name: asdict(h) for name, h in self.hosts.items()},
            "links": [asdict(link) for link in self.links],
            "queue": self.queue,
        }

    def host(self, name: str) -> EmulatedHost:
        """The emulated host named `name` (as in ClusterView.rank_hosts / hosts)."""
        try:
            return self.hosts[name]
        except KeyError:
            raise EmulationError(
                f"emulation {self.tag!r} has no host {name!r}; hosts: {', '.join(self.hosts)}"
            ) from None

    def namespace(self, host: str) -> str:
        return self.host(host).namespace

    def address(self, host: str) -> str:
        return self.host(host).address

    def interface(self, host: str) -> str:
        return self.host(host).interface

    def exec_prefix(self, host: str) -> list[str]:
        """The argv prefix that runs a command inside `host`'s namespace (as root)."""
        return ["ip", "netns", "exec", self.namespace(host)]
