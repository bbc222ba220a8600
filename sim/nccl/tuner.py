"""Predict a collective's time under each NCCL algorithm and protocol, and pick one as NCCL's tuner does.

A collective's time is a latency (a fixed cost, NCCL's cost per step by the link the step crosses, the
network links' own latency, and the pipeline's fill) plus its bytes over the bandwidth its protocol
reaches. A ring's network steps are those on the path of the last chunk a rank receives
(`Shape.path_steps`: every host boundary), where NCCL's tables count one fewer per pass (`inter_steps`,
what it picks by). The fill: a ring moves each chunk in slices, and a step can forward a slice only once it has
arrived, so every step waits for one slice (`Slices`, in KB: the whole per-rank chunk when that is
smaller). That is why 16 MiB reaches half of the bus bandwidth 8 GiB does. NCCL picks by its own
tables, without the fill and with its own share of the bandwidth for a ring's LL (a quarter, or a
third: `Choice.tuner_seconds`); the time the engine runs adds the fill and uses LL's half (`seconds`).

`Shape` is what the engine knows of a collective (its members' placement, its ring's uncontended
rates); `choose` returns the `Choice` the engine runs as flows: the bytes to put on every path, a rate
cap, and the latency delivered after the bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.nccl.fabrics import Fabric, Slices
from sim.nccl.protocols import (
    ALGORITHMS,
    LATENCY_US,
    NET_OVERHEAD_US,
    PROTOCOLS,
    bandwidth_factor,
    supported,
    tree_correction,
)
from sim.nccl.trees import busiest_host_edges

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
# NCCL's factor on a multi-host Simple ring all-reduce's latency once channels fill (ncclTopoGetAlgoTime):
# 1.9 below compute capability 8.0 in every version; from Ampere on 1.4 (v2.18 on; 1.9 before v2.17)
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4}


@dataclass(frozen=True)
class Shape:
    """A collective as NCCL's tuner sees it.

    `bus_rate`: bytes/s one ring hop gets with the ring alone on the network (its slowest link's
    capacity over the ring hops that share it; for all-to-all, one pair's). `host_rate`, `net_rate`:
    the same for the ring's hops inside hosts and between hosts alone (algorithms load them
    differently). `crossings`: ring hops that leave a host. `network_s`: the latency of the network
    links (cables and switches) of the slowest hop between hosts, paid on top of NCCL's per-step
    figure (which covers a hop's NVLink, PCIe and NICs). `nvls_rate`: bytes/s each GPU reaches into
    and out of its NVSwitch with NVLS (0: the members cannot use NVLS). `tree_rate`: bytes/s each
    edge of NCCL's two trees between hosts gets with the trees alone, `tree_fanout` the most edges one
    host has (sim/nccl/trees.py); 0 where the trees' own paths are not known: then the NICs are
    taken as the only network links, shared by the busiest host's edges."""

    kind: str
    nbytes: float
    ranks: int
    hosts: int
    ranks_per_host: int
    bus_rate: float
    crossings: int = 0
    network_s: float = 0.0
    host_rate: float = math.inf
    net_rate: float = math.inf
    nvls_rate: float = 0.0
    tree_rate: float = 0.0
    tree_fanout: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"collective kind {self.kind!r}; allowed: {', '.join(KINDS)}")
        if self.ranks < 2 or self.bus_rate <= 0 or self.nbytes < 0:
            raise ValueError(f"{self}: a collective needs 2+ ranks, a positive rate and nbytes >= 0")

    @property
    def steps(self) -> int:
        """Ring steps: 2(p-1) for all-reduce, p-1 for reduce-scatter and all-gather, 1 for all-to-all."""
        if self.kind == "all_reduce":
            return 2 * (self.ranks - 1)
        return 1 if self.kind == "all_to_all" else self.ranks - 1

    @property
    def busiest_tree_host(self) -> int:
        """Flows each way through the NICs of the host with the most tree edges."""
        return self.tree_fanout or busiest_host_edges(self.hosts)

    @property
    def tree_edge_rate(self) -> float:
        """Bytes/s one tree edge between hosts gets with the trees alone on the network."""
        return self.tree_rate if self.tree_fanout else self.net_rate / self.busiest_tree_host

    @property
    def inter_steps(self) -> int:
        """Of the steps, those a chunk takes between hosts on its way round (NCCL's count)."""
        passes = 2 if self.kind == "all_reduce" else 1
        return passes * max(self.crossings - 1, 0) if self.kind != "all_to_all" else int(self.hosts > 1)

    @property
    def path_steps(self) -> int:
        """Of the steps, those between hosts on the path of the last chunk a rank receives, which the
        collective waits for. In NCCL's ring kernels (runRing of src/device/all_gather.h, all_reduce.h)
        a rank's last chunk comes from its next rank round every hop but the rank's own outgoing one;
        all-reduce's starts one rank further on and goes round twice, skipping two neighbouring hops.
        So the slowest rank's path crosses every host boundary: hosts (all-reduce 2 x hosts) with 3+
        GPUs per host, where NCCL's tables count one boundary fewer per pass (`inter_steps`)."""
        if self.kind == "all_to_all":
            return int(self.hosts > 1)
        if self.kind == "all_reduce":  # of the two skipped hops, max(0, 3 - g) cross with g GPUs per host
            return max(2 * self.crossings - max(0, 3 - self.ranks_per_host), 0)
        return max(self.crossings - (1 if self.ranks_per_host == 1 else 0), 0)


