"""A cluster across datacenters (`cluster.topology: multi_datacenter`, docs/wan.md): each datacenter a
star, two_tier or custom topology with its own sizes, all joined by WAN links (`sim.config.wan`).

A datacenter takes the cluster's own keys (`nic_gbps`, `gpus_per_host`, ...) unless it sets them; the
GPU model and the rank placement are the cluster's alone (one compute model, one numbering of ranks): a
datacenter may repeat them, as its resolved config does, but not change them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, Field, ValidationError, model_validator

from sim.config.cluster import ClusterBase, CustomCluster, StarCluster, TwoTierCluster
from sim.config.wan import ResolvedWan, WanSettings, resolve_links, wan_problems

MAX_DATACENTERS = 64
# keys a datacenter takes from the cluster unless it sets them; the first two only the cluster sets (a
# datacenter's resolved config repeats them, so a written config.yaml reads back)
CLUSTER_WIDE = ("gpu", "placement")
INHERITED = (
    *CLUSTER_WIDE,
    "gpus_per_host",
    "nic_gbps",
    "nics_per_host",
    "link_latency_us",
    "intra_host_gbps",
    "intra_host_latency_us",
    "server_nic_gbps",
)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


def _datacenter_name(value: str) -> str:
    if not _NAME.fullmatch(value):
        raise ValueError(f"{value!r}: a letter, then letters, digits, '_' or '-' (at most 64 characters)")
    return value


DatacenterName = Annotated[str, AfterValidator(_datacenter_name)]
_NAME_FIELD = Field(None, description="names the datacenter (its nodes are `<name>.<node>`); default: dc0, dc1, ...")


class StarDatacenter(StarCluster):
    """A datacenter whose hosts share one switch; that switch carries its WAN links."""

    name: Optional[DatacenterName] = _NAME_FIELD

    @property
    def gateways(self) -> tuple[str, ...]:
        return ("switch",)


class TwoTierDatacenter(TwoTierCluster):
    """A datacenter of racks under ToR switches; its core switches carry its WAN links."""

    name: Optional[DatacenterName] = _NAME_FIELD

    @property
    def gateways(self) -> tuple[str, ...]:
        return tuple(f"core{c}" for c in range(self.core_switches))


class CustomDatacenter(CustomCluster):
    """A datacenter of explicit nodes and links; its `gateway` switch carries its WAN links."""

    name: Optional[DatacenterName] = _NAME_FIELD
    gateway: Optional[str] = Field(
        None, description="custom only: the switch the WAN links attach to; default: the only one"
    )

    @model_validator(mode="after")
    def _gateway(self) -> CustomDatacenter:
        switches = [n.name for n in self.nodes if n.kind == "switch"]
        shown = ", ".join(switches[:20]) + (f" and {len(switches) - 20:,} more" if len(switches) > 20 else "")
        if not switches:
            raise ValueError("nodes: a datacenter needs a switch to carry its WAN links (hosts do not forward)")
        if self.gateway is None and len(switches) > 1:
            raise ValueError(f"gateway: required where a datacenter has several switches; allowed: {shown}")
        if self.gateway is not None and self.gateway not in switches:
            raise ValueError(f"gateway: {self.gateway!r} is not one of its switches; allowed: {shown}")
        return self

    @property
    def gateways(self) -> tuple[str, ...]:
        return (self.gateway or next(n.name for n in self.nodes if n.kind == "switch"),)


Datacenter = Annotated[Union[StarDatacenter, TwoTierDatacenter, CustomDatacenter], Field(discriminator="topology")]


class MultiDatacenterCluster(ClusterBase):
    """Datacenters, each a star, two_tier or custom topology of its own, joined by WAN links (docs/wan.md).
    The keys above are the defaults of every datacenter, except `gpu` and `placement`, which only the
    cluster sets, and `server_hosts`, which each datacenter sets."""

    topology: Literal["multi_datacenter"] = Field(description="multi_datacenter")
    datacenters: list[Datacenter] = Field(
        min_length=2,
        max_length=MAX_DATACENTERS,
        description=f"2 to {MAX_DATACENTERS} datacenters, each with `topology:` star, two_tier or custom and that "
        "topology's keys (ranks are numbered datacenter by datacenter)",
    )
    wan: WanSettings = Field(description="the WAN links between the datacenters")

    @model_validator(mode="before")
    @classmethod
    def _inherit(cls, data: Any) -> Any:
        """Each datacenter gets the cluster's keys it does not set."""
        if not isinstance(data, dict) or not isinstance(data.get("datacenters"), list):
            return data
        given = {key: data[key] for key in INHERITED if key in data and _valid(key, data[key])}
        entries = []
        for entry in data["datacenters"]:
            entries.append({**given, **entry} if isinstance(entry, dict) else entry)
        return {**data, "datacenters": entries}

    @model_validator(mode="after")
    def _names_and_wan(self) -> MultiDatacenterCluster:
        problems = []
        if self.server_hosts:
            problems.append("server_hosts: set it per datacenter (cluster.datacenters[i].server_hosts)")
        for i, dc in enumerate(self.datacenters):
            for key in CLUSTER_WIDE:
                if getattr(dc, key) != getattr(self, key):
                    problems.append(
                        f"datacenters[{i}].{key}: {getattr(dc, key)!r} differs from cluster.{key} "
                        f"{getattr(self, key)!r}; only the cluster sets it (one GPU model, one placement of ranks)"
                    )
        seen: dict[str, int] = {}
        for i, name in enumerate(self.names):
            if name in seen:
                problems.append(f"datacenters[{i}].name: {name!r} is the name of datacenters[{seen[name]}] too")
            seen.setdefault(name, i)
        if not problems:
            problems = wan_problems(self.wan, self.names)
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def names(self) -> list[str]:
        """Each datacenter's name, by default its place (`dc0`, `dc1`, ...)."""
        return [dc.name or f"dc{i}" for i, dc in enumerate(self.datacenters)]

    @property
    def gpu_total(self) -> int:
        return sum(dc.gpu_total for dc in self.datacenters)

    def wan_links(self) -> list[ResolvedWan]:
        """Every WAN link with its settings filled in."""
        return resolve_links(self.wan, self.names)


def _valid(key: str, value: Any) -> bool:
    """Whether the cluster's `key` is valid (an invalid one is reported once, at the cluster's key)."""
    try:
        ClusterBase.model_validate({key: value})
    except ValidationError:
        return False
    return True
