"""What in the config alone rules host symmetry out (`sim.engine.symmetry`): apart, so that the cost
estimate can ask it before anything is built without importing the tables' pandas and the router."""

from __future__ import annotations

from typing import Optional

from policies.base import Policy
from sim.config import Config

SYMMETRIC_TOPOLOGIES = ("star", "two_tier", "fat_tree", "rail_optimized")


def config_reason(config: Config, policy: Policy, numerics: bool) -> Optional[str]:
    """Why the config alone rules host symmetry out (None: the cluster decides, `why_not_symmetric`);
    `policy` bound. The cost estimate (sim/estimate) asks this before anything is built."""
    sim, workload, faults = config.simulation, config.workload, config.faults
    checks = (
        (sim.host_symmetry == "off", "simulation.host_symmetry is off"),
        (numerics, "numerics trains a replica per rank"),
        (not policy.host_symmetric, f"policy {policy.name!r} does not run the same program on every host"),
        (sim.network_model == "ideal" and sim.collective_model != "pipelined", "stepwise collectives"),
        (config.cluster.topology not in SYMMETRIC_TOPOLOGIES, f"topology {config.cluster.topology!r}"),
        (config.cluster.placement != "packed", f"placement {config.cluster.placement!r}"),
        (workload.compute_jitter > 0, "compute jitter differs per rank"),
        (workload.input_samples_s is not None, "host input pipelines"),
        (bool(faults.slow_workers or faults.stragglers or faults.departures), "faults"),
        (bool(config.background), "background traffic"),
    )
    return next((reason for failed, reason in checks if failed), None)