@dataclass(frozen=True)
class Choice:
    """How the engine runs a collective: every path carries `wire_per_path` bytes at no more than
    `cap` bytes/s (its paths between hosts `net_wire_per_path` at no more than `net_cap`), delivered
    `latency_s` after its bytes; `seconds` is the time with nothing else on the network."""

    algorithm: str
    protocol: str
    latency_s: float
    wire_per_path: float
    cap: float
    seconds: float
    tuner_seconds: float  # NCCL's own estimate, which leaves the pipeline's fill out: what it picks by
    net_wire_per_path: float  # bytes on each path between hosts (a ring's hop, a tree's edge one way)
    terms: Latency  # NCCL's latency_s apart from the fitted slices (a straggler's added delay is not in it)
    transfer_s: float  # seconds - latency_s: the bytes at the rate
    net_cap: float = math.inf  # the rate cap of each path between hosts (a tree's: cap over its fan-out)


@dataclass(frozen=True)
class Latency:
    """A choice's latency, apart from the fitted constants (`Slices`) that enter it: NCCL's base
    and per-step figures (us), and the pipeline's fill, which waits for a slice per step. Fields
    are floats, or arrays of them with one entry per collective (the fit evaluates many at once)."""

    slice: str  # which of the Slices a step inside a host waits for (ll, ll128, simple or nvls)
    base_us: Any  # NCCL's base latency
    intra_us: Any  # the steps inside hosts, each at its link's figure
    net_us: Any  # the steps between hosts, each at the network's figure (links' own latency included)
    fill_steps: Any  # steps that wait for a slice inside a host
    fill_rate: Any  # bytes/s such a slice arrives at
    net_steps: Any  # steps that wait for a network slice
    net_rate: Any  # bytes/s a network slice arrives at (1 where there are no such steps)
    chunk: Any  # a rank's bytes: no step waits for more
    transport_us: Any = 0.0  # the network steps' cost beyond NCCL's IB figure (sim/nccl/transports.py), unscaled

    def seconds(self, slices: Slices, slice_kb: Any = None) -> Any:
        """The latency under `slices` (`slice_kb`: the slice each entry waits for, else the named one)."""
        kb = getattr(slices, self.slice) if slice_kb is None else slice_kb
        fill = self.fill_steps * np.minimum(kb * 1e3, self.chunk) / self.fill_rate
        fill = fill + self.net_steps * np.minimum(slices.network * 1e3, self.chunk) / self.net_rate
        hops = self.intra_us * slices.step_scale + self.net_us * slices.network_scale
        return (slices.launch + self.base_us * slices.step_scale + hops + self.transport_us) * 1e-6 + fill


