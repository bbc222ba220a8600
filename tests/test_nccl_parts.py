"""Pins of the NCCL model's parts (sim/nccl/protocols.py, tuner.py, fabrics.py), each expected figure
worked by hand from NCCL's own tables in `src/graph/tuning.cc` of NVIDIA/nccl (v2.21-v2.28.3, where
syncsim's tables come from) and written out as arithmetic here, never taken from the code under test.

Every test's id names the part it pins (a protocol factor, the tree's depth, a latency term, the
tuner's LL share, the one-GPU-per-host network figure...), so that a change to one of them fails a
test that says which. The shapes are named as a reader would say them; their rates are stated in
`SHAPES` (per-direction NVLink, and the NICs' payload rate at NCCL's 94% of the line rate).
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest

from sim.nccl.fabrics import Slices, fabric_of
from sim.nccl.protocols import LATENCY_US, TREE_CORRECTION, bandwidth_factor, supported, tree_correction
from sim.nccl.tuner import Latency, Shape, choose, predict

KiB, MiB, GiB = 2**10, 2**20, 2**30
NETWORK_US = 1.0  # the cables' and switches' latency between two hosts in every shape across hosts


def _one_host(kind: str, nbytes: int, gpus: int, nvlink_gbs: float, nvls_gbs: float = 0.0) -> Shape:
    rate = nvlink_gbs * 1e9
    return Shape(kind, nbytes, gpus, 1, gpus, rate, host_rate=rate, nvls_rate=nvls_gbs * 1e9)


def _across(
    kind: str, nbytes: int, hosts: int, gpus: int, nvlink_gbs: float, nic_gbs: float, nvls: float = 0.0
) -> Shape:
    """`hosts` hosts of `gpus` GPUs each, a ring crossing between hosts once per host."""
    nvlink, nic = nvlink_gbs * 1e9, nic_gbs * 1e9
    return Shape(
        kind,
        nbytes,
        hosts * gpus,
        hosts,
        gpus,
        min(nvlink, nic),
        crossings=hosts,
        network_s=NETWORK_US * 1e-6,
        host_rate=nvlink if gpus > 1 else math.inf,  # one GPU per host: no ring hop inside a host
        net_rate=nic,
        nvls_rate=nvls * 1e9,
    )


# NVLink per direction as NCCL counts it (topo.h): A100 12 links x 20 GB/s, H100 18 x 20.6, V100 6 x 20.
# NICs: 8 x 200 Gb/s = 200 GB/s, of which NCCL moves 94%: 188 GB/s; 8 x 400 Gb/s: 376 GB/s; 1 x 100 Gb/s: 11.75 GB/s.
SHAPES: dict[str, Shape] = {
    "8xA100 one host, 1 MiB all_reduce": _one_host("all_reduce", MiB, 8, 240.0),
    "8xA100 one host, 8 MiB all_reduce": _one_host("all_reduce", 8 * MiB, 8, 240.0),
    "8xA100 one host, 256 MiB all_reduce": _one_host("all_reduce", 256 * MiB, 8, 240.0),
    "8xA100 one host, 64 KiB all_gather": _one_host("all_gather", 64 * KiB, 8, 240.0),
    "8xA100 one host, 64 KiB reduce_scatter": _one_host("reduce_scatter", 64 * KiB, 8, 240.0),
    "8xV100 one host, 64 KiB all_gather": _one_host("all_gather", 64 * KiB, 8, 120.0),
    "8xH100 one host, 64 KiB all_reduce": _one_host("all_reduce", 64 * KiB, 8, 370.8, 275.0),
    "8xH100 one host, 1 MiB all_reduce": _one_host("all_reduce", MiB, 8, 370.8, 275.0),
    "8xH100 one host, 1 GiB all_reduce": _one_host("all_reduce", GiB, 8, 370.8, 275.0),
    "2 hosts x 8 A100, 8 NICs, 1 MiB all_reduce": _across("all_reduce", MiB, 2, 8, 240.0, 188.0),
    "2 hosts x 8 A100, 8 NICs, 1 MiB all_gather": _across("all_gather", MiB, 2, 8, 240.0, 188.0),
    "4 hosts x 8 A100, 8 NICs, 1 MiB all_reduce": _across("all_reduce", MiB, 4, 8, 240.0, 188.0),
    "2 hosts x 8 H100, 8 NICs, 16 KiB all_reduce": _across("all_reduce", 16 * KiB, 2, 8, 370.8, 376.0, 275.0),
    "2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce": _across("all_reduce", 256 * MiB, 2, 8, 370.8, 376.0, 275.0),
    "16 hosts x 1 V100, 4 KiB all_reduce": _across("all_reduce", 4 * KiB, 16, 1, 120.0, 11.75),
    "16 hosts x 1 V100, 64 MiB all_reduce": _across("all_reduce", 64 * MiB, 16, 1, 120.0, 11.75),
    "2 hosts x 8 V100, 1 NIC, 64 MiB all_reduce": _across("all_reduce", 64 * MiB, 2, 8, 120.0, 11.75),
}
GPU = {name: re.search(r"[AHV]100", name).group() for name in SHAPES}  # type: ignore[union-attr]


def _choice(name: str, algorithm: str, protocol: str):  # type: ignore[no-untyped-def]
    choice = predict(SHAPES[name], fabric_of(GPU[name]), algorithm, protocol)
    assert choice is not None, f"{algorithm}/{protocol} cannot run {name}"
    return choice


# --- protocols.py: NCCL's tables ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("algorithm", "protocol", "hosts", "expected"),
    [
        # tuning.cc: ring LL busBw * .5; ring LL128 busBw * 0.92 ("120.0/128.0", rounded); Simple untouched
        ("ring", "ll", 1, 0.5),
        ("ring", "ll", 4, 0.5),
        ("ring", "ll128", 2, 0.92),
        ("ring", "simple", 2, 1.0),
        # tree all-reduce: busBw * .92 first, then LL * 1.0/3.8, LL128 * (nNodes == 1 ? 7.0/9.0 : 120.0/128.0)
        ("tree", "ll", 2, 0.92 / 3.8),
        ("tree", "ll128", 1, 0.92 * 7 / 9),
        ("tree", "ll128", 2, 0.92 * 120 / 128),
        ("tree", "ll128", 16, 0.92 * 120 / 128),
        ("tree", "simple", 4, 0.92),
        ("nvls", "simple", 1, 1.0),
        ("nvls_tree", "simple", 2, 1.0),
    ],
    ids=[
        "ring-ll-half",
        "ring-ll-half-across-hosts",
        "ring-ll128-120/128",
        "ring-simple-whole",
        "tree-ll-1/3.8",
        "tree-ll128-one-host-7/9",
        "tree-ll128-across-hosts-120/128",
        "tree-ll128-16-hosts-120/128",
        "tree-simple-0.92",
        "nvls-simple-whole",
        "nvls_tree-simple-whole",
    ],
)
def test_protocol_bandwidth_factor(algorithm: str, protocol: str, hosts: int, expected: float) -> None:
    got = bandwidth_factor(algorithm, protocol, hosts)
    assert got == pytest.approx(expected, rel=1e-12), f"bandwidth_factor({algorithm}, {protocol}, hosts={hosts})"


# NCCL's baseLat and hwLat (NVLink, PCI, NET rows), tuning.cc v2.21.5 to v2.28.3: (base, nvlink, pci, net) in us.
# NVLS has no base latency in NCCL: its NVLink figure (25, 23 before v2.21) is the latency.
NCCL_LATENCY_US = {
    ("ring", "ll"): (6.6, 0.6, 1.0, 2.7),
    ("ring", "ll128"): (14.0, 1.9, 2.5, 4.0),
    ("ring", "simple"): (8.4, 3.4, 5.7, 14.0),
    ("tree", "ll"): (6.8, 0.6, 1.0, 5.0),
    ("tree", "ll128"): (14.0, 1.25, 1.9, 8.5),
    ("tree", "simple"): (8.4, 4.0, 4.0, 14.0),
    ("nvls", "simple"): (0.0, 25.0, 25.0, 18.0),  # NCCL's PCI figure for NVLS is 0 (NVLS needs NVLink): unused
    ("nvls_tree", "simple"): (0.0, 25.0, 25.0, 14.0),  # v2.28.9 raised the network figure to 20.9
}


@pytest.mark.parametrize("key", list(NCCL_LATENCY_US), ids=[f"latency-table-{a}-{p}" for a, p in NCCL_LATENCY_US])
def test_latency_table_is_nccls(key: tuple[str, str]) -> None:
    entry = LATENCY_US[key]
    assert (entry.base, entry.nvlink, entry.pci, entry.net) == NCCL_LATENCY_US[key], f"LATENCY_US[{key}]"


def test_latency_table_has_nvls_with_simple_only() -> None:
    """tuning.cc skips NVLS and NVLS-tree with any protocol but Simple."""
    assert set(LATENCY_US) == set(NCCL_LATENCY_US)
    assert not supported("nvls", "ll") and not supported("nvls_tree", "ll128") and supported("tree", "ll128")


# treeCorrectionFactor of tuning.cc, index floor(log2(bytes/64)): v2.30's 24 columns (up to v2.28 the first 23;
# NCCL's trees read only indices < 23 in every version, the 24th is for NVLS-tree on Blackwell)
# fmt: off
NCCL_TREE_CORRECTION = {
    "ll": (1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1, 1),
    "ll128": (1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1, 1),
    "simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
}
# fmt: on


@pytest.mark.parametrize(
    "protocol", list(NCCL_TREE_CORRECTION), ids=[f"tree-correction-table-{p}" for p in NCCL_TREE_CORRECTION]
)
def test_tree_correction_table_is_nccls(protocol: str) -> None:
    got = TREE_CORRECTION[protocol]
    assert len(got) == 24, f"TREE_CORRECTION[{protocol}] has {len(got)} entries"
    for index, (value, expected) in enumerate(zip(got, NCCL_TREE_CORRECTION[protocol])):
        assert value == expected, f"TREE_CORRECTION[{protocol}][{index}] (~{64 * 2**index} bytes)"


@pytest.mark.parametrize(
    ("protocol", "nbytes", "expected"),
    [
        ("simple", 64, 0.9),  # log2(64/64) = 0
        ("simple", 100, 0.9),  # floor(log2(100/64)) = 0
        ("ll", 32, 1.0),  # under 64 bytes: index 0 here, none in NCCL (log2i(0) = -1): 1.0 for LL either way
        ("ll", KiB, 0.9),  # log2(1024/64) = 4
        ("ll128", 4 * KiB, 0.8),  # log2(4096/64) = 6
        ("ll", MiB, 0.5),  # log2(2^20/2^6) = 14
        ("ll128", MiB, 0.6),  # 14
        ("simple", MiB, 0.5),  # 14
        ("simple", 64 * MiB, 0.8),  # log2(2^26/2^6) = 20
        ("simple", 256 * MiB, 0.9),  # 22: the last NCCL applies
        ("simple", 512 * MiB, 1.0),  # 23: in v2.29's table (0.9), but trees stop at logSize < 23
        ("ll128", 768 * MiB, 1.0),  # floor(log2(768 MiB / 64)) = 23
        ("simple", 2 * GiB, 1.0),  # 25: past the table, no correction
    ],
    ids=[
        "tree-correction-simple-64B-index-0",
        "tree-correction-simple-100B-floor",
        "tree-correction-ll-32B-below-64",
        "tree-correction-ll-1KiB-index-4",
        "tree-correction-ll128-4KiB-index-6",
        "tree-correction-ll-1MiB-index-14",
        "tree-correction-ll128-1MiB-index-14",
        "tree-correction-simple-1MiB-index-14",
        "tree-correction-simple-64MiB-index-20",
        "tree-correction-simple-256MiB-index-22",
        "tree-correction-simple-512MiB-index-23-unread",
        "tree-correction-ll128-768MiB-index-23-unread",
        "tree-correction-simple-2GiB-past-table",
    ],
)
def test_tree_correction_by_size(protocol: str, nbytes: int, expected: float) -> None:
    assert tree_correction(protocol, nbytes) == expected, f"tree_correction({protocol}, {nbytes})"


# --- fabrics.py: per-GPU constants ----------------------------------------------------------------------


FABRIC_CONSTANTS = [
    # topo.h: SM70_NVLINK_BW 20.0, SM80 20.0, SM90 20.6 GB/s per link; 6, 12 and 18 links
    ("V100", "ring_gbs", 6 * 20.0),
    ("A100", "ring_gbs", 12 * 20.0),
    ("H100", "ring_gbs", 18 * 20.6),
    ("H200", "ring_gbs", 18 * 20.6),
    ("B200", "ring_gbs", 18 * 40.1),  # SM100_NVLINK_BW 40.1, NVLink 5's 18 links
    # llMaxBws of tuning.cc: rows Volta-N1/Intel-N2/Intel-N4, Ampere-N1/AMD-N2/AMD-N4, Hopper-N1/AMD-N2/AMD-N4.
    # One host reads the GPU's row; across hosts the host CPU's (index1 = nNodes == 1 ? compCapIndex : AMD ? 1 : 0),
    # so the Hopper row's N2/N4 are never read: DGX-1 (Intel) 39.0/20.4, DGX A100 (AMD) 22.5/19.0, H100 and H200
    # servers (Intel Xeon) 39.0/20.4
    ("V100", "ll_max_gbs", (39.0, 39.0, 20.4)),
    ("A100", "ll_max_gbs", (87.7, 22.5, 19.0)),
    ("H100", "ll_max_gbs", (141.0, 39.0, 20.4)),
    ("H200", "ll_max_gbs", (141.0, 39.0, 20.4)),
    ("B200", "ll_max_gbs", (2 * 141.0, 39.0, 20.4)),  # the Blackwell-N1 row; DGX B200 runs Intel Xeons
    ("B200", "nvls_gbs", 0.0),  # no published NVLS rate: left out
    # perChMaxNVLSTreeBws, Hopper N2 and N4, times 8 NVLS channels
    ("H100", "nvls_tree_bus_gbs", (8 * 57.7, 8 * 45.5)),
    ("A100", "nvls_tree_bus_gbs", (0.0, 0.0)),
    ("H100", "nvls_gbs", 275.0),
    ("A100", "nvls_gbs", 0.0),
    ("A100", "channels", 24),
    ("H100", "channels", 24),
    ("V100", "channels", 12),
    ("P100", "channels", 4),
    ("P100", "ring_gbs", 0.0),  # no NVLink figure: the configured link, and PCIe latencies
]


@pytest.mark.parametrize(
    ("gpu", "field", "expected"), FABRIC_CONSTANTS, ids=[f"fabric-{g}-{f}" for g, f, _ in FABRIC_CONSTANTS]
)
def test_fabric_constants(gpu: str, field: str, expected: object) -> None:
    got = getattr(fabric_of(gpu), field)
    assert got == pytest.approx(expected, rel=1e-12), f"fabric_of({gpu}).{field}"


LL_CEILINGS = [
    ("A100", 1, 87.7),
    ("A100", 2, 22.5),
    ("A100", 3, 19.0),
    ("A100", 16, 19.0),
    ("H100", 1, 141.0),
    ("H100", 2, 39.0),  # Intel-N2, not the Hopper row's 45.0 (never read across hosts)
    ("H100", 4, 20.4),  # Intel-N4, not 35.0
    ("V100", 2, 39.0),
    ("V100", 3, 20.4),
]


@pytest.mark.parametrize(
    ("gpu", "hosts", "gbs"), LL_CEILINGS, ids=[f"ll-ceiling-{g}-{h}-hosts" for g, h, _ in LL_CEILINGS]
)
def test_ll_ceiling_by_hosts(gpu: str, hosts: int, gbs: float) -> None:
    """tuning.cc's index2 = nNodes <= 2 ? nNodes - 1 : 2 into llMaxBws."""
    assert fabric_of(gpu).ll_max(hosts) == pytest.approx(gbs * 1e9, rel=1e-12), f"LL ceiling, {gpu} on {hosts} hosts"


