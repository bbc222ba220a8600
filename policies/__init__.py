"""Synchronization policies: backend-agnostic objects that decide what to synchronize with whom.

Nothing here imports simpy or torch (docs/policies.md): policies yield ops from `policies.ops`, and a
backend executes them.
"""

from policies.asp import ASP
from policies.base import Bucket, Policy, SettingError
from policies.ds_sync import DSSync
from policies.hierarchical import Hierarchical
from policies.no_sync import NoSync
from policies.ps import ParameterServer
from policies.registry import available, create, resolve
from policies.ring import Ring
from policies.ssp import SSP
from policies.view import ClusterView, HostInfo, ModelInfo, RackInfo

__all__ = [
    "ASP",
    "SSP",
    "Bucket",
    "ClusterView",
    "DSSync",
    "Hierarchical",
    "HostInfo",
    "ModelInfo",
    "NoSync",
    "ParameterServer",
    "Policy",
    "RackInfo",
    "Ring",
    "SettingError",
    "available",
    "create",
    "resolve",
]
