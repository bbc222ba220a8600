"""The `cluster:` section's single-site topologies: star, two_tier, fat_tree, rail_optimized and custom
(docs/config.md);
`sim.config.datacenters` joins several of them by WAN links."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field, field_validator, model_validator

from sim.catalog.gpus import GPU_NAMES
from sim.config.custom_topology import wiring_problems
from sim.config.types import MAX_COUNT, MAX_FACTOR, Count, Gbps, LatencyUs, Strict

MAX_HOST_MEMORY_GBS = 1e5  # 100 TB/s: past any CPU's memory system; a typo, not a host


class ClusterBase(Strict):
    gpus_per_host: Count = Field(1, description="GPUs per host (one rank each)")
    gpu: str = Field("V100", description="GPU model: " + ", ".join(GPU_NAMES))
    nic_gbps: Gbps = Field(25.0, description="each host's NIC bandwidth, per direction")
    nics_per_host: Count = Field(
        1,
        description="NICs per GPU host, each of nic_gbps (rail-aligned with GPUDirect RDMA, as on DGX/HGX: "
        "a host's network bandwidth is nics_per_host * nic_gbps)",
    )
    link_latency_us: LatencyUs = Field(5.0, description="latency of every network link (NIC, uplink)")
    intra_host_gbps: Optional[Gbps] = Field(
        None, description="per-GPU NVLink/PCIe bandwidth per direction; default: the GPU's"
    )
    intra_host_latency_us: LatencyUs = Field(1.0, description="latency of the GPU-to-host link")
    host_memory_gbs: Optional[Annotated[float, Field(gt=0, le=MAX_HOST_MEMORY_GBS)]] = Field(
        None,
        description="GB/s at which a GPU host's CPU streams its memory; when set, policies' local ops (pseudo-"
        "gradients, outer optimizer, mixing) run on the host at this rate instead of on the GPU at its memory "
        "bandwidth, as PRIME's DiLoCo keeps its outer state in host memory (wire casts stay on the GPU); "
        "default: on the GPU",
    )
    server_hosts: Annotated[int, Field(ge=0, le=MAX_COUNT)] = Field(
        0, description="hosts without GPUs, e.g. for dedicated PS shards"
    )
    server_nic_gbps: Optional[Gbps] = Field(None, description="server hosts' NIC bandwidth; default: nic_gbps")
    placement: Literal["packed", "scattered", "random"] = Field(
        "packed",
        description="how ranks map to hosts: packed fills hosts rack by rack; scattered deals hosts round-robin "
        "over racks; random shuffles hosts with the seed",
    )

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value.upper() not in {g.upper() for g in GPU_NAMES}:
            raise ValueError(f"unknown GPU {value!r}; allowed: {', '.join(GPU_NAMES)}")
        return value


class StarCluster(ClusterBase):
    """Every host on one switch: a non-blocking network."""

    topology: Literal["star"] = Field(description="star")
    hosts: Count = Field(description="number of GPU hosts")

    @property
    def gpu_total(self) -> int:
        return self.hosts * self.gpus_per_host


class TwoTierCluster(ClusterBase):
    """Racks of hosts under ToR switches, each rack joined to the core by its uplink."""

    topology: Literal["two_tier"] = Field(description="two_tier")
    racks: Count = Field(description="number of racks")
    hosts_per_rack: Count = Field(description="GPU hosts per rack")
    uplink_gbps: Optional[Gbps] = Field(
        None,
        description="each rack's total uplink; hosts_per_rack * nics_per_host * nic_gbps / uplink_gbps is the "
        "oversubscription; default non-blocking (1:1)",
    )
    core_switches: Count = Field(1, description="the uplink is split evenly over this many core switches (ECMP)")

    @property
    def gpu_total(self) -> int:
        return self.racks * self.hosts_per_rack * self.gpus_per_host


Oversubscription = Annotated[float, Field(ge=1.0, le=MAX_FACTOR)]


class FatTreeCluster(ClusterBase):
    """Three tiers: racks of hosts under ToR switches, a pod's ToRs under its aggregation switches, every
    aggregation switch under every spine switch; each tier's oversubscription set on its own. Policies
    see each pod as a rack."""

    topology: Literal["fat_tree"] = Field(description="fat_tree")
    pods: Count = Field(description="number of pods")
    racks_per_pod: Count = Field(description="ToR switches (racks) per pod")
    hosts_per_rack: Count = Field(description="GPU hosts per rack")
    aggregation_switches: Count = Field(
        1, description="aggregation switches per pod; every ToR of the pod is cabled to each (ECMP)"
    )
    spine_switches: Count = Field(1, description="spine switches; every aggregation switch is cabled to each (ECMP)")
    tor_oversubscription: Oversubscription = Field(
        1.0,
        description="a ToR's host bandwidth (hosts_per_rack * nics_per_host * nic_gbps) over its uplink to the "
        "pod's aggregation switches; 1: non-blocking",
    )
    pod_oversubscription: Oversubscription = Field(
        1.0,
        description="a pod's ToR uplinks (racks_per_pod of them) over the pod's uplink to the spine; 1: non-blocking",
    )

    @property
    def gpu_total(self) -> int:
        return self.pods * self.racks_per_pod * self.hosts_per_rack * self.gpus_per_host


class RailOptimizedCluster(ClusterBase):
    """Rail groups of hosts: NIC i of every host in a group on the group's rail switch i, every rail switch
    under every spine switch. GPU g of a host sits on rail g * nics_per_host // gpus_per_host. Traffic to a
    GPU leaves its source host on the destination GPU's rail (NCCL's PXN: over NVLink to the GPU beside
    that NIC), so between groups it climbs to the spine only from that rail; a collective's ring spreads
    its hops between hosts over every rail, as NCCL's channels do. Policies see each group as a rack."""

    topology: Literal["rail_optimized"] = Field(description="rail_optimized")
    rail_groups: Count = Field(description="number of rail groups (scalable units)")
    hosts_per_group: Count = Field(description="GPU hosts per rail group")
    spine_switches: Count = Field(1, description="spine switches; every rail switch is cabled to each (ECMP)")
    rail_oversubscription: Oversubscription = Field(
        1.0,
        description="a rail switch's host bandwidth (hosts_per_group * nic_gbps) over its uplink to the spine; "
        "1: non-blocking",
    )

    @property
    def gpu_total(self) -> int:
        return self.rail_groups * self.hosts_per_group * self.gpus_per_host

    @model_validator(mode="after")
    def _rails(self) -> RailOptimizedCluster:
        if self.gpus_per_host % self.nics_per_host:
            raise ValueError(
                f"nics_per_host: must divide gpus_per_host ({self.gpus_per_host}) so that every rail serves as "
                f"many GPUs; got {self.nics_per_host}"
            )
        return self