def predict(shape: Shape, fabric: Fabric, algorithm: str, protocol: str) -> Choice | None:
    """The cost of running `shape` with `algorithm` and `protocol`; None where NCCL cannot."""
    if not supported(algorithm, protocol) or not _applies(shape, algorithm):
        return None
    if not fabric.transport.allows(algorithm, protocol, shape.hosts):  # transport hook: what the plugin allows
        return None
    if shape.kind == "all_to_all":  # NCCL runs it as point-to-point sends (Simple), not through its tuner
        if protocol != "simple" or algorithm != "ring":
            return None
    lat = LATENCY_US[(algorithm, protocol)]
    n, p, hosts = shape.nbytes, shape.ranks, shape.hosts
    factor = bandwidth_factor(algorithm, protocol, hosts)
    if algorithm == "tree":
        factor *= tree_correction(protocol, n)
    cap = fabric.ll_max(hosts) / factor if protocol == "ll" else math.inf  # LL's ceiling is on the payload
    intra = lat.hop("nvlink" if fabric.ring_gbs else "pci")  # GPUs without NVLink talk over PCIe
    # one GPU per host: NCCL prices every network step as a tree's
    net = (LATENCY_US[("tree", protocol)].net if shape.ranks_per_host == 1 else lat.net) + shape.network_s * 1e6
    net_steps = 0.0
    tables_steps: tuple[float, float] | None = None  # NCCL's own (intra, net) step counts where they differ
    if algorithm == "nvls":
        rate = cap = min(cap, shape.nvls_rate)
        # every GPU sends n to the switch and gets n back; a slice crosses the switch twice in each
        # of the two phases (reduce, then multicast)
        depth, payload, net_payload, intra_steps = 4, n, 0.0, 1.0
    elif algorithm == "nvls_tree":
        # NVLS inside every host (n into and out of each GPU), NCCL's two trees of hosts over the NICs
        # (half of the data each: n/2 on every edge each way); NCCL caps its bus bandwidth per NVLS channel
        levels = int(math.log2(hosts))
        bus_cap = fabric.nvls_tree_bus_gbs[0 if hosts == 2 else 1] * 1e9
        rate = cap = min(cap, shape.nvls_rate, bus_cap * p / (2 * (p - 1)))
        depth, payload, net_payload, intra_steps, net_steps = (
            4 + 2 * levels,
            n,
            n / 2,
            1.0,
            2.0 * levels,
        )
    elif algorithm == "tree":
        rate = shape.bus_rate
        levels = int(math.log2(hosts))
        depth = 2 * (shape.ranks_per_host - 1 + levels)
        # up the tree and down again: a GPU's link carries 2n each way (its chain sends n to its parent,
        # then n to its child); between hosts each tree carries half of the data, n/2 on every edge
        # each way (a host's NICs: n between two hosts, up to 2n in deeper trees, sim/nccl/trees.py)
        payload, net_payload = 2 * n, n / 2
        intra_steps, net_steps = 2.0 * (shape.ranks_per_host - 1), 2.0 * levels
    else:
        rate = shape.bus_rate
        depth = shape.steps
        hop_bytes = depth * n / p  # all-to-all: a pair's share, the bus rate being a pair's
        # across hosts NCCL rotates its channels' rings, so that every GPU's NVLink carries the ring's
        # NVLink hops in turn: (p - crossings) / p of a hop's bytes each; the NICs a whole hop's
        rotated = hop_bytes * (p - shape.crossings) / p if shape.kind != "all_to_all" else hop_bytes
        payload, net_payload = rotated, hop_bytes
        if hosts > 1:  # a step inside a host waits on the proxy thread that drives the network
            intra = max(intra, NET_OVERHEAD_US * (3 if protocol == "simple" else 1))
        net_steps = float(shape.path_steps)
        intra_steps = depth - net_steps
        tables_steps = (depth - shape.inter_steps, float(shape.inter_steps))
        if hosts > 1 and protocol == "simple" and shape.kind == "all_reduce" and n >= 64 * p * fabric.channels:
            intra, net = intra * RING_PLATEAU[fabric.arch], net * RING_PLATEAU[fabric.arch]
    wire, net_wire = payload / factor, net_payload / factor
    net_rate, net_cap = shape.net_rate, cap
    if algorithm in ("tree", "nvls_tree"):  # a ceiling on the NICs' bus bandwidth, shared by their edges
        net_rate, net_cap = shape.tree_edge_rate, cap / shape.busiest_tree_host
    if hosts > 1 and shape.kind != "all_to_all":
        transfer = max(wire / min(shape.host_rate, cap), net_wire / min(net_rate, net_cap))
    else:
        net_wire = wire
        transfer = wire / min(rate, cap) if wire else 0.0
    # the pipeline's fill: every step waits for a slice, or for the rank's whole chunk if smaller, at
    # the rate of the link that step crosses: a step inside a host at its NVLink's, a network step
    # (its own slice) at the NICs'. Only the steady stream runs at the slowest link's pace; pricing
    # every step's slice at it would idle a slow uplink for most of a large collective.
    inside = algorithm in ("ring", "tree") and hosts > 1 and shape.kind != "all_to_all"
    step_us, tuner_us = fabric.transport.step_latency_us(protocol)  # transport hook: its cost per network step
    fill_rate = shape.host_rate if inside and math.isfinite(shape.host_rate) else rate
    terms = Latency(
        "nvls" if algorithm == "nvls" else protocol,
        lat.base,
        intra_steps * intra,
        net_steps * net,
        depth - net_steps,
        min(fill_rate, cap) * factor,
        net_steps,
        min(shape.net_rate, cap) * factor if net_steps else 1.0,
        n / p,
        net_steps * step_us,
    )
    latency = float(terms.seconds(fabric.slices))
    t_intra, t_net = tables_steps or (intra_steps, net_steps)
    estimate = (lat.base + t_intra * intra + t_net * (net + tuner_us)) * 1e-6 + _tables_transfer(
        shape, fabric, algorithm, protocol, transfer
    )
    return Choice(
        algorithm, protocol, latency, wire, cap, latency + transfer, estimate, net_wire, terms, transfer, net_cap
    )


