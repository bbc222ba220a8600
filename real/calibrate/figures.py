"""Pure fits from measurement rows to single figures (no torch.distributed); `fit` assembles them.

* Per host pair, α and B regime by regime (`fit_line`): B from the sizes within 16x of the largest,
  α from the two smallest, so a token-bucket shaper's burst does not pass for bandwidth.
* NIC bandwidth and latency: medians over same-rack pairs (over all pairs where no rack holds two
  hosts), robust to a slow pair.
* Uplink: the egress of a rack whose hosts all send out at once (bytes over the time less the
  data's and the ack's latency), if clearly below what its senders' NICs could do; otherwise
  non-blocking.
* Racks: hosts whose mutual pair bandwidth sits clearly (`gap`×) above the rest cluster together.
  A single pair across a rack whose uplink is at least one NIC runs at full NIC speed, so such
  racks are invisible to pair bandwidth; that is reported as a note, not as a mismatch.
* Collective efficiency: the closed form (docs/physics.md) with the fitted α and B, divided by
  the measured time, per size and as one fitted factor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Optional

import numpy as np

from real.calibrate.errors import CalibrationError
from real.calibrate.report import (
    CollectiveFit,
    CollectivePoint,
    Figure,
    LineFit,
    PairFit,
    RackDetection,
    UplinkFit,
)
from real.calibrate.rows import CollectiveSample, ComputeSample, PairSample, UplinkSample

CLEARLY_BELOW = 0.85  # an egress under this share of its senders' NICs is an uplink limit
RACK_GAP = 1.5  # pair bandwidths this many times apart split hosts into racks


def fit_line(nbytes: Sequence[float], seconds: Sequence[float]) -> LineFit:
    """seconds ≈ intercept + slope·nbytes, fitted regime by regime: the slope is a least-squares fit
    over the sizes within 16x of the largest (the asymptotic rate), the intercept the lesser time of the two smallest
    sizes (tiny messages: latency only; a stray slow sample is dropped). One least-squares
    line over all sizes is pulled off by a token-bucket shaper, whose burst lets messages below the
    bucket size pass at line rate while large ones see the shaped rate that gradients will see."""
    x, y = np.asarray(nbytes, dtype=float), np.asarray(seconds, dtype=float)
    if len(set(x.tolist())) < 2:
        raise CalibrationError(f"sizes: need two distinct message sizes to fit a line, got {sorted(set(x))}")
    if np.any(y <= 0):
        raise CalibrationError(f"seconds: times must be positive, got {y[y <= 0].tolist()}")
    sizes = np.unique(x)
    at = {float(n): float(np.median(y[x == n])) for n in sizes}
    bulk = x >= min(float(sizes[-2]), float(sizes[-1]) / 16)  # sizes within 16x of the largest
    slope = _relative_slope(x[bulk], y[bulk])
    if slope <= 0:  # too noisy to read the large sizes alone: one line over every size
        slope = _relative_slope(x, y)
    if slope <= 0:
        raise CalibrationError(f"seconds: do not grow with nbytes (slope {slope:.3g} s/B); use larger sizes")
    intercept = max(0.0, min(at[float(n)] for n in sizes[:2]) - slope * float(sizes[0]))
    rel = (intercept + slope * x - y) / y
    return LineFit(float(intercept), float(slope), float(np.sqrt(np.mean(rel**2))), len(y))


def _relative_slope(x: np.ndarray, y: np.ndarray) -> float:
    """The slope of intercept + slope·x fitted by least relative error."""
    (_, slope), *_ = np.linalg.lstsq(np.column_stack([1 / y, x / y]), np.ones_like(y), rcond=None)
    return float(slope)


def fit_pairs(samples: Iterable[PairSample]) -> tuple[PairFit, ...]:
    """One α/B fit per ordered host pair, in the order the pairs first appear."""
    by_pair: dict[tuple[str, str], list[PairSample]] = {}
    for s in samples:
        by_pair.setdefault((s.src_host, s.dst_host), []).append(s)
    fits = []
    for (src, dst), rows in by_pair.items():
        try:
            line = fit_line([r.nbytes for r in rows], [r.seconds for r in rows])
        except CalibrationError as exc:
            raise CalibrationError(f"pair {src}->{dst}: {exc}") from None
        fits.append(PairFit(src, dst, line.intercept, 1 / line.slope, line.residual))
    return tuple(fits)


def robust(values: Sequence[float]) -> Figure:
    """Median and relative MAD."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise CalibrationError("no samples to take a median of")
    med = float(np.median(v))
    mad = float(np.median(np.abs(v - med)))
    return Figure(med, mad / med if med else 0.0, int(v.size))