# --- tuner.py: the tree's depth and the latency terms ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "algorithm", "fill_steps", "net_steps"),
    [
        # tuning.cc's tree latency: 2 * ((nRanks/nNodes - 1) * intraLat + log2i(nNodes) * interLat): a chain of
        # g - 1 NVLink steps in each host and log2(hosts) network levels, up and down again
        ("2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce", "tree", 2 * (8 - 1), 2 * 1),
        ("4 hosts x 8 A100, 8 NICs, 1 MiB all_reduce", "tree", 2 * (8 - 1), 2 * 2),
        ("16 hosts x 1 V100, 4 KiB all_reduce", "tree", 2 * (1 - 1), 2 * 4),
        # NVLS-tree: the switch's two phases, two crossings each (4), then 2 log2(hosts) network steps
        ("2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce", "nvls_tree", 4, 2 * 1),
    ],
    ids=["tree-depth-2x8", "tree-depth-4x8", "tree-depth-16x1-no-chain", "nvls_tree-depth-2x8"],
)
def test_tree_pipeline_depth(name: str, algorithm: str, fill_steps: int, net_steps: int) -> None:
    """The steps a tree's pipeline fills: `fill_steps` inside hosts, `net_steps` between them."""
    protocol = "simple" if algorithm == "nvls_tree" else "ll128"
    terms = _choice(name, algorithm, protocol).terms
    assert terms.fill_steps == fill_steps, f"{algorithm} depth inside hosts: fill_steps of {name}"
    assert terms.net_steps == net_steps, f"{algorithm} depth between hosts: net_steps of {name}"


