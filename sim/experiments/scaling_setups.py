"""The hardware and training setup each published scaling row is simulated on (sim/experiments/scaling_all.py).

Written down from the systems' datasheets and the benchmarks' defaults, before any row was simulated,
and never adjusted to a result: which GPU, how many per host, the NICs NCCL uses between hosts, and the
gradient synchronization of PyTorch's DDP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SystemSetup:
    """One DGX system: its GPUs and the compute-fabric NICs NCCL uses across hosts."""

    gpu: str  # the GPU catalogue's name (sim/catalog/gpus.py)
    gpus_per_host: int
    nics_per_host: int  # compute-fabric NICs only: storage and management ports carry no NCCL traffic
    nic_gbps: float  # each NIC, per direction
    citation: str


# Keyed by the prefix of published_scaling.csv's `system` column; the longest matching prefix wins, so
# "DGX-2H 32GB" is a DGX-2 (the H is a higher-clocked 450 W V100; same NVSwitch and network).
SYSTEMS: dict[str, SystemSetup] = {
    "DGX-1": SystemSetup(
        "V100",
        8,
        4,
        100.0,
        "NVIDIA DGX-1 with Tesla V100 datasheet: 8x Tesla V100 (NVLink hybrid cube-mesh); network 4x IB EDR "
        "(100 Gb/s each) plus dual 10 GbE",
    ),
    "DGX-2": SystemSetup(
        "V100",
        16,
        8,
        100.0,
        "NVIDIA DGX-2 / DGX-2H datasheets: 16x Tesla V100 on NVSwitch; network 8x 100 Gb/s InfiniBand EDR / "
        "100 GigE plus dual 10/25 GbE",
    ),
    "DGX A100": SystemSetup(
        "A100",
        8,
        8,
        200.0,
        "NVIDIA DGX A100 datasheet: 8x A100 on NVSwitch; cluster network 8x single-port ConnectX-6 VPI "
        "200 Gb/s HDR InfiniBand; the dual-port storage ConnectX-6 left out",
    ),
}

# PyTorch DistributedDataParallel's defaults: NCCL ring all-reduce of gradient buckets of bucket_cap_mb=25
# (torch.nn.parallel.DistributedDataParallel's documented default), overlapped with backward.
POLICY = "ring"
BUCKET_MB = 25.0
# Multi-node rows ran on DGX SuperPOD-style clusters (Selene for the DGX A100 BERT rows): a non-blocking
# fat tree of InfiniBand switches, which one star switch stands for.
TOPOLOGY = "star"


def system_setup(system: str) -> SystemSetup:
    """The setup of a published `system` name (its longest matching prefix in SYSTEMS)."""
    matches = [prefix for prefix in SYSTEMS if system.startswith(prefix)]
    if not matches:
        raise ValueError(f"system {system!r} has no setup; known: {', '.join(SYSTEMS)}")
    return SYSTEMS[max(matches, key=len)]


def hosts_and_gpus(system: str, nodes: int, gpus: int) -> tuple[int, int]:
    """(hosts, GPUs per host) of a row: one host of `gpus` GPUs, or `nodes` full hosts of the system."""
    setup = system_setup(system)
    if nodes < 1 or gpus < nodes or gpus % nodes:
        raise ValueError(f"gpus {gpus} do not split over nodes {nodes}")
    per_host = gpus // nodes
    if per_host > setup.gpus_per_host or (nodes > 1 and per_host != setup.gpus_per_host):
        raise ValueError(
            f"gpus per node {per_host} on {system}: allowed up to {setup.gpus_per_host} on one node, "
            f"exactly {setup.gpus_per_host} per node across nodes"
        )
    return nodes, per_host


def cluster_section(system: str, nodes: int, gpus: int) -> dict[str, Any]:
    """The config's `cluster` section for `gpus` GPUs over `nodes` hosts of `system`."""
    setup = system_setup(system)
    hosts, per_host = hosts_and_gpus(system, nodes, gpus)
    return {
        "topology": TOPOLOGY,
        "hosts": hosts,
        "gpus_per_host": per_host,
        "gpu": setup.gpu,
        "nics_per_host": setup.nics_per_host,
        "nic_gbps": setup.nic_gbps,
    }