def split_pairs(pairs: Sequence[PairFit], rack_of: Mapping[str, str]) -> tuple[list[PairFit], list[PairFit]]:
    """(same-rack pairs, cross-rack pairs)."""
    same = [p for p in pairs if rack_of[p.src_host] == rack_of[p.dst_host]]
    return same, [p for p in pairs if rack_of[p.src_host] != rack_of[p.dst_host]]


def detect_racks(pairs: Sequence[PairFit], hosts: Sequence[str], gap: float = RACK_GAP) -> RackDetection:
    """Group hosts by the largest gap in their (symmetrised: min of both directions) pair bandwidths;
    fast pairs join hosts (connected components). No gap of at least `gap`×: one group."""
    bw: dict[frozenset[str], float] = {}
    for p in pairs:
        key = frozenset((p.src_host, p.dst_host))
        bw[key] = min(bw.get(key, np.inf), p.bytes_per_s)
    values = np.sort(np.array(list(bw.values())))
    if values.size < 2:
        return RackDetection((tuple(hosts),), 1.0, True)
    ratios = values[1:] / values[:-1]
    k = int(np.argmax(ratios))
    if ratios[k] < gap:
        return RackDetection((tuple(hosts),), float(ratios[k]), True)
    threshold = float(np.sqrt(values[k] * values[k + 1]))
    parent = {h: h for h in hosts}

    def root(h: str) -> str:
        while parent[h] != h:
            h = parent[h]
        return h

    for key, value in bw.items():
        if value >= threshold:
            a, b = sorted(key)
            parent[root(a)] = root(b)
    groups: dict[str, list[str]] = {}
    for h in hosts:
        groups.setdefault(root(h), []).append(h)
    cliques = all(bw.get(frozenset((a, b)), 0.0) >= threshold for g in groups.values() for a in g for b in g if a < b)
    return RackDetection(tuple(tuple(g) for g in groups.values()), float(ratios[k]), cliques)


def compare_racks(detected: RackDetection, given: Sequence[Sequence[str]]) -> tuple[Optional[str], Optional[str]]:
    """(mismatch, note): a mismatch when the detected grouping differs from the given racks, unless
    nothing was detected (one group), which racks with uplinks of at least one NIC explain (a note)."""
    want = {frozenset(r) for r in given}
    got = {frozenset(g) for g in detected.groups}
    if want == got:
        return None, None
    if len(detected.groups) == 1:
        return None, "pair bandwidths show no rack structure: consistent with uplinks of at least one NIC"
    show = sorted(sorted(g) for g in detected.groups)
    return f"pair bandwidths group the hosts as {show}, but host_racks gives {sorted(sorted(r) for r in given)}", None


