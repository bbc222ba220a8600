"""The import paths of modules before `sim/` became layered packages, kept working.

`import sim.gpus` or `from sim.sweep import load_sweep` still work: the old name is an alias of the
module's new home (the same module object, so nothing is loaded twice), with a DeprecationWarning
naming the new path. Only old paths whose names are free are aliased: `sim.config`, `sim.results`,
`sim.cli`, `sim.network`, `sim.compute` and `sim.engine` are packages now (`sim.config` and
`sim.results` still export `load_config`, `Config` and `Result`; the old modules' other contents
are at `sim.network.flows`, `sim.compute.durations` and `sim.engine.run`).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import Optional

MOVED = {
    "sim.output": "sim.files",
    "sim.gpus": "sim.catalog.gpus",
    "sim.zoo": "sim.catalog.zoo",
    "sim.config_types": "sim.config.types",
    "sim.config_errors": "sim.config.messages",
    "sim.config_yaml": "sim.config.yaml_io",
    "sim.config_extends": "sim.config.extends",
    "sim.config_overrides": "sim.config.overrides",
    "sim.config_reference": "sim.config.reference",
    "sim.config_faults": "sim.config.faults",
    "sim.config_numerics": "sim.config.numerics",
    "sim.config_sparsity": "sim.config.sparsity",
    "sim.config_calibration": "sim.config.calibration",
    "sim.topology": "sim.cluster.topology",
    "sim.routing": "sim.cluster.routing",
    "sim.environment": "sim.kernel.environment",
    "sim.gc_quiet": "sim.kernel.gc_quiet",
    "sim.network_jit": "sim.network.flows_jit",
    "sim.maxmin": "sim.network.maxmin",
    "sim.maxmin_jit": "sim.network.maxmin_jit",
    "sim.sampling": "sim.network.sampling",
    "sim.compute_fit": "sim.compute.fit",
    "sim.roofline": "sim.compute.roofline",
    "sim.profile": "sim.compute.profile",
    "sim.sparsity": "sim.compute.sparsity",
    "sim.sparse_traffic": "sim.compute.sparse_traffic",
    "sim.sparse_costs": "sim.compute.sparse_costs",
    "sim.workload": "sim.compute.workload",
    "sim.worker": "sim.engine.worker",
    "sim.executor": "sim.engine.executor",
    "sim.communicators": "sim.engine.communicators",
    "sim.collectives": "sim.engine.collectives",
    "sim.servers": "sim.engine.servers",
    "sim.clocks": "sim.engine.clocks",
    "sim.faults": "sim.engine.faults",
    "sim.validation": "sim.engine.op_checks",
    "sim.phase_budget": "sim.engine.phase_budget",
    "sim.phase_runner": "sim.engine.phase_runner",
    "sim.cost": "sim.estimate.cost",
    "sim.cost_model": "sim.estimate.counts",
    "sim.tables": "sim.results.tables",
    "sim.trace": "sim.results.trace",
    "sim.plots": "sim.results.plots",
    "sim.sweep": "sim.experiments.sweep",
    "sim.sweep_runner": "sim.experiments.sweep_runner",
    "sim.sweep_dask": "sim.experiments.sweep_dask",
    "sim.sweep_plot": "sim.experiments.sweep_plot",
    "sim.search": "sim.experiments.search",
    "sim.phase_ensemble": "sim.experiments.ensemble",
}


def new_name(old: str) -> Optional[str]:
    """Where the module once named `old` lives now (`sim.zoo.cnn` -> `sim.catalog.zoo.cnn`), or None."""
    if not old.startswith("sim."):
        return None
    for prefix, home in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return home + old[len(prefix) :]
    return None


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name and loads it as the module at its new name (a meta path finder and
    its loader; `import sim` installs one)."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if new_name(fullname) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        new = new_name(old)
        assert new is not None  # find_spec answered only for old names
        warnings.warn(f"{old} is now {new}; import it from there", DeprecationWarning, stacklevel=2)
        # the import system hands out whatever sys.modules holds under the name once this returns
        sys.modules[old] = target = importlib.import_module(new)
        if hasattr(target, "__path__"):
            # a package: the path finder runs before this one and would load `old.sub` a second time
            # from the package's folder, so its modules are aliased now
            import pkgutil

            for sub in pkgutil.walk_packages(target.__path__, f"{new}."):
                sys.modules[old + sub.name[len(new) :]] = importlib.import_module(sub.name)


def install() -> None:
    """Answer old names once every other finder has found nothing (idempotent): other imports never
    reach this one, so it costs them nothing."""
    if not any(isinstance(finder, OldPaths) for finder in sys.meta_path):
        sys.meta_path.append(OldPaths())