def _tables_transfer(shape: Shape, fabric: Fabric, algorithm: str, protocol: str, transfer: float) -> float:
    """The transfer time NCCL's own tables give: a ring's LL at a quarter of the links' bandwidth (a
    third for one host's all-gather and reduce-scatter), where the time uses LL's half.

    That is NCCL's share before v2.21 (v2.21 on: a half). It is kept because this tuner's rate is the
    NVLink figure, below NCCL's nChannels x bwIntra on one host: with a half, one host of H100s picks LL
    for 4 MiB all-gathers (the fitted table's worst row goes from 12.5% to 24%). Across hosts LL's
    ceiling binds under either share."""
    if algorithm != "ring" or protocol != "ll" or shape.kind == "all_to_all":
        return transfer
    tables = 0.25 if shape.hosts > 1 or shape.kind == "all_reduce" else 1 / 3
    rate = min(shape.bus_rate, shape.host_rate, shape.net_rate)
    ceiling = fabric.ll_max(shape.hosts)
    return transfer * min(0.5 * rate, ceiling) / min(tables * rate, ceiling)


def _applies(shape: Shape, algorithm: str) -> bool:
    if algorithm == "tree":  # NCCL's trees span hosts; inside one host a ring is as fast
        return shape.kind == "all_reduce" and shape.hosts > 1
    if algorithm == "nvls":
        return shape.kind == "all_reduce" and shape.hosts == 1 and shape.nvls_rate > 0
    if algorithm == "nvls_tree":  # NVLS across hosts needs SHARP switches (CollNet): a tree instead
        return shape.kind == "all_reduce" and shape.hosts > 1 and shape.nvls_rate > 0
    return True


def ranked(shape: Shape, fabric: Fabric, algorithm: str = "auto", protocol: str = "auto") -> list[Choice]:
    """Every (algorithm, protocol) allowed that can run `shape`, fastest first by NCCL's own estimate
    (`Choice.tuner_seconds`). A forced algorithm that cannot run `shape` falls back to the ring (as NCCL
    does when NCCL_ALGO names one it cannot use)."""
    algorithms = ALGORITHMS if algorithm == "auto" else (algorithm,)
    protocols = PROTOCOLS if protocol == "auto" else (protocol,)
    options = [c for a in algorithms for p in protocols if (c := predict(shape, fabric, a, p)) is not None]
    if not options:
        fallback = [c for p in protocols if (c := predict(shape, fabric, "ring", p)) is not None]
        options = fallback or [c for p in PROTOCOLS if (c := predict(shape, fabric, "ring", p)) is not None]
    return sorted(options, key=lambda c: c.tuner_seconds)


def choose(shape: Shape, fabric: Fabric, algorithm: str = "auto", protocol: str = "auto") -> Choice:
    """The (algorithm, protocol) NCCL's tuner would pick among those allowed: the first of `ranked`."""
    return ranked(shape, fabric, algorithm, protocol)[0]
