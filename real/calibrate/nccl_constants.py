"""From measured NCCL collectives to the NCCL model's constants (`simulation.nccl.constants`).

Under NCCL the calibrated config keeps the NCCL model (docs/fidelity.md) instead of the ideal
network: the measured world collectives are read as an nccl-tests table of this cluster (bus
bandwidth per size) and `sim.nccl.fit` fits the constants that table determines: the network's
slice and latency scale (the rows span hosts; the NVLink constants stay the GPU's own). The NICs'
line rate is the measured point-to-point rate over NIC_EFFICIENCY, the share of it the model's NCCL
moves, so that a host pair's transfer comes out as measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from real.calibrate.errors import CalibrationError
from real.calibrate.rows import CollectiveSample
from sim.nccl import fit as nccl_fit
from sim.nccl.fabrics import CONSTANT_KEYS, NIC_EFFICIENCY, fabric_of
from sim.nccl.published import Published

OPS = ("all_reduce", "all_gather", "reduce_scatter")  # the measured collectives the fit reads


@dataclass(frozen=True)
class NcclFit:
    """The fitted constants (config keys) and how well they reproduce the measured collectives."""

    constants: dict[str, float]
    median_error: float  # |predicted / measured - 1| of the measured bus bandwidths
    worst_error: float

    def simulation(self) -> dict[str, Any]:
        """The `simulation:` keys of the calibrated config."""
        return {"network_model": "nccl", "nccl": {"constants": dict(self.constants)}}


def line_rate_gbps(measured_bytes_per_s: float) -> float:
    """A NIC's line rate (Gbit/s) from what NCCL moved over it point to point."""
    return measured_bytes_per_s * 8 / 1e9 / NIC_EFFICIENCY


def measured_rows(
    samples: Sequence[CollectiveSample], gpu: str, hosts: int, nics_per_host: int, nic_gbps: float
) -> list[Published]:
    """The measured collectives as nccl-tests figures of this cluster (one per op and size)."""
    out = []
    for s in samples:
        if s.op not in OPS or s.ranks % hosts:
            continue
        row = Published(
            "inter_node",
            s.op,
            gpu,
            hosts,
            s.ranks // hosts,
            nics_per_host,
            nic_gbps,
            "measured",
            float(s.nbytes),
            0.0,
            "auto",
            False,
            True,
            "syncsim calibrate",
            "",
        )
        out.append(dataclasses.replace(row, busbw_gbs=row.bus_factor() * s.nbytes / s.seconds / 1e9))
    return out


def fit_nccl(samples: Sequence[CollectiveSample], gpu: str, hosts: int, nics_per_host: int, nic_gbps: float) -> NcclFit:
    """Fit the network constants of GPU `gpu`'s NCCL model to the measured collectives."""
    figures = measured_rows(samples, gpu, hosts, nics_per_host, nic_gbps)
    if len(figures) < 2:
        raise CalibrationError(
            f"collectives: {len(figures)} measured size(s) across {hosts} hosts; the NCCL constants need two or more"
        )
    fitted = nccl_fit.fit(figures, networks=None)[fabric_of(gpu).arch]
    names = set(nccl_fit.NETWORK_NAMES)
    constants = {key: float(getattr(fitted, name)) for key, name in CONSTANT_KEYS.items() if name in names}
    fabric = dataclasses.replace(fabric_of(gpu), slices=fitted)
    errors = nccl_fit.score(figures, {gpu: fabric})["error"].abs()
    return NcclFit(constants, float(errors.median()), float(errors.max()))
