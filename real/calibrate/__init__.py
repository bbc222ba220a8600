"""Calibration: measure a real cluster (torch.distributed) and fit the simulator's parameters.

    report = calibrate(rank, world, rank_hosts, host_racks, task)   # every rank, after init_process_group
    if report is not None:                                          # rank 0
        write_calibrated_config(report, base_config_dict, "calibrated.yaml")
        report.rows()                                               # raw measurements, flat rows per kind

`measure`, `probe` (message sizes) and `profiled` (a zoo model's per-layer compute) run on a process
group; `figures`, `fit`, `sizes`, `export` and `plans` (every policy keeps the plan it has in the base
config) are pure and import no torch, so measurements can be
fitted anywhere; `calibrate` (and those submodules) load torch only when used. docs/calibration.md.
"""

from __future__ import annotations

from typing import Any

from real.calibrate.errors import CalibrationError
from real.calibrate.export import calibrated_config, write_calibrated_config
from real.calibrate.fit import fit_report
from real.calibrate.report import CalibrationReport
from real.calibrate.rows import CollectiveSample, ComputeSample, Measurements, PairSample, UplinkSample

__all__ = [
    "CalibrationError",
    "CalibrationReport",
    "CollectiveSample",
    "ComputeSample",
    "Measurements",
    "PairSample",
    "UplinkSample",
    "calibrate",
    "calibrated_config",
    "fit_report",
    "write_calibrated_config",
]


def __getattr__(name: str) -> Any:
    if name == "calibrate":  # imports torch.distributed
        from real.calibrate.run import calibrate

        return calibrate
    raise AttributeError(f"module 'real.calibrate' has no attribute {name!r}")
