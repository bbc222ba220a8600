"""The network transport NCCL drives between hosts: InfiniBand or RoCE through NCCL's own verbs code,
AWS EFA through the aws-ofi-nccl plugin (libfabric, SRD), or Google Cloud's GPUDirect-TCPX (A3 High)
and GPUDirect-TCPXO (A3 Mega) plugins.

EFA comes in two: the plugin moves NCCL's data with libfabric send/recv on p3dn, p4d and p4de
(`efa`) and with RDMA writes from p5 on (`efa_rdma`): each platform's `default_protocol` in
`src/platform-aws.cpp` of aws/aws-ofi-nccl, picked by the instance type. p3dn stays in `efa` though
its EFA has no GPUDirect RDMA (`gdr_required = false` there; NCCL stages through host memory) and the
plugin reports it 150 us: a transport of its own would fit two constants to the fitted table's three
p3dn rows (docs/fidelity.md, the held-out EFA paragraphs).

NCCL's tuner prices a step between hosts at its InfiniBand figure plus the latency the net plugin
reports (`ncclNetProperties_t.latency`, added once per network step and once more for Simple's flush:
`src/graph/tuning.cc` of NVIDIA/nccl). What a transport costs on top of InfiniBand is a few constants:

- `plugin_us`: the latency the plugin reports, which only moves NCCL's *choice*. aws-ofi-nccl
  reports 75 us on p4d/p4de/p5 (150 on p3dn, 35 on p5en; `src/platform-aws.cpp`: "NCCL's internal
  tuner choices work better with this value"); NCCL's IB transport and the TCPX plugin report 0
  (`src/transport/net_ib/init.cc`; `src/net_tcpx.cc` of google/nccl-plugin-gpudirecttcpx).
- `step_us` (fitted): what a network step really costs beyond NCCL's IB figure, counted the way
  NCCL counts the plugin's latency (twice for Simple). EFA: a libfabric send/recv through the
  plugin's proxy thread, SRD's out-of-order delivery reassembled in software; TCPX: the host CPU's
  TCP stack (socket threads) moving every chunk, then a GPU kernel unpacking the received pages.
- `nic_share` (fitted): the share of a NIC's line rate NCCL's bytes reach (InfiniBand's 0.94 is an
  NCCL maintainer's figure, NVIDIA/nccl-tests issue 290).
- `protocols`, `algorithms`: what NCCL may run across hosts. aws-ofi-nccl forces NCCL_PROTO=simple
  where the EFA device does not deliver 128-byte-aligned writes in order (LL and LL128 would read
  torn data; `src/platform-aws.cpp`), and AWS's cheat sheet asks for NCCL_PROTO=simple with
  plugins up to 1.5.0 (`doc/efa-env-var.md`). Google's TCPX recipes set NCCL_ALGO=Ring and
  NCCL_PROTO=Simple (the SkyPilot and dstack A3 High runs in the tables state them); its TCPXO
  (A3 Mega) recipes allow LL128 and Simple.

RoCE runs NCCL's own IB verbs transport, so its constants are InfiniBand's.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

TRANSPORTS: tuple[str, ...] = ("infiniband", "roce", "efa", "efa_rdma", "tcpx", "tcpxo")
IB_NIC_SHARE = 0.94  # 46-48 of NDR InfiniBand's 50 GB/s, as an NCCL maintainer states it (nccl-tests issue 290)
ALL_PROTOCOLS = ("ll", "ll128", "simple")
ALL_ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree")
FITTED = ("efa", "efa_rdma", "tcpx", "tcpxo")  # the transports whose step_us and nic_share sim/nccl/fit.py fits


@dataclass(frozen=True)
class Transport:
    """One transport's constants (module docstring)."""

    name: str
    plugin_us: float = 0.0  # the latency the net plugin reports to NCCL's tuner, per network step
    step_us: float = 0.0  # fitted: a network step's real cost beyond NCCL's IB figure (twice for Simple)
    nic_share: float = IB_NIC_SHARE  # share of each NIC's line rate NCCL's bytes reach
    protocols: tuple[str, ...] = ALL_PROTOCOLS  # what NCCL may use across hosts
    algorithms: tuple[str, ...] = ALL_ALGORITHMS

    def allows(self, algorithm: str, protocol: str, hosts: int) -> bool:
        """Whether NCCL runs `algorithm` with `protocol` over this transport (anything inside one host)."""
        return hosts == 1 or (protocol in self.protocols and algorithm in self.algorithms)

    def step_latency_us(self, protocol: str) -> tuple[float, float]:
        """Per network step: the microseconds the collective really takes beyond NCCL's IB figure, and
        those NCCL's tuner adds (the plugin's latency); both twice for Simple, as NCCL counts it."""
        times = 2.0 if protocol == "simple" else 1.0
        return times * self.step_us, times * self.plugin_us


# Fitted by `python -m sim.nccl.fit --transports` to the fitted table's rows of each transport only
# (sim/catalog/published_collectives.csv; the held-out table is scored, never fitted).
_FITTED: dict[str, dict[str, float]] = {
    "efa": {"step_us": 21.5, "nic_share": 0.686},
    "efa_rdma": {"step_us": 27.4, "nic_share": 0.951},
    "tcpx": {"step_us": 132.6, "nic_share": 0.57},
    "tcpxo": {"step_us": 56.1, "nic_share": 0.886},
}

_TRANSPORTS: dict[str, Transport] = {
    "infiniband": Transport("infiniband"),
    "roce": Transport("roce"),
    "efa": Transport("efa", plugin_us=75.0, protocols=("simple",), **_FITTED["efa"]),
    # RDMA writes: the device orders 128-byte-aligned writes, so LL and LL128 stay allowed
    "efa_rdma": Transport("efa_rdma", plugin_us=75.0, **_FITTED["efa_rdma"]),
    "tcpx": Transport("tcpx", protocols=("simple",), algorithms=("ring",), **_FITTED["tcpx"]),
    "tcpxo": Transport("tcpxo", protocols=("ll128", "simple"), **_FITTED["tcpxo"]),
}

# the `network` column of the published tables -> transport (infiniband_sharp: SHARP switches, IB verbs)
_NETWORKS = {"infiniband": "infiniband", "infiniband_sharp": "infiniband", "roce": "roce", "efa": "efa"}


def transport(name: str) -> Transport:
    """The transport called `name` (one of TRANSPORTS)."""
    if name not in _TRANSPORTS:
        raise ValueError(f"transport {name!r}; allowed: {', '.join(TRANSPORTS)}")
    return _TRANSPORTS[name]


def with_fitted(name: str, **constants: float) -> Transport:
    """Transport `name` with `constants` (step_us, nic_share) in place of its fitted ones."""
    return dataclasses.replace(transport(name), **constants)


def transport_of_row(network: str, system: str) -> str:
    """The transport of a published row, from its `network` and `system` columns: GPUDirect-TCPX rows
    on A3 Mega run the TCPXO plugin (NIC offload), the others the TCPX plugin (host TCP); EFA rows on
    p5 and later instances the plugin's RDMA protocol, the others its send/recv."""
    if network == "gpudirect_tcpx":
        return "tcpxo" if "a3 mega" in system.lower() or "a3-mega" in system.lower() else "tcpx"
    if network == "efa":
        return "efa_rdma" if re.search(r"\bp(5|6)", system.lower()) else "efa"
    return _NETWORKS.get(network, "infiniband")  # one-host rows (nvlink) never reach the network
