"""The wall-clock model of Charles et al., "Scaling Laws for DiLoCo" (arXiv 2503.09799, Appendix A): compute,
intra-datacenter and inter-datacenter communication time of data-parallel training and of DiLoCo, and the
compute utilization they imply. Pure arithmetic, the reference that tests/test_diloco_closed_form.py holds the
simulator to (docs/cross_datacenter.md).

Units: bytes, seconds, bytes per second. The paper counts an all-reduce in parameters over a bandwidth in
parameters per second; here both are bytes (`parameter_bytes` = N times the bytes of one value on the wire).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Network:
    """A network as Appendix A.2 sees it: bandwidth W (bytes/s) and the latency epsilon of one all-reduce (s)."""

    bandwidth: float
    latency: float


@dataclass(frozen=True)
class WallClock:
    """Total compute and communication time of a run (Appendix A.3: wall-clock time is their sum)."""

    compute_s: float
    intra_s: float  # all-reduces inside a datacenter
    inter_s: float  # all-reduces that cross datacenters

    @property
    def total_s(self) -> float:
        return self.compute_s + self.intra_s + self.inter_s

    @property
    def utilization(self) -> float:
        """The share of the wall-clock time spent computing."""
        return self.compute_s / self.total_s


def all_reduce_s(nbytes: float, nodes: int, network: Network) -> float:
    """Appendix A.2's lower bound on an all-reduce of `nbytes` over `nodes`: 2n/W (1 - 1/R) + epsilon. One node
    all-reduces nothing, so it takes no time (the bound's epsilon belongs to an all-reduce that happens)."""
    if nodes <= 1:
        return 0.0
    return 2 * nbytes / network.bandwidth * (1 - 1 / nodes) + network.latency


def compute_s(parameters: float, tokens: float, chips: int, flops_per_chip: float) -> float:
    """Appendix A.1: C / (R Q) with C = 6 N D, the same for every algorithm."""
    return 6 * parameters * tokens / (chips * flops_per_chip)


def ring_latency(nodes: int, hop_latency: float) -> float:
    """Epsilon of a ring all-reduce whose slowest step waits `hop_latency` (its neighbours' path latency):
    2(p - 1) steps, each one hop (docs/physics.md). This is how the simulator's ring meets A.2's epsilon."""
    return 2 * (nodes - 1) * hop_latency


def data_parallel(parameter_bytes: float, steps: int, chips: int, step_compute_s: float, inter: Network) -> WallClock:
    """Every step all-reduces the gradient over all R chips, across datacenters: (2n/W1 (1 - 1/R) + eps1) T."""
    return WallClock(steps * step_compute_s, 0.0, steps * all_reduce_s(parameter_bytes, chips, inter))


def diloco(
    parameter_bytes: float,
    steps: int,
    chips: int,
    step_compute_s: float,
    replicas: int,
    period: int,
    intra: Network,
    inter: Network,
) -> WallClock:
    """DiLoCo with M = `replicas` replicas of R/M chips each and H = `period`.

    M = 1: every inner step all-reduces over all R chips as data-parallel does, plus one outer all-reduce every H
    steps: (2n/W1 (1 - 1/R) + eps1) T (1 + 1/H), all of it across datacenters. M >= 2: each replica sits in one
    datacenter, so inner steps all-reduce over its R/M chips there, (2n/W0 (1 - M/R) + eps0) T, and the outer
    all-reduce over all R chips crosses datacenters every H steps, (2n/W1 (1 - 1/R) + eps1) T/H. A replica of one
    chip (M = R) all-reduces nothing inside."""
    if chips % replicas:
        raise ValueError(f"replicas: must divide the {chips} chips (got {replicas})")
    compute = steps * step_compute_s
    outer = all_reduce_s(parameter_bytes, chips, inter) * (steps // period)
    if replicas == 1:
        return WallClock(compute, 0.0, steps * all_reduce_s(parameter_bytes, chips, inter) + outer)
    inner = steps * all_reduce_s(parameter_bytes, chips // replicas, intra)
    return WallClock(compute, inner, outer)
