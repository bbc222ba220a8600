"""What NCCL reaches on each GPU generation: not the datasheet's NVLink figure but the bus bandwidth its
rings (and NVLS) sustain, LL's ceiling, its channels, and the pipeline constants fitted to published
nccl-tests results.

`ring_gbs` is NCCL's own estimate of a GPU's usable NVLink bandwidth (its per-link figure for the
architecture times the GPU's NVLink count; `src/graph/topo.h` of NVIDIA/nccl); `nvls_gbs` is the
per-GPU rate into and out of the NVSwitch with NVLink SHARP; `Slices` holds the constants
`sim/nccl/fit.py` fits to `sim/catalog/published_collectives.csv` (docs/fidelity.md): the slice
each step waits for per protocol, a fixed cost per collective, and scales on NCCL's per-step
latencies inside and between hosts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from sim.catalog.gpus import get_gpu
from sim.nccl.transports import IB_NIC_SHARE, Transport, transport


@dataclass(frozen=True)
class Slices:
    """Kilobytes of the pipeline slice each step waits for, per protocol (and for NVLS); and the two
    latency figures fitted with them (microseconds, and a factor)."""

    ll: float = 0.0
    ll128: float = 0.0
    simple: float = 0.0
    nvls: float = 0.0
    launch: float = 0.0  # a fixed cost per collective: the kernel's launch and the proxy's start
    step_scale: float = 1.0  # NCCL's base and per-step NVLink latencies are older GPUs' figures: this GPU's, relative
    network: float = 0.0  # the slice a step between hosts waits for (KB)
    network_scale: float = 1.0  # NCCL's per-step network latencies: what this generation's hosts reach, relative

    def of(self, algorithm: str, protocol: str) -> float:
        return self.nvls if algorithm == "nvls" else float(getattr(self, protocol))


@dataclass(frozen=True)
class Fabric:
    """A GPU generation as NCCL drives it."""

    arch: str  # volta | ampere | hopper: selects NCCL's per-architecture constants
    ring_gbs: float  # GB/s per direction a ring reaches on NVLink (0: no NVLink, use the configured link)
    nvls_gbs: float = 0.0  # GB/s per GPU into and out of the NVSwitch with NVLS (0: no NVLS)
    nvls_tree_bus_gbs: tuple[float, float] = (0.0, 0.0)  # NVLS-tree's bus-bandwidth ceiling, 2 and 3+ hosts
    ll_max_gbs: tuple[float, float, float] = (39.0, 39.0, 20.4)  # LL's bus-bandwidth ceiling on 1, 2, 3+ hosts
    slices: Slices = Slices()
    channels: int = 24  # NCCL's collective channels (one thread block each) on an 8-GPU host
    source: str = ""
    transport: Transport = transport("infiniband")  # how NCCL crosses between hosts (sim/nccl/transports.py)

    def overlap_slowdown(self, sms: int) -> float:
        """How much longer compute takes while a collective runs on its GPU: NCCL's blocks hold
        `channels` of the GPU's `sms` streaming multiprocessors (1.0 when the SM count is unknown)."""
        return 1.0 / (1.0 - self.channels / sms) if sms > self.channels else 1.0

    def ll_max(self, hosts: int) -> float:
        """LL's ceiling in bytes/s of bus bandwidth for a collective over `hosts` hosts."""
        return self.ll_max_gbs[min(hosts, 3) - 1] * 1e9


# LL ceilings are NCCL's (llMaxBws in src/graph/tuning.cc): one host reads the GPU's row, hosts across a
# network the host CPU's (index1 = nNodes == 1 ? compCapIndex : AMD ? 1 : 0), so Hopper's own 2- and 4-node
# entries are never read. DGX-1, DGX H100 and the H100/H200 servers of Oracle, Google, Azure and Nebius run
# Intel Xeons (39.0, 20.4), DGX A100 AMD EPYCs (22.5, 19.0; so would AWS's H100 p5). ring_gbs is NCCL's
# per-link figure times the GPU's NVLinks: V100 SXM2 6 x 20, A100 SXM4 12 x 20, H100/H200 SXM5 18 x 20.6.
# Channels: NCCL's topology search and its doubling rules give 24 on DGX A100 and H100 (as its logs print), 12 on a
# DGX-1's V100 rings and 4 over PCIe (worked by hand from src/graph/search.cc and connect.cc). nvls_gbs: 275 GB/s
# of algorithm bandwidth on 8 H100s, as an NCCL maintainer states it (NVIDIA/nccl-tests issue 212).
_VOLTA_LL = (39.0, 39.0, 20.4)
_AMPERE_LL = (87.7, 22.5, 19.0)
_HOPPER_LL = (141.0, 39.0, 20.4)
# NVLS-tree: 8 NVLS channels (one per GPU of the host) of at most 57.7 GB/s on 2 hosts, 45.5 on more
# (perChMaxNVLSTreeBws)
_HOPPER_NVLS_TREE = (8 * 57.7, 8 * 45.5)

