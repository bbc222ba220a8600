"""The network's numba kernels, imported on first use.

Importing numba takes about 0.2 s, longer than a small run's whole simulation, so neither
`sim.network.maxmin_jit` nor `sim.network.flows_jit` is imported until a run first solves compiled
(`sim.network.flows.COMPILE_AFTER`). Without numba, where it fails to import, or with
SYNCSIM_NO_JIT=1 set, the numpy path carries on: both give the same rates to the bit.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from types import ModuleType
from typing import Optional


@functools.cache
def kernels(module: str) -> Optional[ModuleType]:
    """`sim.network.<module>` once imported, or None where compiled solves are off or numba cannot load."""
    if os.environ.get("SYNCSIM_NO_JIT"):
        return None
    try:
        return importlib.import_module(f"sim.network.{module}")
    except ImportError:
        return None


def flows_kernels() -> Optional[ModuleType]:
    """`sim.network.flows_jit` (one recompute in one call), or None."""
    return kernels("flows_jit")


def progressive_filling() -> Optional[Callable[..., object]]:
    """`sim.network.maxmin_jit.progressive_filling`, or None."""
    module = kernels("maxmin_jit")
    return None if module is None else module.progressive_filling
