"""A calibrated syncsim config: the base config with what the calibration measured put in, on the
ideal network (`simulation.network_model: ideal`: the measured figures are the collectives' own) or,
calibrated over NCCL, on the NCCL model with the constants fitted to the measured collectives.

A multi_datacenter cluster keeps its datacenters and WAN links, with what was measured of them put in
(`real.calibrate.datacenters`); the next paragraph is about one-site clusters.

The cluster keeps the base's structure and settings (topology, racks, hosts, placement, server hosts,
...); only the measured figures are replaced (`MEASURED_CLUSTER`; an uplink measured non-blocking
loses its `uplink_gbps`). When the measured structure differs from the base's (racks detected
otherwise, a custom topology), the report's structure is used with `KEEP_CLUSTER` from the base.
Every policy keeps the plan it has in the base config (`real.calibrate.plans`): where a measured
figure would change it, the plan is pinned and a note says so.

When the calibration profiled the workload's zoo model, the workload keeps its model and settings,
and `workload.profile` names the measured profile, written beside the config (`efficiency`, which
a profile replaces, is dropped). Otherwise the workload becomes the synthetic one the numerics
model implies (its gradient size and lockstep compute time).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from real.calibrate.datacenters import calibrated_datacenters
from real.calibrate.plans import keep_plans
from real.calibrate.report import CalibrationReport
from sim.compute.profile import write_profile
from sim.config import Config, parse_config
from sim.files import atomic_write

# what calibration measures of a cluster: replaced; everything else of the base's cluster is kept
MEASURED_CLUSTER = ("nic_gbps", "uplink_gbps", "link_latency_us", "intra_host_latency_us")
# the cluster's shape: the base's and the report's must agree for the base's cluster to be kept
STRUCTURE = ("topology", "racks", "hosts_per_rack", "hosts", "gpus_per_host")
# base settings calibration does not measure, kept when the measured structure differs from the base's
KEEP_CLUSTER = ("gpu", "intra_host_gbps", "intra_host_latency_us", "placement", "nics_per_host")
KEEP_WORKLOAD = ("bucket_mb", "synthetic_layers")
REPLACED_BY_PROFILE = ("efficiency", "profile")


def calibrated_config(
    report: CalibrationReport, base_config: Union[Config, Mapping[str, Any]], profile_path: str = "profile.yaml"
) -> dict[str, Any]:
    """`base_config` (name, policies, iterations, ...) with calibrated `cluster:` and, when a model
    was measured, `workload:`, every policy's plan kept (see the module docstring); validated with
    `sim.config.parse_config` (raises ConfigError). `profile_path` is what `workload.profile` says
    when the report carries a profile (a relative path is read relative to the config file)."""
    return calibrated_config_with_notes(report, base_config, profile_path)[0]


def calibrated_config_with_notes(
    report: CalibrationReport, base_config: Union[Config, Mapping[str, Any]], profile_path: str = "profile.yaml"
) -> tuple[dict[str, Any], list[str]]:
    """`calibrated_config`, and one note per figure of a multi_datacenter cluster kept as configured
    (`real.calibrate.datacenters`) and per plan a measured figure would have changed."""
    if isinstance(base_config, Config):  # its values as YAML can write them back (1e-08 stays a number)
        base_config = base_config.model_dump(mode="json")
    if not isinstance(base_config, Mapping):
        raise ValueError(f"base_config: expected a mapping, got {type(base_config).__name__}")
    data = copy.deepcopy(dict(base_config))
    cluster_notes: list[str] = []
    if (data.get("cluster") or {}).get("topology") == "multi_datacenter":
        data["cluster"], cluster_notes = calibrated_datacenters(data["cluster"], report)
    else:
        data["cluster"] = calibrated_cluster(data.get("cluster") or {}, report.cluster)
    base_workload = data.get("workload") or {}
    if report.workload is not None and report.profile is not None:
        kept = {k: v for k, v in base_workload.items() if k not in REPLACED_BY_PROFILE}
        data["workload"] = kept | report.workload | {"profile": str(profile_path)}
    elif report.workload is not None:
        data["workload"] = {k: base_workload[k] for k in KEEP_WORKLOAD if k in base_workload} | report.workload
    elif "workload" not in data:
        raise ValueError("base_config.workload: required when the calibration measured no model")
    # gloo: the measured latency and bandwidths are what this cluster's collectives reach end to end,
    # and the alpha-beta network takes them as they are (the NCCL model would apply NCCL's on top);
    # NCCL: the NCCL model, with constants fitted to the measured collectives
    simulation = dict(data.get("simulation") or {})
    nccl = report.simulation.get("nccl")
    if nccl is not None:
        simulation["nccl"] = dict(simulation.get("nccl") or {}) | nccl
    data["simulation"] = simulation | {"network_model": report.simulation["network_model"]}
    parse_config(data)
    data, plan_notes = keep_plans(base_config, data)
    return data, cluster_notes + plan_notes


def calibrated_cluster(base: Mapping[str, Any], measured: Mapping[str, Any]) -> dict[str, Any]:
    """The base's cluster with the measured figures in, when the measured structure is the base's;
    else the measured cluster with the base's `KEEP_CLUSTER` settings."""
    if measured.get("topology") == "multi_datacenter":
        raise ValueError(
            f"cluster.topology: measured as multi_datacenter, but the config's is {base.get('topology')!r}; "
            "calibrate the config whose cluster was measured"
        )
    same = all(base.get(k) == v for k, v in measured.items() if k in STRUCTURE)
    if not same or base.get("topology") not in ("star", "two_tier"):
        return {k: base[k] for k in KEEP_CLUSTER if k in base} | dict(measured)
    kept = {k: v for k, v in base.items() if k not in MEASURED_CLUSTER}
    return kept | {k: v for k, v in measured.items() if k in MEASURED_CLUSTER}


def write_calibrated_config(
    report: CalibrationReport,
    base_config: Union[Config, Mapping[str, Any]],
    path: Union[str, Path],
    echo: Optional[Callable[[str], None]] = None,
) -> Path:
    """Write the calibrated config as YAML, headed by the report's summary and the plan notes as
    comments, and a measured profile beside it (`<stem>.profile.yaml`); `echo` gets each plan note."""
    path = Path(path)
    profile_file = path.with_name(f"{path.stem}.profile.yaml")
    data, notes = calibrated_config_with_notes(report, base_config, profile_file.name)
    for note in notes if echo is not None else ():
        echo(note)
    lines = ["calibrated by real.calibrate", *report.summary().splitlines(), *notes]
    header = "".join(f"# {line}\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    if report.profile is not None:
        write_profile(report.profile, profile_file)
    atomic_write(path, header + yaml.safe_dump(data, sort_keys=False))
    return path