# B200 (NVLink 5): NCCL's per-link figure for SM100 is 40.1 GB/s (SM100_NVLINK_BW, src/graph/topo.h), times its
# 18 links. LL on one host: NCCL's Blackwell row of llMaxBws (2 x 141.0); across hosts the host CPU's row as
# above (DGX B200 runs Intel Xeon Platinum 8570s: 39.0, 20.4).
_BLACKWELL_LL = (2 * 141.0, 39.0, 20.4)
_B200_ASSUMED = (
    "assumed: no published B200 collectives are fitted, so Hopper's slices, ring plateau and 24 channels "
    "stand in; NVLS is left out (no published per-GPU NVLS rate), so NCCL's choice here is ring or tree"
)

# Fitted by sim/nccl/fit.py to sim/catalog/published_collectives.csv; tests/test_nccl_fit.py refits them.
# Volta has no rows: it borrows Ampere's (its NVLink and NCCL's figures for it are alike).
_SLICES: dict[str, Slices] = {
    "ampere": Slices(101.88, 1596.53, 2959.82, 3256.28, 1.09, 0.83, network=65.54, network_scale=1.46),
    "hopper": Slices(21.66, 0.0, 693.61, 2933.31, 32.63, 0.0, network=4457.4, network_scale=1.73),
}
_SLICES["volta"] = _SLICES["ampere"]

_FABRICS: dict[str, Fabric] = {
    "K80": Fabric("volta", 0.0, slices=_SLICES["volta"], channels=4),
    "P100": Fabric("volta", 0.0, slices=_SLICES["volta"], channels=4),
    "V100": Fabric("volta", 120.0, ll_max_gbs=_VOLTA_LL, slices=_SLICES["volta"], channels=12),
    "A100": Fabric("ampere", 240.0, ll_max_gbs=_AMPERE_LL, slices=_SLICES["ampere"]),
    "H100": Fabric("hopper", 370.8, 275.0, _HOPPER_NVLS_TREE, ll_max_gbs=_HOPPER_LL, slices=_SLICES["hopper"]),
    "H200": Fabric("hopper", 370.8, 275.0, _HOPPER_NVLS_TREE, ll_max_gbs=_HOPPER_LL, slices=_SLICES["hopper"]),
    "B200": Fabric("hopper", 18 * 40.1, ll_max_gbs=_BLACKWELL_LL, slices=_SLICES["hopper"], source=_B200_ASSUMED),
}


# the share of a network link's line rate NCCL moves over InfiniBand (other transports: Transport.nic_share)
NIC_EFFICIENCY = IB_NIC_SHARE

# config keys of `simulation.nccl.constants` -> Slices fields
CONSTANT_KEYS: dict[str, str] = {
    "ll_kb": "ll",
    "ll128_kb": "ll128",
    "simple_kb": "simple",
    "nvls_kb": "nvls",
    "launch_us": "launch",
    "step_scale": "step_scale",
    "network_kb": "network",
    "network_scale": "network_scale",
}


def with_constants(fabric: Fabric, constants: Mapping[str, float | None]) -> Fabric:
    """`fabric` with the set ones of `constants` (config keys, CONSTANT_KEYS) in place of its own."""
    given = {CONSTANT_KEYS[k]: float(v) for k, v in constants.items() if v is not None}
    return dataclasses.replace(fabric, slices=dataclasses.replace(fabric.slices, **given)) if given else fabric


def fabric_of(gpu: str, over: str | Transport = "infiniband") -> Fabric:
    """The NCCL figures of GPU `gpu` (a catalogue name; GPUs without NVLink figures use the configured link),
    its hosts joined by transport `over` (a name of sim/nccl/transports.py, or a Transport)."""
    fabric = _FABRICS[get_gpu(gpu).name]
    chosen = transport(over) if isinstance(over, str) else over
    return fabric if chosen == fabric.transport else dataclasses.replace(fabric, transport=chosen)