# (shape, algorithm, protocol) -> the Latency fields, worked out from NCCL_LATENCY_US and the rules of
# tuning.cc, except for a ring's count of network steps: the time waits for the last chunk a rank receives,
# which (src/device/all_gather.h, all_reduce.h runRing) goes round every hop but the rank's own outgoing one
# (all-reduce: twice round, all but two neighbouring hops), so with 3+ GPUs per host it crosses every host
# boundary: nNodes network steps (all-reduce 2 nNodes) of nsteps, where NCCL's tables count nNodes - 1
# (2(nNodes - 1)); with one GPU per host every hop crosses, nsteps in all. Across hosts a ring's step inside
# a host costs at least the network overhead (1 us, 3 us for Simple); a Simple ring all-reduce across hosts
# with bytes >= 64 * channels * ranks pays the plateau factor 1.4; with one GPU per host every network step
# costs the tree's figure (ppn == 1). The network steps add NETWORK_US each. fill_rate is the payload rate of
# a slice crossing a step inside a host (min(rate, cap) * factor, at the host's NVLink rate for rings and
# trees across hosts, where only the steady stream runs at the NICs' pace);
# net_rate is 1 where no step crosses the network; chunk is a rank's bytes, n / p.
LATENCY_TERMS = [
    (
        "ring-ll-8xA100-1MiB-one-host",
        "8xA100 one host, 1 MiB all_reduce",
        ("ring", "ll"),
        # 14 steps at NVLink's 0.6; LL's payload rate: min(240 GB/s, its ceiling 87.7 / 0.5) * 0.5 = 87.7 GB/s
        Latency("ll", 6.6, 14 * 0.6, 0.0, 14, 87.7e9, 0, 1.0, MiB / 8),
    ),
    (
        "ring-simple-8xA100-1MiB-one-host",
        "8xA100 one host, 1 MiB all_reduce",
        ("ring", "simple"),
        Latency("simple", 8.4, 14 * 3.4, 0.0, 14, 240e9, 0, 1.0, MiB / 8),
    ),
    (
        "ring-ll128-8xA100-64KiB-all_gather-7-steps",
        "8xA100 one host, 64 KiB all_gather",
        ("ring", "ll128"),
        Latency("ll128", 14.0, 7 * 1.9, 0.0, 7, 0.92 * 240e9, 0, 1.0, 64 * KiB / 8),
    ),
    (
        "nvls-8xH100-1GiB-one-step-at-25us",
        "8xH100 one host, 1 GiB all_reduce",
        ("nvls", "simple"),
        Latency("nvls", 0.0, 25.0, 0.0, 4, 275e9, 0, 1.0, GiB / 8),
    ),
    (
        # 30 steps, 2 x 2 of them across; inside hosts max(0.6, net overhead 1.0) = 1.0; across 2.7 + 1.
        # Rates: ring 188 GB/s (the NICs), LL's 2-host ceiling 22.5 GB/s binds
        "ring-ll-2x8-A100-net-overhead-and-ring-net-figure",
        "2 hosts x 8 A100, 8 NICs, 1 MiB all_reduce",
        ("ring", "ll"),
        Latency("ll", 6.6, 26 * 1.0, 4 * (2.7 + NETWORK_US), 26, 22.5e9, 4, 22.5e9, MiB / 16),
    ),
    (
        # all-gather: 15 steps, the last chunk's path crosses both host boundaries (NCCL's tables: 1)
        "ring-ll128-2x8-A100-all_gather-two-net-steps",
        "2 hosts x 8 A100, 8 NICs, 1 MiB all_gather",
        ("ring", "ll128"),
        Latency("ll128", 14.0, 13 * 1.9, 2 * (4.0 + NETWORK_US), 13, 0.92 * 240e9, 2, 0.92 * 188e9, MiB / 16),
    ),
    (
        # 256 MiB >= 64 * 24 channels * 16 ranks: the plateau, 1.4 on the steps' latencies
        "ring-simple-2x8-H100-plateau-1.4",
        "2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce",
        ("ring", "simple"),
        Latency("simple", 8.4, 26 * 3.4 * 1.4, 4 * (14.0 + NETWORK_US) * 1.4, 26, 370.8e9, 4, 376e9, 256 * MiB / 16),
    ),
    (
        # 16 KiB < 64 * 24 * 16 = 24 KiB: no plateau; max(3.4, 3 x net overhead 1.0) = 3.4
        "ring-simple-2x8-H100-below-plateau",
        "2 hosts x 8 H100, 8 NICs, 16 KiB all_reduce",
        ("ring", "simple"),
        Latency("simple", 8.4, 26 * 3.4, 4 * (14.0 + NETWORK_US), 26, 370.8e9, 4, 376e9, 16 * KiB / 16),
    ),
    (
        "ring-ll128-2x8-H100-ring-net-figure",
        "2 hosts x 8 H100, 8 NICs, 16 KiB all_reduce",
        ("ring", "ll128"),
        Latency("ll128", 14.0, 26 * 1.9, 4 * (4.0 + NETWORK_US), 26, 0.92 * 370.8e9, 4, 0.92 * 376e9, KiB),
    ),
    (
        # one GPU per host: no step inside a host, all 30 across at the TREE's LL network figure 5.0 (not 2.7);
        # LL's 3+-host ceiling on V100 20.4 GB/s is above the NIC's 11.75
        "ring-ll-16x1-V100-one-gpu-per-host-tree-net-figure",
        "16 hosts x 1 V100, 4 KiB all_reduce",
        ("ring", "ll"),
        Latency("ll", 6.6, 0.0, 30 * (5.0 + NETWORK_US), 0, 0.5 * 11.75e9, 30, 0.5 * 11.75e9, 4 * KiB / 16),
    ),
    (
        "ring-ll128-16x1-V100-one-gpu-per-host-tree-net-figure",
        "16 hosts x 1 V100, 4 KiB all_reduce",
        ("ring", "ll128"),
        Latency("ll128", 14.0, 0.0, 30 * (8.5 + NETWORK_US), 0, 0.92 * 11.75e9, 30, 0.92 * 11.75e9, 4 * KiB / 16),
    ),
    (
        # Volta's plateau 1.9 (compute capability < 8.0), on 26 NVLink steps at 3.4 and 4 network steps at 14 + 1;
        # 64 MiB >= 64 * 12 channels * 16 ranks. NVLink 120 GB/s, the NIC 11.75
        "ring-simple-2x8-V100-plateau-1.9",
        "2 hosts x 8 V100, 1 NIC, 64 MiB all_reduce",
        ("ring", "simple"),
        Latency("simple", 8.4, 26 * 3.4 * 1.9, 4 * (14.0 + NETWORK_US) * 1.9, 26, 120e9, 4, 11.75e9, 4 * MiB),
    ),
    (
        # tree: 2(g-1) = 14 NVLink steps at 4.0, 2 log2(2) = 2 network steps at 14 + 1; factor .92 x correction
        # of Simple at 256 MiB (index 22: 0.9)
        "tree-simple-2x8-H100-latency",
        "2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce",
        ("tree", "simple"),
        Latency(
            "simple", 8.4, 14 * 4.0, 2 * (14.0 + NETWORK_US), 14, 0.92 * 0.9 * 370.8e9, 2, 0.92 * 0.9 * 376e9, 16 * MiB
        ),
    ),
    (
        # 4 hosts: 2 log2(4) = 4 network steps; LL128 NVLink 1.25, network 8.5; correction at 1 MiB 0.6
        "tree-ll128-4x8-A100-latency",
        "4 hosts x 8 A100, 8 NICs, 1 MiB all_reduce",
        ("tree", "ll128"),
        Latency(
            "ll128",
            14.0,
            14 * 1.25,
            4 * (8.5 + NETWORK_US),
            14,
            0.92 * 120 / 128 * 0.6 * 240e9,  # a chain's slice at NVLink's rate
            4,
            0.92 * 120 / 128 * 0.6 * 188e9,
            MiB / 32,
        ),
    ),
    (
        # 16 hosts of one GPU: no chain, 2 log2(16) = 8 network steps at tree LL's 5.0 + 1
        "tree-ll-16x1-V100-latency",
        "16 hosts x 1 V100, 4 KiB all_reduce",
        ("tree", "ll"),
        Latency(
            "ll",
            6.8,
            0.0,
            8 * (5.0 + NETWORK_US),
            0,
            11.75e9 * 0.92 / 3.8 * 0.7,
            8,
            11.75e9 * 0.92 / 3.8 * 0.7,
            4 * KiB / 16,
        ),
    ),
    (
        # NVLS inside each host (25 us), 2 log2(2) network steps at NVLS-tree's 14 + 1; its rate: min(NVLS 275,
        # the per-channel ceiling 8 x 57.7 GB/s of bus bandwidth as algorithm bandwidth, x 16 / 30)
        "nvls_tree-2x8-H100-latency",
        "2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce",
        ("nvls_tree", "simple"),
        Latency(
            "simple", 0.0, 25.0, 2 * (14.0 + NETWORK_US), 4, 8 * 57.7e9 * 16 / 30, 2, 8 * 57.7e9 * 16 / 30, 16 * MiB
        ),
    ),
]


