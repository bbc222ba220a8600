"""The config layer: the YAML schema, reading and validating a config (extends, overrides), and the
wording of its errors. Imports only `sim.catalog` (the names it validates against), `policies` (their
settings) and `sim.errors`.

`from sim.config import load_config, Config` is the public way in; the modules say the rest.
"""

from sim.config.load import dump_config, load_config, parse_config, read_config
from sim.config.schema import (
    ClusterBase,
    ClusterConfig,
    Config,
    CustomCluster,
    FatTreeCluster,
    MultiDatacenterCluster,
    PolicyEntry,
    RailOptimizedCluster,
    SimulationConfig,
    StarCluster,
    TwoTierCluster,
    WorkloadConfig,
)

__all__ = [
    "ClusterBase",
    "ClusterConfig",
    "Config",
    "CustomCluster",
    "FatTreeCluster",
    "MultiDatacenterCluster",
    "PolicyEntry",
    "RailOptimizedCluster",
    "SimulationConfig",
    "StarCluster",
    "TwoTierCluster",
    "WorkloadConfig",
    "dump_config",
    "load_config",
    "parse_config",
    "read_config",
]
