"""syncsim's discrete-event simulator.

The public API is small: `simulate(config) -> Result`, `load_config(path)`, and the `Result` tables.
Heavy modules are imported on first use so that `import sim.zoo` stays cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = ["simulate", "load_config", "Result", "SyncsimError", "ConfigError"]

_LAZY = {
    "simulate": ("sim.api", "simulate"),
    "Result": ("sim.results", "Result"),
    "load_config": ("sim.config", "load_config"),
    "SyncsimError": ("sim.errors", "SyncsimError"),
    "ConfigError": ("sim.errors", "ConfigError"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