# (kind, hosts, GPUs per host) -> (NCCL's nInterSteps, the network steps on the last chunk's path). A ring of
# hosts x g GPUs numbered host by host leaves each host once. NCCL: 2(nNodes - 1) for all-reduce, nNodes - 1
# otherwise. The path: all-gather skips one hop (the receiving rank's own outgoing one), so it crosses every
# boundary unless every hop crosses (g = 1: p - 1); all-reduce skips two neighbouring hops, inside a host when
# g >= 3 (2 nNodes), one of them a crossing when g = 2 (2 nNodes - 1), both when g = 1 (2 nNodes - 2).
RING_NETWORK_STEPS = [
    ("all_reduce", 2, 8, 2, 4),
    ("all_gather", 2, 8, 1, 2),
    ("reduce_scatter", 4, 8, 3, 4),
    ("all_reduce", 4, 8, 6, 8),
    ("all_reduce", 4, 3, 6, 8),
    ("all_reduce", 4, 2, 6, 7),
    ("all_reduce", 16, 1, 30, 30),
    ("all_gather", 16, 1, 15, 15),
    ("all_to_all", 2, 8, 1, 1),
]


@pytest.mark.parametrize(
    ("kind", "hosts", "gpus", "nccl", "path"),
    RING_NETWORK_STEPS,
    ids=[f"ring-network-steps-{k}-{h}x{g}" for k, h, g, _, _ in RING_NETWORK_STEPS],
)
def test_ring_network_steps_nccls_count_and_the_last_chunks_path(
    kind: str, hosts: int, gpus: int, nccl: int, path: int
) -> None:
    shape = _across(kind, MiB, hosts, gpus, 240.0, 188.0)
    assert shape.inter_steps == nccl, f"Shape.inter_steps (NCCL's nInterSteps) of {kind} on {hosts}x{gpus}"
    assert shape.path_steps == path, f"Shape.path_steps (the last chunk's network hops) of {kind} on {hosts}x{gpus}"


