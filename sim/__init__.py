"""syncsim's discrete-event simulator, as layered packages (docs/architecture.md): `catalog` and
`config` at the bottom; `cluster`, `network` (on the `kernel`) and `compute`; `numerics`; `engine`
and `estimate`; `results`; `api`; `experiments`; the CLI on top.

The public API is small: `simulate(config) -> Result`, `load_config(path)`, and the `Result` tables.
Heavy modules are imported on first use so that `import sim.catalog.zoo` stays cheap. Module paths
from before the layered layout still import (`sim.old_paths`), with a DeprecationWarning.
"""

from __future__ import annotations

from typing import Any

from sim import old_paths

__all__ = ["simulate", "load_config", "Result", "SyncsimError", "ConfigError"]

_LAZY = {
    "simulate": ("sim.api", "simulate"),
    "Result": ("sim.results", "Result"),
    "load_config": ("sim.config", "load_config"),
    "SyncsimError": ("sim.errors", "SyncsimError"),
    "ConfigError": ("sim.errors", "ConfigError"),
}

old_paths.install()


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
