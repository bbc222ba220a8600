"""From measurement rows to a calibrated syncsim `cluster:` and `workload:` (pure; no torch).

`fit_report(measurements)` fits every figure (see `figures`) and turns them into config sections in
config units (Gbit/s = 1e9 bit/s, microseconds, milliseconds, 1e6 bytes).

Latency. A measured host-to-host α is, in the simulator, the path GPU → host → NIC link → ToR →
NIC link → host → GPU: `2·intra_host_latency_us + 2·link_latency_us` within a rack (or a star),
and two uplink hops more across racks. `link_latency_us` is solved from that, keeping the base
config's `intra_host_latency_us` (default 1 µs).

Collective efficiency. The simulator has no protocol-efficiency field: it reproduces the closed
forms exactly, with link capacities read as effective goodput (docs/physics.md). A collective
library is slower than the wire (gloo reduces on the CPU, copies, chunks), so with raw
point-to-point figures the simulator would under-predict every all-reduce. With
`fold_efficiency=True` (the default) the measured all-reduce curve t(n) = a + b·n is folded into the
network: `nic_gbps` and `uplink_gbps` are scaled by the bandwidth-term efficiency (closed-form
slope / measured slope), which keeps the oversubscription ratio, and `link_latency_us` is solved
from the measured per-step latency a / 2(p−1). The simulator then reproduces the measured
uncontended all-reduce, which is what collective-based policies spend their time in; the price is
that point-to-point traffic (parameter-server pushes and pulls) is predicted slower by the same
factor. `fold_efficiency=False` keeps the raw point-to-point figures (right for PS-heavy studies).
The honest fix is a simulator field applied to collectives only, e.g.
`cluster.collective_efficiency` (bandwidth term) and `cluster.collective_step_us` (per-step
overhead); the report carries both figures for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from real.calibrate.errors import CalibrationError
from real.calibrate.figures import (
    CLEARLY_BELOW,
    RACK_GAP,
    compare_racks,
    detect_racks,
    fit_collective,
    fit_compute,
    fit_pairs,
    fit_uplink,
    ring_figures,
    robust,
    split_pairs,
)
from real.calibrate.nccl_constants import NcclFit, fit_nccl, line_rate_gbps
from real.calibrate.report import CalibrationReport, CollectiveFit, Figure, UplinkFit
from real.calibrate.rows import Measurements, rack_members
from sim.nccl.fabrics import NIC_EFFICIENCY
from sim.nccl.published import LINK_US

GBIT = 1e9 / 8  # bytes per second in one Gbit/s
NOISY = 0.2  # a figure whose samples disagree by more than this gets a note


def fit_report(
    m: Measurements,
    *,
    intra_host_latency_us: float = 1.0,
    fold_efficiency: bool = True,
    rack_gap: float = RACK_GAP,
    clearly_below: float = CLEARLY_BELOW,
    nccl_gpu: Optional[str] = None,
    nics_per_host: int = 1,
) -> CalibrationReport:
    """Fit every figure in `m` and build the calibrated config sections (see the module docstring).

    `nccl_gpu`: the cluster's GPU when the measurements ran over NCCL; the config then keeps the NCCL
    model with constants fitted to the measured collectives (`real.calibrate.nccl_constants`), the
    NICs at their line rate (`nics_per_host` of them), instead of the ideal network."""
    hosts = m.hosts
    if len(hosts) < 2:
        raise CalibrationError(f"rank_hosts: one host ({hosts[0] if hosts else 'none'}); need two to measure a network")
    pairs = fit_pairs(m.pairs)
    seen = {p.src_host for p in pairs} | {p.dst_host for p in pairs}
    if not set(hosts) <= seen:
        raise CalibrationError(f"pairs: no measurement for hosts {sorted(set(hosts) - seen)}")
    detected = detect_racks(pairs, hosts, rack_gap)
    notes: list[str] = []
    if not detected.cliques:
        notes.append(f"detected racks {detected.groups} are not cliques: some pairs inside a group are slow")
    if m.host_racks is None:
        racks, mismatch = detected.groups, None
    else:
        racks = tuple(tuple(g) for g in rack_members(hosts, m.host_racks).values())
        mismatch, note = compare_racks(detected, racks)
        notes += [note] if note else []
    rack_of = {h: f"rack{i}" for i, group in enumerate(racks) for h in group}
    same, cross = split_pairs(pairs, rack_of)
    basis = same or cross  # one host per rack: every pair crosses a rack
    nic = robust([p.bytes_per_s for p in basis])
    latency = robust([p.latency_s for p in basis])
    cross_latency = robust([p.latency_s for p in cross]) if cross else None

    uplink: Optional[UplinkFit] = None
    if len(racks) > 1:
        if m.uplinks:
            uplink, uplink_notes = fit_uplink(m.uplinks, nic.value, (cross_latency or latency).value, clearly_below)
            notes += uplink_notes
        else:
            notes.append("uplinks: not measured; racks taken as non-blocking")
    up_bps = uplink.bytes_per_s if uplink else None

    alpha, rate = ring_figures(m.rank_hosts, rack_of, pairs, nic.value, up_bps)
    collective = fit_collective(m.collectives, "all_reduce", alpha, rate)
    compute, jitter = fit_compute(m.computes) if m.computes else (None, None)
    if m.profile is not None:  # the kept (slowest) rank's profile; the ranks' spread as its residual
        total = m.profile.forward_s + m.profile.backward_s
        compute, jitter = Figure(total, compute.residual if compute else 0.0, compute.samples if compute else 1), None

    checks = {"nic bandwidth": nic, "latency": latency, "compute": compute}
    if uplink is not None:
        checks["uplink"] = Figure(uplink.bytes_per_s or 0.0, uplink.residual, len(uplink.per_rack))
    notes += [
        f"{name}: samples disagree by {fig.residual:.0%} (relative MAD); measure again on a quieter cluster, "
        "with more repeats, or with statistic min (--repeats, --statistic or the config's calibration: section)"
        for name, fig in checks.items()
        if fig is not None and fig.residual > NOISY
    ]
    noisy_pairs = [f"{p.src_host}->{p.dst_host}" for p in pairs if p.residual > NOISY]
    if noisy_pairs:
        notes.append(f"pairs {noisy_pairs}: the α + n/B line misses their points by over {NOISY:.0%} (RMS)")

    folded = fold_efficiency and collective is not None
    ring_crosses = any(rack_of[a] != rack_of[b] for a, b in zip(m.rank_hosts, m.rank_hosts[1:] + m.rank_hosts[:1]))
    if folded and collective is not None:
        scale, alpha_fit, hops = collective.bandwidth_efficiency, collective.step_latency_s, 4 if ring_crosses else 2
    else:
        scale, alpha_fit, hops = 1.0, latency.value, 2 if same else 4
    nccl: Optional[NcclFit] = None
    if nccl_gpu is not None:
        if not m.collectives:
            raise CalibrationError("collectives: none measured; the NCCL model's constants are fitted to them")
        nccl = fit_nccl(m.collectives, nccl_gpu, len(hosts), nics_per_host, line_rate_gbps(nic.value))
        # the model's NCCL moves NIC_EFFICIENCY of a link's line rate; its own per-step latencies cover
        # the software stack, so the cables keep the latency the constants were fitted with
        scale, link_us = 1.0 / NIC_EFFICIENCY, LINK_US
        notes.append(
            f"NCCL model: constants {nccl.constants} reproduce the measured collectives within "
            f"{nccl.median_error:.1%} median, {nccl.worst_error:.1%} worst"
        )
    else:
        link_us = (alpha_fit * 1e6 - 2 * intra_host_latency_us) / hops
        if link_us < 0:
            notes.append(
                f"latency {alpha_fit * 1e6:.2f} us is below 2 x intra_host_latency_us ({intra_host_latency_us} us); "
                "link_latency_us set to 0"
            )
            link_us = 0.0
    cluster = cluster_section(
        racks,
        m.rank_hosts,
        nic.value * scale,
        None if up_bps is None else up_bps * scale,
        link_us,
        datacenters=m.host_datacenters is not None,
    )
    cluster["intra_host_latency_us"] = intra_host_latency_us  # the value link_latency_us was solved with
    workload = workload_section(m, compute.value if compute else None, jitter)
    return CalibrationReport(
        hosts=hosts,
        racks=tuple(tuple(r) for r in racks),
        pairs=pairs,
        nic=nic,
        latency=latency,
        cross_rack_latency=cross_latency,
        detected=detected,
        rack_mismatch=mismatch,
        uplink=uplink,
        collective=collective,
        compute=compute,
        compute_jitter=jitter,
        folded=folded,
        cluster=cluster,
        workload=workload,
        notes=tuple(notes),
        measurements=m,
        simulation=nccl.simulation() if nccl is not None else {"network_model": "ideal"},
    )


def cluster_section(
    racks: Sequence[Sequence[str]],
    rank_hosts: Sequence[str],
    nic_bytes_per_s: float,
    uplink_bytes_per_s: Optional[float],
    link_latency_us: float,
    *,
    datacenters: bool = False,
) -> dict[str, Any]:
    """A `cluster:` mapping: star for one rack, else two_tier (equal racks required). `datacenters`: the
    hosts are a multi_datacenter cluster's, whose shape the config keeps (`real.calibrate.datacenters`):
    the figures alone, under `topology: multi_datacenter`, with the racks' egress as `uplink_gbps`."""
    per_host = {h: rank_hosts.count(h) for h in dict.fromkeys(rank_hosts)}
    if len(set(per_host.values())) != 1:
        raise ValueError(f"rank_hosts: hosts run different numbers of ranks {per_host}; gpus_per_host must be one")
    section: dict[str, Any] = {"topology": "star", "hosts": len(per_host)}
    if datacenters:
        section = {"topology": "multi_datacenter"}
        if uplink_bytes_per_s is not None:
            section["uplink_gbps"] = _round(uplink_bytes_per_s / GBIT)
    elif len(racks) > 1:
        sizes = {len(r) for r in racks}
        if len(sizes) != 1:
            raise ValueError(
                f"host_racks: racks hold {sorted(len(r) for r in racks)} hosts; two_tier needs equal racks"
            )
        section = {"topology": "two_tier", "racks": len(racks), "hosts_per_rack": sizes.pop()}
        if uplink_bytes_per_s is not None:
            section["uplink_gbps"] = _round(uplink_bytes_per_s / GBIT)
    section["gpus_per_host"] = next(iter(per_host.values()))
    section["nic_gbps"] = _round(nic_bytes_per_s / GBIT)
    section["link_latency_us"] = _round(link_latency_us)
    return section


def workload_section(m: Measurements, compute_s: Optional[float], jitter: Optional[float]) -> Optional[dict[str, Any]]:
    """The measured model's `workload:` keys: a zoo model's profile (its file is named by
    `export`), or a synthetic workload from the numerics model; None when no model was measured."""
    if m.profile is not None:
        return {"model": m.profile.model, "batch_size": m.profile.batch_size, "precision": m.profile.precision}
    if compute_s is None or m.gradient_bytes is None or m.batch is None:
        return None
    return {
        "model": "synthetic",
        "batch_size": int(m.batch),
        "gradient_mb": _round(m.gradient_bytes / 1e6),
        "compute_ms": _round(compute_s * 1e3),
        "compute_jitter": _round(jitter or 0.0),
    }


def efficiency_fields(collective: Optional[CollectiveFit]) -> dict[str, float]:
    """The proposed collective-only fields (not in sim/config/schema.py yet), for a report or a proposal."""
    if collective is None:
        return {}
    return {
        "collective_efficiency": collective.bandwidth_efficiency,
        "collective_step_us": collective.step_latency_s * 1e6,
    }


def _round(x: float) -> float:
    """Six significant digits: readable YAML, far below measurement noise."""
    return float(f"{x:.6g}")