def test_ring_across_hosts_runs_its_paths_steps_and_picks_by_nccls() -> None:
    """2 hosts x 8 A100, 1 MiB all-gather, LL128: NCCL's estimate has 14 steps inside hosts at 1.9 us and 1
    across at 4.0 + 1 (plus 14 base); the time the engine runs has 13 and 2."""
    choice = _choice("2 hosts x 8 A100, 8 NICs, 1 MiB all_gather", "ring", "ll128")
    transfer = 15 / 16 * MiB / (0.92 * 188e9)
    assert choice.tuner_seconds == pytest.approx((14.0 + 14 * 1.9 + 1 * 5.0) * 1e-6 + transfer, rel=1e-9), (
        "tuner_seconds: NCCL's nInterSteps"
    )
    assert (choice.terms.intra_us, choice.terms.net_us) == pytest.approx((13 * 1.9, 2 * 5.0), rel=1e-12), (
        "Latency: the last chunk's path"
    )


@pytest.mark.parametrize(
    ("name", "algorithm_protocol", "expected"), [t[1:] for t in LATENCY_TERMS], ids=[t[0] for t in LATENCY_TERMS]
)
def test_latency_terms(name: str, algorithm_protocol: tuple[str, str], expected: Latency) -> None:
    terms = _choice(name, *algorithm_protocol).terms
    for field in dataclasses.fields(Latency):
        got, want = getattr(terms, field.name), getattr(expected, field.name)
        message = f"Latency.{field.name} of {algorithm_protocol} on {name}"
        assert got == (want if isinstance(want, str) else pytest.approx(want, rel=1e-9)), message


