"""NCCL's algorithms and protocols, and the latency figures of each combination.

A protocol is how a GPU hands data to its peer: LL stores 8-byte words that carry 4 bytes of data and
a flag (lowest latency, a fraction of the bandwidth), LL128 128-byte lines with 120 bytes of data (needs
NVLink ordering, so NCCL uses it on NVLink and InfiniBand with GPUDirect), Simple plain buffers behind
a fence (full bandwidth, the highest per-step latency). An algorithm is the pattern of steps: a ring
(2(p-1) steps for all-reduce), a double binary tree across hosts (a chain inside each), NVLink
SHARP (NVLS: the NVSwitch itself reduces, H100-class systems), or NVLS inside hosts joined by a tree
across them (NVLS-tree).

The figures are NCCL's own (`src/graph/tuning.cc` of NVIDIA/nccl, as of v2.23-2.30): a fixed cost per
collective and a cost per step by the kind of link the step crosses, the fraction of a channel's
bandwidth each protocol reaches, and the tree's correction by message size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "nvls_tree")
PROTOCOLS: tuple[str, ...] = ("ll", "ll128", "simple")


@dataclass(frozen=True)
class StepLatency:
    """Microseconds per collective (`base`) and per step over NVLink, PCIe and the network."""

    base: float
    nvlink: float
    pci: float
    net: float

    def hop(self, link: str) -> float:
        return float(getattr(self, link))


# (algorithm, protocol) -> latency; NCCL's baseLat and hwLat tables (microseconds). NVLS's NVLink figure
# replaces the base latency in NCCL; here it is the one step an NVLS all-reduce takes.
LATENCY_US: dict[tuple[str, str], StepLatency] = {
    ("ring", "ll"): StepLatency(6.6, 0.6, 1.0, 2.7),
    ("ring", "ll128"): StepLatency(14.0, 1.9, 2.5, 4.0),
    ("ring", "simple"): StepLatency(8.4, 3.4, 5.7, 14.0),
    ("tree", "ll"): StepLatency(6.8, 0.6, 1.0, 5.0),
    ("tree", "ll128"): StepLatency(14.0, 1.25, 1.9, 8.5),
    ("tree", "simple"): StepLatency(8.4, 4.0, 4.0, 14.0),
    ("nvls", "simple"): StepLatency(0.0, 25.0, 25.0, 18.0),
    ("nvls_tree", "simple"): StepLatency(0.0, 25.0, 25.0, 14.0),
}
NET_OVERHEAD_US = 1.0  # a ring step inside a host of a multi-host collective costs at least this (x3 for Simple)
# NCCL's tree all-reduce bandwidth correction by message size: index floor(log2(bytes / 64)), 0..23 (v2.29's
# table; earlier ones stop at 22). Trees read only indices below TREE_INDICES in every version (the 24th column
# serves NVLS-tree on Blackwell): ncclTopoGetAlgoTime's `logSize < 23`.
TREE_INDICES = 23
TREE_CORRECTION: dict[str, tuple[float, ...]] = {
    "ll": (1, 1, 1, 1, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 1, 1, 1, 1),
    "ll128": (1, 1, 1, 1, 1, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1, 1, 1),
    "simple": (
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.9,
        0.8,
        0.7,
        0.6,
        0.6,
        0.5,
        0.5,
        0.5,
        0.5,
        0.6,
        0.7,
        0.8,
        0.7,
        0.7,
        0.8,
        0.9,
        0.9,
        0.9,
    ),
}


def supported(algorithm: str, protocol: str) -> bool:
    """Whether NCCL runs `algorithm` with `protocol` (NVLS only with Simple)."""
    return (algorithm, protocol) in LATENCY_US


def bandwidth_factor(algorithm: str, protocol: str, hosts: int) -> float:
    """The fraction of the links' bandwidth NCCL's `protocol` reaches in `algorithm` (its tuning factors).

    Ring: LL half (its flags take half of every line), LL128 0.92 (120 of every 128 bytes), Simple all.
    Tree all-reduce: 0.92 of the ring's for its chain's forwarding, then LL 1/3.8 and LL128 7/9 inside
    one host or 120/128 across hosts."""
    if algorithm == "tree":
        return 0.92 * {"ll": 1 / 3.8, "ll128": 7 / 9 if hosts == 1 else 120 / 128, "simple": 1.0}[protocol]
    return {"ll": 0.5, "ll128": 0.92, "simple": 1.0}[protocol]  # NVLS and NVLS-tree: Simple only


def tree_correction(protocol: str, nbytes: float) -> float:
    """NCCL's correction of a tree all-reduce's bandwidth at `nbytes` (1 from 512 MiB: every version's
    ncclTopoGetAlgoTime applies it to trees only below index TREE_INDICES, whatever its table's length)."""
    index = int(math.log2(nbytes / 64)) if nbytes >= 64 else 0
    return TREE_CORRECTION[protocol][index] if index < TREE_INDICES else 1.0