class CustomNode(Strict):
    """One node of a custom topology: a host with GPUs, a switch, or a server without GPUs."""

    name: str = Field(description="unique node name")
    kind: Literal["host", "switch", "server"] = Field(description="host (with GPUs), switch, or server (no GPUs)")
    gpus: Optional[Count] = Field(None, description="a host's GPUs; default: gpus_per_host")
    rack: Optional[str] = Field(None, description="a host's rack, for rack-level policies")


class CustomLink(Strict):
    """One full-duplex cable between two nodes; unset settings come from the cluster's keys."""

    a: str = Field(description="one end (a node name)")
    b: str = Field(description="the other end")
    gbps: Optional[Gbps] = Field(
        None, description="bandwidth per direction; default: nic_gbps (times nics_per_host for a GPU host's link)"
    )
    latency_us: Optional[LatencyUs] = Field(None, description="the link's latency; default: link_latency_us")


class CustomCluster(ClusterBase):
    """Explicit nodes and full-duplex links, for shapes the other topologies cannot express."""

    topology: Literal["custom"] = Field(description="custom")
    nodes: list[CustomNode] = Field(min_length=1, description="hosts, switches and servers")
    links: list[CustomLink] = Field(min_length=1, description="full-duplex cables between nodes")

    @property
    def gpu_total(self) -> int:
        return sum(n.gpus or self.gpus_per_host for n in self.nodes if n.kind == "host")

    @model_validator(mode="after")
    def _wiring(self) -> CustomCluster:
        if problems := wiring_problems(self.nodes, self.links, self.gpus_per_host):
            raise ValueError("\n".join(problems))
        return self