def test_latency_seconds_adds_launch_scaled_steps_and_a_slice_per_step() -> None:
    """Latency.seconds: launch + (base + intra) x step_scale + net x network_scale, plus each fill step's
    slice (or the chunk, if smaller) at fill_rate and each network step's at net_rate."""
    terms = Latency("ll", 6.6, 8.4, 7.4, 28, 20e9, 2, 10e9, 65536.0)
    slices = Slices(ll=10.0, launch=2.0, step_scale=0.5, network=100.0, network_scale=2.0)
    expected_us = 2.0 + (6.6 + 8.4) * 0.5 + 7.4 * 2.0 + 28 * 10e3 / 20e9 * 1e6 + 2 * 65536 / 10e9 * 1e6
    assert terms.seconds(slices) == pytest.approx(expected_us * 1e-6, rel=1e-12), (
        "Latency.seconds (chunk caps the network slice)"
    )
    assert terms.seconds(slices, slice_kb=1000.0) == pytest.approx(
        (expected_us - 28 * 10e3 / 20e9 * 1e6 + 28 * 65536 / 20e9 * 1e6) * 1e-6, rel=1e-12
    ), "Latency.seconds with slice_kb (chunk caps the fill slice)"


# --- tuner.py: NCCL's own estimate (tuner_seconds) and its pick -------------------------------------------

