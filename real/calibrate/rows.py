"""Measurement rows: what `measure` produces on a real cluster and `fit` consumes.

Plain frozen dataclasses without torch, so that fitting (and tests) run without a process group.
Units: bytes and seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from sim.compute.profile import ComputeProfile


@dataclass(frozen=True)
class PairSample:
    """One ordered host pair at one size: a ping-pong of `nbytes` each way, started by src.

    `seconds` is half the round trip (median over repeats, or the minimum): the one-way time
    α + n/B of the Hockney model (links are full duplex and taken as symmetric, as in the simulator).
    """

    src_host: str
    dst_host: str
    nbytes: int
    seconds: float
    round_trip_s: float


@dataclass(frozen=True)
class UplinkSample:
    """Every host of `rack` sending `nbytes` at once to a distinct host in another rack."""

    rack: str
    senders: int
    receivers: int  # distinct receiving hosts; fewer than senders means receivers' NICs may limit
    nbytes: int  # per sender
    seconds: float  # until the slowest sender's transfer was acknowledged (median or min over repeats)

    @property
    def bytes_per_s(self) -> float:
        """Aggregate throughput out of the rack."""
        return self.senders * self.nbytes / self.seconds


@dataclass(frozen=True)
class CollectiveSample:
    """One collective over `ranks` ranks; `nbytes` is the full tensor n of docs/physics.md (the
    all-reduce input, the reduce-scatter input, the all-gather output), float32."""

    op: str
    ranks: int
    nbytes: int
    seconds: float  # slowest rank's time per op, median or min over repeats


@dataclass(frozen=True)
class ComputeSample:
    """One rank's forward + backward on `batch` samples: the numerics model's lockstep step, or the
    total of the rank's zoo-model profile."""

    rank: int
    batch: int
    seconds: float  # median (or min) over repeats
    jitter: float  # coefficient of variation over repeats


@dataclass(frozen=True)
class Measurements:
    """Everything one calibration run measured, plus the facts needed to read it."""

    rank_hosts: tuple[str, ...]
    host_racks: Optional[Mapping[str, str]]  # None: racks unknown, use the detected ones
    pairs: tuple[PairSample, ...] = ()
    uplinks: tuple[UplinkSample, ...] = ()
    collectives: tuple[CollectiveSample, ...] = ()
    computes: tuple[ComputeSample, ...] = ()
    gradient_bytes: Optional[int] = None  # the numerics model's gradient (float32), when measured
    batch: Optional[int] = None
    profile: Optional[ComputeProfile] = None  # the workload's zoo model, per layer (the slowest rank's)
    # host -> datacenter on a multi_datacenter cluster: its racks need not be equal, as two_tier's must
    host_datacenters: Optional[Mapping[str, str]] = None

    @property
    def hosts(self) -> tuple[str, ...]:
        """Hosts in order of their first rank."""
        return tuple(dict.fromkeys(self.rank_hosts))


def rack_members(hosts: Sequence[str], host_racks: Mapping[str, str]) -> dict[str, list[str]]:
    """Racks in order of first appearance among `hosts`, each with its hosts in order."""
    missing = [h for h in hosts if h not in host_racks]
    if missing:
        raise ValueError(f"host_racks: no rack for hosts {missing}")
    racks: dict[str, list[str]] = {}
    for h in hosts:
        racks.setdefault(host_racks[h], []).append(h)
    return racks
