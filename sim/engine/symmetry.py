"""Host symmetry: when every GPU host runs the same program on the same hardware, simulate one host.

On a homogeneous cluster with packed placement, a host-symmetric policy (`Policy.host_symmetric`: ring,
hierarchical at host level) gives host k's ranks the programs of host 0's with every rank shifted by
k x g (g ranks a host). Then every rank's timeline equals that of the rank at the same position on
host 0, and the run needs only host 0's workers:

- a collective whose group holds host 0's ranks (the world's ring, a hierarchical cross group) launches
  when those ranks have arrived, each standing for its images on every other host, and moves the
  whole group's bytes over every link, as in the general path;
- a collective whose group lies on one other host (its local reduce-scatter) is the image of host 0's
  and is not run: its flows stay on that host's GPU-host links, which no other host's traffic crosses.

Why the rates stay exact: the collectives of the pipelined and NCCL models are coupled transfers
(one rate for all their sub-flows, `sim.engine.collectives`). Every cross-host transfer crosses each
host's GPU-host links as it crosses host 0's, so host k's links, in the general path, fill exactly
when host 0's do and freeze the same rates; without host k's local flows they fill later or never,
and the rate host 0's links set is unchanged. Network links (NICs, uplinks) carry the same flows on
both paths. The stepwise model's ring steps are separate flows that would see the missing local
flows, so it runs the general path, as does anything that makes hosts differ (`host_images` lists
them). `tests/test_symmetry.py` runs both paths on small clusters and compares every table.

The tables are expanded afterwards (`expand_iterations`, `expand_ops`): host k's rows are host 0's
with ranks shifted; an image group's op rows follow its host-0 group's, with group ids numbered the
way the general path numbers them (the images of a group finish right after it, in host order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import pandas as pd

from policies.base import Policy
from policies.ops import Group
from sim.cluster.routing import Router
from sim.cluster.topology import Cluster
from sim.config import Config
from sim.config.host_symmetry import config_reason


@dataclass
class HostImages:
    """`hosts` GPU hosts of `per_host` ranks each, host k holding ranks k*per_host .. (k+1)*per_host - 1;
    host 0's ranks are simulated and stand for the rest."""

    hosts: int
    per_host: int
    image_gids: set[int] = field(default_factory=set)  # op group ids given to host-0-local groups

    @property
    def representatives(self) -> range:
        return range(self.per_host)

    def quorum(self, group: Group) -> int:
        """How many of `group`'s members are simulated: the call launches when they have arrived."""
        return sum(1 for r in group.ranks if r < self.per_host)

    def is_local(self, group: Group) -> bool:
        """Does `group` lie on host 0 (so every other host runs an image of it)?"""
        return all(r < self.per_host for r in group.ranks)

    def describe(self) -> str:
        return f"1 of {self.hosts:,} hosts ({self.per_host} ranks) simulated; the others are its images"


def why_not_symmetric(config: Config, cluster: Cluster, policy: Policy, numerics: bool) -> Optional[str]:
    """Why a run cannot use host symmetry (None: it can)."""
    reason = config_reason(config, policy, numerics)
    if reason is not None:
        return reason
    hosts = [h for h in cluster.view.hosts.values() if h.ranks]
    if len(hosts) < 2:
        return "one GPU host"
    if cluster.capacity_traces:
        return "link capacity traces"
    return _uneven_hosts(cluster, hosts)


def _uneven_hosts(cluster: Cluster, hosts: list[Any]) -> Optional[str]:
    """Hosts that differ, or ranks not numbered host by host."""
    per_host = len(hosts[0].ranks)
    if any(len(h.ranks) != per_host for h in hosts):
        return "hosts hold different numbers of GPUs"
    if any(h.ranks != tuple(range(k * per_host, (k + 1) * per_host)) for k, h in enumerate(hosts)):
        return "ranks are not numbered host by host"
    if len({(h.intra_bytes_per_s, h.nic_bytes_per_s) for h in hosts}) > 1:
        return "hosts' links differ"
    return None


def host_images(
    config: Config, cluster: Cluster, policy: Policy, router: Router, numerics: bool
) -> Optional[HostImages]:
    """The run's host symmetry, or None when it must run the general path."""
    if why_not_symmetric(config, cluster, policy, numerics) is not None:
        return None
    hosts = [h for h in cluster.view.hosts.values() if h.ranks]
    per_host = len(hosts[0].ranks)
    gpus, links = cluster.rank_gpus[:per_host], cluster.links
    for a in gpus:  # a local group's flows must stay on its own host's GPU-host links
        for b in gpus:
            if any(links[i].kind != "intra" for i in router.path(a, b)):
                return None
    return HostImages(len(hosts), per_host)


def expand_iterations(frame: pd.DataFrame, images: HostImages) -> pd.DataFrame:
    """Host 0's iteration rows, and every other host's: the same with ranks shifted, sorted as the
    general path sorts them (by iteration, then rank)."""
    n = len(frame)
    out = frame.iloc[np.tile(np.arange(n), images.hosts)].reset_index(drop=True)
    out["rank"] = out["rank"].to_numpy() + np.repeat(np.arange(images.hosts), n) * images.per_host
    return out.sort_values(["iteration", "rank"], kind="stable", ignore_index=True)


def expand_ops(frame: pd.DataFrame, images: HostImages) -> pd.DataFrame:
    """Host 0's op rows and their images: a per-rank row for the same rank position on every host, a
    host-0-local group's row for its image group on every host (ids following its own)."""
    per_rank = frame["rank"].to_numpy() >= 0
    local = frame["group"].isin(images.image_gids).to_numpy()
    counts = np.where(per_rank | local, images.hosts, 1)
    index = np.repeat(np.arange(len(frame)), counts)
    offset = np.arange(len(index)) - np.repeat(np.cumsum(counts) - counts, counts)  # 0 .. count-1 per row
    out = frame.iloc[index].reset_index(drop=True)
    rank, group = out["rank"].to_numpy(), out["group"].to_numpy()
    out["rank"] = np.where(rank >= 0, rank + offset * images.per_host, rank)
    out["group"] = np.where(np.repeat(local, counts), group + offset, group)
    return out


def fill_image_links(link_bytes: np.ndarray, cluster: Cluster, images: HostImages) -> None:
    """Bytes carried by other hosts' GPU-host links: host 0's, position by position (their local flows
    were not run)."""
    graph, gpus = cluster.graph, cluster.rank_gpus
    for i in images.representatives:
        gpu = gpus[i]
        host = graph.nodes[gpu]["host"]
        out, back = graph[gpu][host]["link"], graph[host][gpu]["link"]
        for k in range(1, images.hosts):
            other = gpus[k * images.per_host + i]
            other_host = graph.nodes[other]["host"]
            link_bytes[graph[other][other_host]["link"]] = link_bytes[out]
            link_bytes[graph[other_host][other]["link"]] = link_bytes[back]