# (id, shape, algorithm, protocol, microseconds), all on one host (the transfer of one host is the payload
# over the protocol's rate). Ring payload per GPU: nsteps * n / p (all-reduce 14/8 n, all-gather 7/8 n).
# Before v2.21 tuning.cc took LL's bus bandwidth as busBw * (nNodes > 1 || allreduce ? 1/4 : 1/3), capped
# at llMaxBw: the share syncsim's tuner picks by (its time runs LL at a half).
ESTIMATES = [
    # 6.6 + 14 x 0.6 = 15 us; LL share a quarter: 240 / 4 = 60 GB/s (under the 87.7 ceiling)
    (
        "tuner-ll-share-quarter-8xA100-1MiB-all_reduce",
        "8xA100 one host, 1 MiB all_reduce",
        "ring",
        "ll",
        15.0 + 14 / 8 * MiB / 60e9 * 1e6,
    ),
    # H100: 370.8 / 4 = 92.7 GB/s, under 141
    (
        "tuner-ll-share-quarter-8xH100-1MiB-all_reduce",
        "8xH100 one host, 1 MiB all_reduce",
        "ring",
        "ll",
        15.0 + 14 / 8 * MiB / 92.7e9 * 1e6,
    ),
    # one host's all-gather and reduce-scatter: a third, 240 / 3 = 80 GB/s; 7 steps: 6.6 + 7 x 0.6 = 10.8 us
    (
        "tuner-ll-share-third-8xA100-64KiB-all_gather",
        "8xA100 one host, 64 KiB all_gather",
        "ring",
        "ll",
        10.8 + 7 / 8 * 64 * KiB / 80e9 * 1e6,
    ),
    (
        "tuner-ll-share-third-8xA100-64KiB-reduce_scatter",
        "8xA100 one host, 64 KiB reduce_scatter",
        "ring",
        "ll",
        10.8 + 7 / 8 * 64 * KiB / 80e9 * 1e6,
    ),
    # V100: a third of 120 = 40 GB/s passes LL's 39 GB/s ceiling: the ceiling
    (
        "tuner-ll-ceiling-8xV100-64KiB-all_gather",
        "8xV100 one host, 64 KiB all_gather",
        "ring",
        "ll",
        10.8 + 7 / 8 * 64 * KiB / 39e9 * 1e6,
    ),
    # LL128: 14 + 14 x 1.9 = 40.6 us, at 0.92 x 240 GB/s
    (
        "tuner-ring-ll128-8xA100-1MiB",
        "8xA100 one host, 1 MiB all_reduce",
        "ring",
        "ll128",
        40.6 + 14 / 8 * MiB / (0.92 * 240e9) * 1e6,
    ),
    # Simple: 8.4 + 14 x 3.4 = 56 us, at 240 GB/s
    (
        "tuner-ring-simple-8xA100-1MiB",
        "8xA100 one host, 1 MiB all_reduce",
        "ring",
        "simple",
        56.0 + 14 / 8 * MiB / 240e9 * 1e6,
    ),
    # NVLS: 25 us, n into and out of every GPU at 275 GB/s
    ("tuner-nvls-8xH100-1GiB", "8xH100 one host, 1 GiB all_reduce", "nvls", "simple", 25.0 + GiB / 275e9 * 1e6),
]


@pytest.mark.parametrize(
    ("name", "algorithm", "protocol", "us"), [e[1:] for e in ESTIMATES], ids=[e[0] for e in ESTIMATES]
)
def test_tuner_estimate_one_host(name: str, algorithm: str, protocol: str, us: float) -> None:
    got = _choice(name, algorithm, protocol).tuner_seconds
    assert got == pytest.approx(us * 1e-6, rel=1e-9), f"tuner_seconds of {algorithm}/{protocol} on {name}"


def test_one_host_seconds_run_ll_at_half_the_links() -> None:
    """What the engine runs (not what NCCL picks by): LL at half of 240 GB/s, capped at its ceiling
    87.7 GB/s; 1 MiB all-reduce's 14/8 MiB per GPU."""
    choice = _choice("8xA100 one host, 1 MiB all_reduce", "ring", "ll")
    assert choice.transfer_s == pytest.approx(14 / 8 * MiB / 87.7e9, rel=1e-9), "ring LL transfer_s, one host"
    assert choice.seconds == pytest.approx(choice.latency_s + choice.transfer_s, rel=1e-12), (
        "seconds = latency + transfer"
    )
    assert choice.cap == pytest.approx(87.7e9 / 0.5, rel=1e-12), "LL cap: its ceiling on the payload, over LL's half"


