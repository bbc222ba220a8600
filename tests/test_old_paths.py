"""Module paths from before the layered layout still import, as the same module objects, with a
DeprecationWarning naming the new path; the public paths import without one."""

from __future__ import annotations

import importlib
import sys
import warnings
from pathlib import Path

import pytest

from sim.old_paths import MOVED, new_name

SIM = Path(__file__).resolve().parent.parent / "sim"


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_its_new_module_and_says_where(old: str) -> None:
    sys.modules.pop(old, None)  # the alias only: the module itself stays loaded
    with pytest.warns(DeprecationWarning, match=f"{old} is now {MOVED[old]}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])


def test_old_names_are_free() -> None:
    """An alias must never hide a module that exists under that name."""
    for old in MOVED:
        tail = old.removeprefix("sim.").replace(".", "/")
        assert not (SIM / f"{tail}.py").exists() and not (SIM / tail).is_dir(), old


def test_modules_under_an_old_package_path_are_not_loaded_twice() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import sim.zoo.cnn

    import sim.catalog.zoo.cnn

    assert sim.zoo.cnn is sim.catalog.zoo.cnn
    assert new_name("sim.zoo.cnn") == "sim.catalog.zoo.cnn"
    assert new_name("sim.zoology") is None and new_name("sim.config") is None


def test_the_public_paths_need_no_alias() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        from sim import Result as Lazy
        from sim import load_config as lazy_load
        from sim.api import simulate
        from sim.bundled import bundled
        from sim.cli import main
        from sim.config import Config, load_config
        from sim.results import Result
    assert Lazy is Result and lazy_load is load_config
    assert callable(simulate) and callable(main) and bundled("quickstart.yaml").is_file()
    assert isinstance(load_config(bundled("quickstart.yaml")), Config)
