"""Published nccl-tests results (sim/catalog/published_collectives.csv) and the cluster each ran on.

One row per figure: the collective, GPU, hosts, GPUs and NICs per host, message size and the bus
bandwidth nccl-tests printed (busbw = algbw times 2(p-1)/p for all-reduce, (p-1)/p for all-gather,
reduce-scatter and all-to-all), with its citation. Rows from bug reports are kept but marked, and
neither fitted nor scored. A statement of peak bandwidth without a size is compared at PEAK_BYTES.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from sim.nccl.fabrics import Fabric
from sim.nccl.transports import transport_of_row
from sim.nccl.tuner import Shape

KINDS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "alltoall": "all_to_all",
}
PEAK_BYTES = 8 * 2**30  # where a figure stated without a size ("peak") is compared
# the clusters the rows are simulated on: a NIC-to-switch cable's latency (one way)
LINK_US = 1.0


@dataclass(frozen=True)
class Published:
    """One published collective figure."""

    kind: str  # intra_node | inter_node
    collective: str  # all_reduce | all_gather | reduce_scatter | all_to_all
    gpu: str
    nodes: int
    gpus_per_node: int
    nics_per_node: int
    nic_gbps: float
    network: str  # nvlink (one host) | infiniband | roce | efa | gpudirect_tcpx
    nbytes: float
    busbw_gbs: float
    algorithm: str  # ring | tree | nvls when the run forced one (NCCL_ALGO), else auto
    bug_report: bool
    sized: bool  # False: a statement of peak bandwidth, compared at PEAK_BYTES
    source: str
    system: str

    @property
    def transport(self) -> str:
        """The transport NCCL crossed hosts with (sim/nccl/transports.py), from the network and system."""
        return transport_of_row(self.network, self.system)

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    def bus_factor(self) -> float:
        p = self.ranks
        return 2 * (p - 1) / p if self.collective == "all_reduce" else (p - 1) / p


TABLE = "published_collectives.csv"  # the figures the NCCL constants are fitted to (sim/nccl/fit.py)
HELDOUT = "published_collectives_heldout.csv"  # figures across hosts never fitted: scored only


@cache
def table(heldout: bool = False) -> pd.DataFrame:
    """The bundled table, as published (one row per figure); `heldout`: the held-out table instead, in
    the same columns (sim/experiments/fidelity_heldout.py scores it; the fit never reads it)."""
    with resources.files("sim.catalog").joinpath(HELDOUT if heldout else TABLE).open() as f:
        return pd.read_csv(f, dtype={"nccl_version": str})


REQUIRED = ("collective", "gpu", "nodes", "gpus_per_node", "size_bytes", "busbw_gbs")
OPTIONAL: dict[str, object] = {
    "kind": "",
    "nics_per_node": 1,
    "nic_gbps": float("nan"),
    "network": "infiniband",
    "algorithm": float("nan"),
    "bug_report": "no",
    "source": "",
    "system": "",
}


def read_table(path: str | Path) -> pd.DataFrame:
    """A table of one's own nccl-tests results in the bundled table's columns: REQUIRED ones, and any
    of OPTIONAL (defaults: one NIC, InfiniBand, NCCL's own algorithm choice)."""
    try:
        frame = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not a readable CSV table ({exc})") from None
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {', '.join(missing)}; required: {', '.join(REQUIRED)}")
    unknown = sorted(set(frame["collective"]) - set(KINDS))
    if unknown:
        raise ValueError(f"{path}: collective {unknown[0]!r}; allowed: {', '.join(KINDS)}")
    for column, default in OPTIONAL.items():
        if column not in frame.columns:
            frame[column] = default
    across = frame[(frame["nodes"] > 1) & frame["nic_gbps"].isna()]
    if len(across):
        raise ValueError(f"{path}: row {across.index[0] + 2}: nic_gbps is required for a row across hosts")
    frame["kind"] = frame["kind"].where(frame["kind"].astype(bool), frame["nodes"].map(_kind))
    return frame


def _kind(nodes: int) -> str:
    return "intra_node" if nodes == 1 else "inter_node"


def rows(
    include_bug_reports: bool = False, frame: pd.DataFrame | None = None, heldout: bool = False
) -> list[Published]:
    """The rows of `frame` (default: the bundled table, or the held-out one if `heldout`) as `Published`
    figures (bug reports only if asked), less those across hosts whose NICs the source does not state
    (`unstated`)."""
    out = []
    for r in (table(heldout) if frame is None else frame).itertuples():
        if _unstated(r):
            continue
        sized = not pd.isna(r.size_bytes)
        row = Published(
            r.kind,
            KINDS[r.collective],
            r.gpu,
            int(r.nodes),
            int(r.gpus_per_node),
            int(r.nics_per_node) if not pd.isna(r.nics_per_node) else 1,
            float(r.nic_gbps) if not pd.isna(r.nic_gbps) else 0.0,
            str(r.network),
            float(r.size_bytes) if sized else float(PEAK_BYTES),
            float(r.busbw_gbs),
            str(r.algorithm).lower() if not pd.isna(r.algorithm) else "auto",
            str(r.bug_report).strip().lower() == "yes",
            sized,
            r.source,
            r.system,
        )
        if include_bug_reports or not row.bug_report:
            out.append(row)
    return out


def unstated() -> pd.DataFrame:
    """Rows across hosts whose NICs their source does not state: kept, but not simulated."""
    return table()[[_unstated(r) for r in table().itertuples()]]


def _unstated(r: Any) -> bool:
    return bool(r.nodes > 1 and (pd.isna(r.nic_gbps) or pd.isna(r.nics_per_node)))


def row_shape(row: Published, fabric: Fabric, intra_gbs: float) -> Shape:
    """The collective of `row` as the simulator's NCCL planner sees it on a packed star cluster of the
    row's hosts (ranks numbered host by host; `intra_gbs`: the GPU's configured NVLink per direction)."""
    g, hosts = row.gpus_per_node, row.nodes
    nvlink = (min(fabric.ring_gbs, intra_gbs) if fabric.ring_gbs else intra_gbs) * 1e9
    nic = row.nics_per_node * row.nic_gbps * 1e9 / 8 * fabric.transport.nic_share if hosts > 1 else math.inf
    p = row.ranks
    if row.collective == "all_to_all":  # pairs at one common rate: the GPU link carries p-1, a host's NICs g(p-g)
        rate = min(nvlink / (p - 1), nic / (g * (p - g)) if hosts > 1 else math.inf)
    else:
        rate = min(nvlink, nic)
    return Shape(
        row.collective,
        row.nbytes,
        p,
        hosts,
        g,
        rate,
        hosts if hosts > 1 else 0,
        2 * LINK_US * 1e-6 if hosts > 1 else 0.0,
        nvlink if g > 1 else math.inf,
        nic if hosts > 1 else math.inf,  # GPUDirect RDMA: the NICs alone
        min(fabric.nvls_gbs * 1e9, nvlink) if g > 1 and fabric.nvls_gbs else 0.0,
    )