# Which (algorithm, protocol) NCCL's tuner picks: the least tuner_seconds, every candidate worked in the comment.
PICKS = [
    # LL 15 + 30.6 = 45.6 us; LL128 40.6 + 8.3 = 48.9; Simple 56 + 7.6 = 63.6
    ("pick-8xA100-1MiB-ring-ll", "8xA100 one host, 1 MiB all_reduce", ("ring", "ll")),
    # 14/8 x 8 MiB = 14.7 MB: LL 15 + 244.7; LL128 40.6 + 66.5 = 107.1; Simple 56 + 61.2 = 117.2
    ("pick-8xA100-8MiB-ring-ll128", "8xA100 one host, 8 MiB all_reduce", ("ring", "ll128")),
    # 470 MB: LL128 40.6 + 2127.6; Simple 56 + 1957.3
    ("pick-8xA100-256MiB-ring-simple", "8xA100 one host, 256 MiB all_reduce", ("ring", "simple")),
    # 114.7 KB: LL 15 + 1.24 = 16.2 us; NVLS 25 + 0.24 = 25.2; LL128 40.6 + 0.37
    ("pick-8xH100-64KiB-ring-ll", "8xH100 one host, 64 KiB all_reduce", ("ring", "ll")),
    # NVLS 25 + 3.8 = 28.8 us; LL 15 + 19.8 = 34.8; LL128 40.6 + 5.4
    ("pick-8xH100-1MiB-nvls", "8xH100 one host, 1 MiB all_reduce", ("nvls", "simple")),
    # NVLS 25 + 3904.5 us; Simple ring 56 + 5067.6; LL128 40.6 + 5508.2
    ("pick-8xH100-1GiB-nvls", "8xH100 one host, 1 GiB all_reduce", ("nvls", "simple")),
    # 7 steps: LL 10.8 + 0.7 = 11.5 us; LL128 14 + 13.3 + 0.3; Simple 8.4 + 23.8 + 0.2
    ("pick-8xA100-64KiB-all_gather-ring-ll", "8xA100 one host, 64 KiB all_gather", ("ring", "ll")),
    # ring only (no tree for all-gather): LL 24.3 + 1.875 MiB / 45 GB/s = 24.3 + 43.7; LL128 14 + 26.6 + 5 +
    # 0.9375 MiB / (0.92 x 188 GB/s) = 45.6 + 5.7; Simple 8.4 + 47.6 + 15 + 5.2
    ("pick-2x8-A100-1MiB-all_gather-ring-ll128", "2 hosts x 8 A100, 8 NICs, 1 MiB all_gather", ("ring", "ll128")),
    # tree LL128 69.5 + 2 MiB / (0.5175 x 188 GB/s) = 69.5 + 21.6 = 91.1 us; tree LL 39.2 + 2 MiB / 19 GB/s
    # (ceiling) = 149.6; tree Simple 124.4 + 24.3; ring LL 84.8 + 106.9; ring LL128 150.4 + ...
    ("pick-4x8-A100-1MiB-tree-ll128", "4 hosts x 8 A100, 8 NICs, 1 MiB all_reduce", ("tree", "ll128")),
    # NVLS-tree 55 + 256 MiB / 246.2 GB/s = 55 + 1090.4 us; ring Simple 183.7 + 1.875 x 256 MiB / 376 GB/s
    # = 183.7 + 1338.6; tree Simple 94.4 + 2 x 256 MiB / (0.828 x 370.8 GB/s) = 94.4 + 1748.6
    ("pick-2x8-H100-256MiB-nvls_tree", "2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce", ("nvls_tree", "simple")),
    # tree LL 6.8 + 8 x 6 = 54.8 us + 2 x 4 KiB / (0.92 / 3.8 x 0.7 [correction at 4 KiB]) / 11.75 GB/s = 4.1;
    # tree LL128 14 + 8 x 9.5 = 90 + 1.0; ring LL 6.6 + 30 x 6 = 186.6
    ("pick-16x1-V100-4KiB-tree-ll", "16 hosts x 1 V100, 4 KiB all_reduce", ("tree", "ll")),
    # ring Simple 8.4 + 30 x 15 x 1.4 = 638.4 us + 1.875 x 64 MiB / 11.75 GB/s = 10708.9; ring LL128
    # 14 + 30 x 9.5 + 1.875 x 64 MiB / (0.92 x 11.75 GB/s) = 299 + 11640.1; tree Simple 128.4 + 2 x 64 MiB /
    # (0.92 x 0.8 x 11.75 GB/s) = 128.4 + 15520.1
    ("pick-16x1-V100-64MiB-ring-simple", "16 hosts x 1 V100, 64 MiB all_reduce", ("ring", "simple")),
]


@pytest.mark.parametrize(("name", "expected"), [p[1:] for p in PICKS], ids=[p[0] for p in PICKS])
def test_tuner_pick(name: str, expected: tuple[str, str]) -> None:
    choice = choose(SHAPES[name], fabric_of(GPU[name]))
    assert (choice.algorithm, choice.protocol) == expected, f"the tuner's pick for {name}"


# --- across hosts: the transfer terms (the lead may change how rings and trees across hosts run) ------------


def test_multi_host_transfer_terms_of_rings_and_trees() -> None:
    """The bytes-over-rate terms of collectives across hosts, kept in one place because how those run as
    network flows may change: each is the slower of a GPU's NVLink share and its host's NICs' share."""
    n = 256 * MiB
    ring = _choice("2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce", "ring", "simple")
    # hop bytes 30/16 n; the NICs carry all of it at 376 GB/s, NVLink 14/16 of it at 370.8: the NICs are slower
    assert ring.transfer_s == pytest.approx(30 / 16 * n / 376e9, rel=1e-9), "multi-host ring Simple transfer_s"
    assert ring.tuner_seconds == pytest.approx(
        (8.4 + 28 * 3.4 * 1.4 + 2 * 15 * 1.4) * 1e-6 + 30 / 16 * n / 376e9, rel=1e-9
    ), "multi-host ring Simple tuner_seconds"
    assert ring.seconds == pytest.approx(ring.latency_s + ring.transfer_s, rel=1e-12), "multi-host ring seconds"
    tree = _choice("4 hosts x 8 A100, 8 NICs, 1 MiB all_reduce", "tree", "ll128")
    factor = 0.92 * 120 / 128 * 0.6
    # 2n over each GPU's NVLink (240 GB/s) and over the NICs (188 GB/s) of a deeper tree: the NICs
    assert tree.transfer_s == pytest.approx(2 * MiB / factor / 188e9, rel=1e-9), "multi-host tree LL128 transfer_s"
    assert tree.tuner_seconds == pytest.approx(
        (14 + 14 * 1.25 + 4 * 9.5) * 1e-6 + 2 * MiB / factor / 188e9, rel=1e-9
    ), "multi-host tree LL128 tuner_seconds"
    nvls_tree = _choice("2 hosts x 8 H100, 8 NICs, 256 MiB all_reduce", "nvls_tree", "simple")
    assert nvls_tree.transfer_s == pytest.approx(n / (8 * 57.7e9 * 16 / 30), rel=1e-9), (
        "multi-host NVLS-tree transfer_s"
    )
    ll = _choice("2 hosts x 8 A100, 8 NICs, 1 MiB all_gather", "ring", "ll")
    # LL's 2-host ceiling 22.5 GB/s binds both the time (half of 188) and the tables (a quarter of 188)
    assert ll.tuner_seconds == pytest.approx((6.6 + 14 * 1.0 + 3.7) * 1e-6 + 15 / 16 * MiB / 22.5e9, rel=1e-9), (
        "multi-host ring LL tuner_seconds at LL's ceiling"
    )
