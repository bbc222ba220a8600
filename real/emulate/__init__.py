"""An emulated cluster on one Linux machine: a network namespace per host, Linux bridges for the
switches, veth pairs shaped at the NICs and rack uplinks, with per-connection fair queues by default
(docs/emulation.md).

    with emulated_cluster(load_config("configs/x.yaml"), scale=0.01) as emu:
        argv = emu.exec_prefix("h0") + ["python", "worker.py", "--addr", emu.address("h0")]

The names below load their modules on first use (PEP 562), so that `syncsim`'s parser, which reads
`real.emulate.shaping` and `real.emulate.cli`, does not import the cluster builder and every policy.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DEFAULT_SUBNET": "real.emulate.names",
    "EmulatedHost": "real.emulate.emulation",
    "Emulation": "real.emulate.emulation",
    "EmulationError": "real.emulate.errors",
    "EmulationPlan": "real.emulate.plan",
    "down": "real.emulate.lifecycle",
    "down_all": "real.emulate.lifecycle",
    "emulated_cluster": "real.emulate.lifecycle",
    "plan_cluster": "real.emulate.plan",
    "plan_config": "real.emulate.plan",
    "up": "real.emulate.lifecycle",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'real.emulate' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