def fit_uplink(
    samples: Sequence[UplinkSample],
    nic_bytes_per_s: float,
    latency_s: float,
    clearly_below: float = CLEARLY_BELOW,
) -> tuple[UplinkFit, list[str]]:
    """Each rack's egress, its senders' bytes over the time less two latencies (the data's and the
    ack's); the median of those is the uplink, or None (non-blocking) when it reaches
    `clearly_below` of what the senders (or, if fewer, the receivers) move through their NICs."""
    if not samples:
        raise CalibrationError("uplinks: no rack egress measured")
    notes = []
    per_rack = {}
    for s in samples:
        net = s.seconds - 2 * latency_s
        if net <= 0.5 * s.seconds:
            raise CalibrationError(
                f"uplinks: rack {s.rack}'s {s.nbytes} bytes per sender take {s.seconds:.3g} s, under four "
                f"latencies of {latency_s:.3g} s; measure with a larger uplink_bytes (--uplink-bytes, or "
                "calibration.uplink_bytes; unset, it follows calibration.bandwidth_factor up to --max-bytes)"
            )
        per_rack[s.rack] = s.senders * s.nbytes / net
        if s.receivers < s.senders:
            notes.append(f"rack {s.rack}: {s.senders} senders share {s.receivers} receivers; may be receiver-limited")
    fig = robust(list(per_rack.values()))
    capable = float(np.median([min(s.senders, s.receivers) for s in samples])) * nic_bytes_per_s
    senders = float(np.median([s.senders for s in samples]))
    if fig.value >= clearly_below * capable:
        return UplinkFit(per_rack, None, fig.residual, 1.0), notes
    return UplinkFit(per_rack, fig.value, fig.residual, senders * nic_bytes_per_s / fig.value), notes


def ring_figures(
    rank_hosts: Sequence[str],
    rack_of: Mapping[str, str],
    pairs: Sequence[PairFit],
    nic: float,
    uplink: Optional[float],
) -> tuple[float, float]:
    """(α, B) of a ring over the ranks in order: the largest neighbour-pair latency, and the rate of
    its slowest flow (NIC or uplink divided by the ring flows leaving a host or rack)."""
    latency = {(p.src_host, p.dst_host): p.latency_s for p in pairs}
    fallback = float(np.median([p.latency_s for p in pairs]))
    p = len(rank_hosts)
    host_out: dict[str, int] = {}
    rack_out: dict[str, int] = {}
    alpha = 0.0
    for i in range(p):
        a, b = rank_hosts[i], rank_hosts[(i + 1) % p]
        if a == b:
            continue
        alpha = max(alpha, latency.get((a, b), fallback))
        host_out[a] = host_out.get(a, 0) + 1
        if rack_of[a] != rack_of[b]:
            rack_out[rack_of[a]] = rack_out.get(rack_of[a], 0) + 1
    rate = nic / max(host_out.values(), default=1)
    if uplink is not None and rack_out:
        rate = min(rate, uplink / max(rack_out.values()))
    return alpha, rate


def fit_collective(
    samples: Sequence[CollectiveSample], op: str, alpha: float, bytes_per_s: float
) -> Optional[CollectiveFit]:
    """Measured `op` against its closed form; None when `op` was not measured or p = 1."""
    rows = sorted((s for s in samples if s.op == op), key=lambda s: s.nbytes)
    if not rows or rows[0].ranks < 2:
        return None
    p = rows[0].ranks
    steps = 2 * (p - 1) if op == "all_reduce" else p - 1
    points = tuple(
        CollectivePoint(s.nbytes, s.seconds, steps * alpha + steps / p * s.nbytes / bytes_per_s) for s in rows
    )
    m = np.array([pt.measured_s / pt.predicted_s for pt in points])  # 1/efficiency per size
    eta = float(np.sum(m) / np.sum(m**2))
    residual = float(np.sqrt(np.mean((eta * m - 1) ** 2)))
    line = fit_line([pt.nbytes for pt in points], [pt.measured_s for pt in points])
    return CollectiveFit(
        op=op,
        ranks=p,
        latency_s=alpha,
        bytes_per_s=bytes_per_s,
        points=points,
        efficiency=Figure(eta, residual, len(points)),
        bandwidth_efficiency=(steps / p / bytes_per_s) / line.slope,
        step_latency_s=line.intercept / steps,
        line=line,
    )


def fit_compute(samples: Sequence[ComputeSample]) -> tuple[Figure, float]:
    """(median over ranks of each rank's median seconds, median jitter)."""
    if not samples:
        raise CalibrationError("computes: no compute time measured")
    return robust([s.seconds for s in samples]), float(np.median([s.jitter for s in samples]))
