"""The logical picture of a cluster that policies plan against.

Backends build it (the simulator from its topology, the real backend from calibration); policies
read it. It names ranks, hosts and racks and gives the bandwidth figures that matter for planning
(NIC, rack uplink, intra-host), never individual links. Units: bytes, seconds, bytes per second.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Optional

from policies.membership import Absence, Membership
from policies.wire import wire_type


@dataclass(frozen=True)
class HostInfo:
    name: str
    rack: Optional[str]
    ranks: tuple[int, ...]
    nic_bytes_per_s: float
    intra_bytes_per_s: float


@dataclass(frozen=True)
class RackInfo:
    name: str
    hosts: tuple[str, ...]
    uplink_bytes_per_s: float  # what the rack can send to the rest of the cluster at once

    def oversubscription(self, hosts: Mapping[str, HostInfo]) -> float:
        """Total NIC bandwidth in the rack over its uplink bandwidth (1.0 = non-blocking)."""
        return sum(hosts[h].nic_bytes_per_s for h in self.hosts) / self.uplink_bytes_per_s


@dataclass(frozen=True)
class ModelInfo:
    """What a policy may know of the model: sizes in bytes, which buckets are sparse, and the shapes of
    each bucket's tensors (what a low-rank codec factors; () when the backend does not know them)."""

    parameter_bytes: float  # one replica's parameters (what parameter averaging moves)
    bucket_bytes: tuple[float, ...]  # gradient buckets in the order backward produces them
    sparse_buckets: tuple[bool, ...] = ()  # buckets holding sparse gradients (docs/sparse.md); () = none
    gradient_type: str = "fp32"  # the element type bucket bytes count values in (policies.wire)
    # per bucket, its tensors' shapes in the order they lie in the bucket's flat gradient; () = unknown
    bucket_shapes: tuple[tuple[tuple[int, ...], ...], ...] = ()

    def gradient_values(self, nbytes: float) -> float:
        """Values in `nbytes` of gradient (a bucket's `nbytes`): what an op with a `wire` states."""
        return nbytes / (wire_type(self.gradient_type, "gradient_type").bits / 8)

    def is_sparse(self, bucket: int) -> bool:
        return bucket < len(self.sparse_buckets) and self.sparse_buckets[bucket]

    @property
    def gradient_bytes(self) -> float:
        return float(sum(self.bucket_bytes))

    @property
    def parameter_ratio(self) -> float:
        """A bucket's parameters in bytes per byte of its gradient: 2 when gradients travel in 16
        bits and parameters are fp32 master weights, else 1."""
        return self.parameter_bytes / self.gradient_bytes if self.gradient_bytes > 0 else 1.0


@dataclass(frozen=True)
class ClusterView:
    """Ranks (one per GPU), the hosts they live on, the racks hosts sit in, server-only hosts, on a
    cluster of several datacenters (docs/wan.md) the hosts of each, and the ranks away for some steps."""

    rank_hosts: tuple[str, ...]
    hosts: Mapping[str, HostInfo]
    racks: Mapping[str, RackInfo]
    server_hosts: tuple[str, ...] = ()
    datacenters: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # datacenter -> its hosts
    absences: tuple[Absence, ...] = ()  # ranks away for some steps (policies.membership)

    @cached_property
    def membership(self) -> Membership:
        """Which ranks train at each step (every rank at every step unless `absences` say otherwise)."""
        return Membership(self.world_size, self.absences)

    @property
    def world_size(self) -> int:
        return len(self.rank_hosts)

    @property
    def worker_hosts(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for host in self.rank_hosts:
            seen.setdefault(host, None)
        return tuple(seen)

    def host_of(self, rank: int) -> str:
        return self.rank_hosts[rank]

    def rack_of(self, rank: int) -> Optional[str]:
        return self.hosts[self.rank_hosts[rank]].rack

    def datacenter_of(self, rank: int) -> Optional[str]:
        host = self.rank_hosts[rank]
        return next((name for name, hosts in self.datacenters.items() if host in hosts), None)

    def local_groups(self, level: str) -> list[tuple[int, ...]]:
        """Ranks grouped by shared `level` ('rank': each alone, 'host', 'rack' or 'datacenter'), in order
        of first rank.

        Raises ValueError when the cluster has no such level (e.g. 'rack' on a star).
        """
        if level == "rank":
            return [(rank,) for rank in range(self.world_size)]
        if level == "host":
            key = self.host_of
        elif level == "rack":
            if not self.racks:
                raise ValueError("this cluster has no racks")
            key = self.rack_of  # type: ignore[assignment]
        elif level == "datacenter":
            if not self.datacenters:
                raise ValueError("this cluster is one datacenter (topology multi_datacenter has several)")
            where = {host: name for name, hosts in self.datacenters.items() for host in hosts}
            key = lambda rank: where.get(self.rank_hosts[rank])  # type: ignore[assignment]  # noqa: E731
        else:
            raise ValueError(f"unknown level {level!r}; allowed: rank, host, rack, datacenter")
        groups: dict[object, list[int]] = {}
        for rank in range(self.world_size):
            groups.setdefault(key(rank), []).append(rank)
        return [tuple(ranks) for ranks in groups.values()]
