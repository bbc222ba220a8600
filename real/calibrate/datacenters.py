"""A `multi_datacenter` cluster, calibrated: its datacenters and WAN links kept, the measured figures put in.

Pure (no torch). docs/calibration.md, "Clusters across datacenters". In the simulator a message between
two datacenters takes the path inside each (a NIC hop at each end, plus the uplink hop of a two-tier
datacenter), the border cables (no latency, never limiting: sim/cluster/datacenters.py) and the WAN
link (rtt / 2 one way). So the measurements tell apart, and the calibrated cluster replaces:

- each datacenter's NIC rate, from the pairs of hosts sharing a rack in it, and the cluster's latency
  per hop and intra-host latency, solved as for a one-site cluster (`real.calibrate.fit`);
- each WAN link's round trip: twice what a pair across it takes over a pair inside a rack, less the
  uplink hops of two-tier ends;
- the WAN bandwidth where the rack egress test crosses that link alone: two datacenters, each one
  rack (a star), joined by one link.

A two-tier datacenter's uplinks and the bandwidth of several WAN links stay as configured (a note
says so): the egress test's traffic out of a rack would mix its uplink with the WAN links behind it.
A datacenter of one rack of one host each everywhere gives no pair inside a rack, so a NIC could not
be told from the WAN: `check_calibratable` refuses that cluster, and `custom` datacenters, up front.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Mapping
from typing import Any

from real.calibrate.report import CalibrationReport
from sim.cluster.topology import build_cluster
from sim.config import MultiDatacenterCluster, StarCluster, TwoTierCluster
from sim.errors import ConfigError

GBIT = 1e9 / 8  # bytes per second in one Gbit/s
MIN_RTT_MS = 0.001  # rtt_ms must be > 0; an emulated WAN (no netem) adds a few microseconds at most
# measured figures every datacenter takes (each also sets them, as a written config repeats them)
MEASURED = ("nic_gbps", "link_latency_us", "intra_host_latency_us")


def check_calibratable(cluster: object) -> None:
    """Refuse, before anything runs, a multi_datacenter cluster whose calibrated config could not keep
    its shape (module docstring); any other cluster passes."""
    if not isinstance(cluster, MultiDatacenterCluster):
        return
    for i, dc in enumerate(cluster.datacenters):
        if not isinstance(dc, (StarCluster, TwoTierCluster)):
            raise ConfigError(
                f"cluster.datacenters[{i}].topology: calibration keeps star and two_tier datacenters, "
                f"got {dc.topology!r}"
            )
    view = build_cluster(cluster, 0).view
    ranked = set(view.rank_hosts)
    if not any(len(ranked.intersection(rack.hosts)) >= 2 for rack in view.racks.values()):
        raise ConfigError(
            "cluster.datacenters: calibration tells a NIC from the WAN only between two hosts of one rack, and "
            "every rack here has one; allowed: a star datacenter with hosts >= 2 or a two_tier one with "
            "hosts_per_rack >= 2"
        )


def calibrated_datacenters(base: Mapping[str, Any], report: CalibrationReport) -> tuple[dict[str, Any], list[str]]:
    """`base` (a multi_datacenter `cluster:` mapping) with the figures `report` measured put in, and one
    note per figure kept as configured."""
    cfg = MultiDatacenterCluster.model_validate(dict(base))
    check_calibratable(cfg)
    view = build_cluster(cfg, 0).view
    dc_of = {host: dc for dc, hosts in view.datacenters.items() for host in hosts}
    rack_of = {host: info.rack for host, info in view.hosts.items()}
    strangers = sorted(set(report.hosts) - set(dc_of))
    if strangers:
        raise ValueError(
            f"cluster.datacenters: measured hosts {strangers} are not this cluster's; allowed: {sorted(dc_of)}"
        )
    measured = report.cluster
    # what fit_report applied to the raw NIC rate (a folded efficiency, NCCL's line rate): every rate gets it
    scale = measured["nic_gbps"] * GBIT / report.nic.value
    common = {key: measured[key] for key in MEASURED if key in measured}
    data = copy.deepcopy(dict(base)) | common
    notes: list[str] = []
    entries = []
    for name, dc, entry in zip(cfg.names, cfg.datacenters, data["datacenters"]):
        inside = [
            p.bytes_per_s
            for p in report.pairs
            if dc_of.get(p.src_host) == name == dc_of.get(p.dst_host) and rack_of[p.src_host] == rack_of[p.dst_host]
        ]
        nic = _round(statistics.median(inside) * scale / GBIT) if inside else measured["nic_gbps"]
        if not inside:
            notes.append(f"datacenter {name}: no two hosts share a rack; its NIC takes the cluster's measured rate")
        if isinstance(dc, TwoTierCluster):
            notes.append(f"datacenter {name}: uplink_gbps kept as configured (its rack egress crosses the WAN too)")
        entries.append(dict(entry) | common | {"nic_gbps": nic})
    data["datacenters"] = entries
    data["wan"], wan_notes = _calibrated_wan(cfg, data["wan"], report, dc_of, scale)
    return data, notes + wan_notes


def _calibrated_wan(
    cfg: MultiDatacenterCluster,
    wan: Mapping[str, Any],
    report: CalibrationReport,
    dc_of: Mapping[str, str],
    scale: float,
) -> tuple[dict[str, Any], list[str]]:
    """`cluster.wan` with each link's measured round trip and, where the egress test measured it, bandwidth."""
    wan = copy.deepcopy(dict(wan))
    uplink_hops = {name: int(isinstance(dc, TwoTierCluster)) for name, dc in zip(cfg.names, cfg.datacenters)}
    hop_s = report.cluster["link_latency_us"] * 1e-6
    links = cfg.wan_links()
    entries = [dict(e) for e in wan.get("links") or [{"a": link.a, "b": link.b} for link in links]]
    notes = []
    for link, entry in zip(links, entries):
        extra = [
            p.latency_s - report.latency.value - (uplink_hops[link.a] + uplink_hops[link.b]) * hop_s
            for p in report.pairs
            if {dc_of.get(p.src_host), dc_of.get(p.dst_host)} == {link.a, link.b}
        ]
        if extra:  # one way is rtt / 2
            entry["rtt_ms"] = max(MIN_RTT_MS, _round(2e3 * statistics.median(extra)))
        else:
            notes.append(f"{link.where}: no host pair across {link.a}-{link.b} measured; rtt_ms kept as configured")
    if len(links) == 1:
        wan["rtt_ms"] = entries[0].get("rtt_ms", wan["rtt_ms"])
        if wan.get("links"):
            wan["links"] = entries
    else:  # each link's own round trip, written out (the same links the base resolves to)
        wan["links"] = entries

    one_rack_each = all(isinstance(dc, StarCluster) for dc in cfg.datacenters)
    if len(links) != 1 or not one_rack_each:
        notes.append(
            "cluster.wan: bandwidth_gbps kept as configured (only one link between two star datacenters is "
            "measured alone by the rack egress test)"
        )
    elif report.uplink is None or report.uplink.bytes_per_s is None:
        notes.append("cluster.wan: the WAN did not limit the rack egress test; bandwidth_gbps kept as configured")
    else:
        wan["bandwidth_gbps"] = _round(report.uplink.bytes_per_s * scale / GBIT)
        for entry in wan.get("links") or []:
            entry.pop("bandwidth_gbps", None)
        if links[0].bandwidth_trace is not None:
            notes.append(
                f"{links[0].where}.bandwidth_trace: kept; it overrides the measured bandwidth_gbps from its "
                "first row on"
            )
    return wan, notes


def _round(x: float) -> float:
    """Six significant digits, as `real.calibrate.fit` writes its figures."""
    return float(f"{x:.6g}")
