"""What a calibration found: every fitted figure with its residual, and the config it implies.

Units: bytes, seconds, bytes per second. A `residual` is the RMS relative residual of a least-squares
fit, or the relative median absolute deviation (MAD / median) of the samples behind a median.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from real.calibrate.rows import Measurements
from sim.compute.profile import ComputeProfile


@dataclass(frozen=True)
class Figure:
    """One fitted number, how well its samples agree, and how many there were."""

    value: float
    residual: float
    samples: int


@dataclass(frozen=True)
class LineFit:
    """seconds = intercept + slope · nbytes, fitted on relative error."""

    intercept: float
    slope: float
    residual: float
    samples: int


@dataclass(frozen=True)
class PairFit:
    """α (latency) and B (bandwidth) of one ordered host pair."""

    src_host: str
    dst_host: str
    latency_s: float
    bytes_per_s: float
    residual: float


@dataclass(frozen=True)
class RackDetection:
    """Host groups whose mutual pair bandwidth sits clearly above the rest (one group: no gap)."""

    groups: tuple[tuple[str, ...], ...]
    gap_ratio: float  # the largest ratio between consecutive sorted pair bandwidths
    cliques: bool  # every pair inside every group is on the fast side of the gap


@dataclass(frozen=True)
class UplinkFit:
    """Each rack's aggregate egress, and the uplink it implies (None: non-blocking as measured)."""

    per_rack: dict[str, float]
    bytes_per_s: Optional[float]
    residual: float
    oversubscription: float  # senders · NIC / uplink; 1.0 when non-blocking


@dataclass(frozen=True)
class CollectivePoint:
    nbytes: int
    measured_s: float
    predicted_s: float  # the closed form with the fitted α and bandwidth

    @property
    def efficiency(self) -> float:
        return self.predicted_s / self.measured_s


@dataclass(frozen=True)
class CollectiveFit:
    """A measured collective curve against its closed form (docs/physics.md).

    `efficiency` is the one factor η with measured ≈ predicted / η (relative least squares);
    the affine fit splits it into the bandwidth term's efficiency and a per-step latency."""

    op: str
    ranks: int
    latency_s: float  # α of the closed form: the largest ring-neighbour pair latency
    bytes_per_s: float  # B of the closed form: NIC or uplink share of one ring flow
    points: tuple[CollectivePoint, ...]
    efficiency: Figure
    bandwidth_efficiency: float  # closed-form slope / measured slope
    step_latency_s: float  # measured intercept / steps
    line: LineFit


@dataclass(frozen=True)
class CalibrationReport:
    """All fitted figures, and the `cluster:` / `workload:` sections of a calibrated config."""

    hosts: tuple[str, ...]
    racks: tuple[tuple[str, ...], ...]  # as given (or detected, when none were given)
    pairs: tuple[PairFit, ...]
    nic: Figure  # bytes/s
    latency: Figure  # s, host to host
    cross_rack_latency: Optional[Figure]
    detected: RackDetection
    rack_mismatch: Optional[str]
    uplink: Optional[UplinkFit]
    collective: Optional[CollectiveFit]
    compute: Optional[Figure]  # s, forward + backward
    compute_jitter: Optional[float]
    folded: bool  # the collective efficiency is folded into nic_gbps, uplink_gbps, link_latency_us
    cluster: dict[str, Any]
    workload: Optional[dict[str, Any]]
    notes: tuple[str, ...] = field(default=())
    measurements: Optional[Measurements] = None  # the raw rows behind every figure
    # the calibrated config's network model: ideal, or NCCL's with fitted constants (nccl_constants)
    simulation: dict[str, Any] = field(default_factory=lambda: {"network_model": "ideal"})

    @property
    def profile(self) -> Optional[ComputeProfile]:
        """The zoo model's measured per-layer compute, when the calibration profiled one."""
        return self.measurements.profile if self.measurements is not None else None

    def rows(self) -> dict[str, list[dict[str, Any]]]:
        """The raw measurements as flat rows per kind (pairs, uplinks, collectives, computes), ready
        for `pandas.DataFrame`; empty when the report carries none."""
        m = self.measurements
        if m is None:
            return {}
        kinds = {"pairs": m.pairs, "uplinks": m.uplinks, "collectives": m.collectives, "computes": m.computes}
        return {kind: [asdict(row) for row in rows] for kind, rows in kinds.items()}

    def summary(self) -> str:
        """A few lines for a log."""
        gbps = 8e-9
        lines = [
            f"hosts {len(self.hosts)} in {len(self.racks)} rack(s); NIC {self.nic.value * gbps:.3f} Gbit/s "
            f"(±{self.nic.residual:.1%}), latency {self.latency.value * 1e6:.1f} us (±{self.latency.residual:.1%})",
        ]
        if self.uplink is not None:
            up = "non-blocking" if self.uplink.bytes_per_s is None else f"{self.uplink.bytes_per_s * gbps:.3f} Gbit/s"
            lines.append(f"uplink {up} (oversubscription {self.uplink.oversubscription:.2f})")
        if self.collective is not None:
            c = self.collective
            lines.append(
                f"{c.op} over {c.ranks} ranks: efficiency {c.efficiency.value:.3f} (±{c.efficiency.residual:.1%}), "
                f"bandwidth term {c.bandwidth_efficiency:.3f}, {c.step_latency_s * 1e6:.1f} us per step"
            )
        if self.compute is not None:
            what = f"{self.profile.model} profile, " if self.profile is not None else ""
            lines.append(f"compute {what}{self.compute.value * 1e3:.3f} ms (±{self.compute.residual:.1%})")
        if self.rack_mismatch:
            lines.append(f"RACK MISMATCH: {self.rack_mismatch}")
        lines += list(self.notes)
        lines.append(f"cluster: {self.cluster}")
        return "\n".join(lines)
