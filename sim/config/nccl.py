"""The `simulation.nccl` config section: which algorithms and protocols the NCCL model may choose, and
the constants fitted to a cluster (sim/nccl/fabrics.py holds each GPU's own), each bounded by what a
GPU can physically be."""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field

from sim.config.types import MAX_FACTOR, Strict

# Bounds of the NCCL constants, wide of any fit (sim/nccl/fit.py searches slices of 0-16 MB, launches of
# 0-100 us, scales of 0-5) and narrow of values that no GPU reaches: a slice is a piece of NCCL's staging
# buffer (NCCL_BUFFSIZE, 4 MiB by default per channel), so a slice over 1 GB names more memory than any
# such buffer; a collective's fixed cost is a kernel launch and a proxy's start (microseconds), so over one
# second it is no launch; a scale on NCCL's per-step latencies beyond 1000x makes a microsecond step a
# millisecond. Without them `launch_us: 1e308` ran and reported iterations of 10^302 ms.
SliceKb = Annotated[float, Field(ge=0, le=1e6)]  # KB of a pipeline slice, at most 1 GB
LatencyScale = Annotated[float, Field(ge=0, le=MAX_FACTOR)]  # 0: the fit folds the per-step terms into launch


class NcclConstants(Strict):
    """The NCCL model's fitted constants for this cluster (`python -m sim.nccl.fit --table FILE` prints
    them from its nccl-tests results); each one unset keeps the GPU's own (sim/nccl/fabrics.py). Their
    bounds are physical: a slice of at most 1 GB (NCCL's staging buffers are MBs), a launch cost of at
    most 1 s (it is microseconds), a latency scale of at most 1000."""

    ll_kb: Optional[SliceKb] = Field(None, description="LL's pipeline slice (KB, at most 1 GB)")
    ll128_kb: Optional[SliceKb] = Field(None, description="LL128's pipeline slice (KB, at most 1 GB)")
    simple_kb: Optional[SliceKb] = Field(None, description="Simple's pipeline slice (KB, at most 1 GB)")
    nvls_kb: Optional[SliceKb] = Field(None, description="NVLS's pipeline slice (KB, at most 1 GB)")
    launch_us: Optional[Annotated[float, Field(ge=0, le=1e6)]] = Field(
        None, description="a fixed cost per collective (us, at most 1 s: a launch is microseconds)"
    )
    step_scale: Optional[LatencyScale] = Field(
        None, description="factor on NCCL's per-step NVLink latencies (0 as the fit may give it: none)"
    )
    network_kb: Optional[SliceKb] = Field(
        None, description="the slice a step between hosts waits for (KB, at most 1 GB)"
    )
    network_scale: Optional[Annotated[float, Field(gt=0, le=MAX_FACTOR)]] = Field(
        None, description="factor on NCCL's per-step network latencies"
    )


class NcclSettings(Strict):
    """What the NCCL model may choose (as NCCL_ALGO and NCCL_PROTO restrict NCCL itself), and this
    cluster's constants."""

    algorithm: Literal["auto", "ring", "tree", "nvls", "nvls_tree"] = Field(
        "auto",
        description="auto: the fastest by NCCL's tuner; or always ring, tree (all-reduce across hosts), nvls "
        "(all-reduce inside one NVSwitch host of H100-class GPUs) or nvls_tree (NVLS inside hosts, a tree across "
        "them); a collective the forced one cannot run falls back to ring",
    )
    protocol: Literal["auto", "ll", "ll128", "simple"] = Field(
        "auto", description="auto: the fastest by NCCL's tuner; or always ll, ll128 or simple"
    )
    transport: Literal["infiniband", "roce", "efa", "efa_rdma", "tcpx", "tcpxo"] = Field(
        "infiniband",
        description="how NCCL crosses between hosts (sim/nccl/transports.py): infiniband or roce (NCCL's own verbs), "
        "efa (AWS p3dn/p4d/p4de, the aws-ofi-nccl plugin's send/recv: Simple only), efa_rdma (p5 and later, its RDMA "
        "writes), tcpx (Google A3 High, GPUDirect-TCPX: ring and Simple "
        "only) or tcpxo (A3 Mega, GPUDirect-TCPXO); each with its per-step latency and share of the NICs' rate",
    )
    constants: NcclConstants = Field(
        default_factory=NcclConstants, description="fitted to this cluster's measurements (default: the GPU's)"
    )
