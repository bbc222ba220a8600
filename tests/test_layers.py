"""The layering of docs/architecture.md: import-linter's contracts in pyproject.toml hold on this tree,
every package of sim/ has a place in them, and they break on a copy of the tree given a back-edge, a
pair of modules that import each other, or a policy that imports torch. No module imports a module
that imports it back, a package's `__init__` and its own modules included (which import-linter's
sibling contract does not look at)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10: import-linter brings tomli
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sim", "policies", "real")


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` on the tree at `root`, importing its packages from there (not from this checkout)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )


def layers() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["type"] == "layers"]
    return layered["layers"]  # type: ignore[no-any-return]


def imports(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of package `root` it imports anywhere in its file (lazy imports too). `from P import
    x` imports P (its `__init__` runs first) and P.x too where that is a module."""
    paths = {p: p.relative_to(root.parent).with_suffix("").parts for p in root.rglob("*.py")}
    names = {".".join(parts[:-1] if parts[-1] == "__init__" else parts): p for p, parts in paths.items()}
    out: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        out[name] = {m for m in found if m in names and m != name}
    return out


def mutual_pairs(root: Path) -> list[tuple[str, str]]:
    graph = imports(root)
    return sorted((a, b) for a, deps in graph.items() for b in deps if a < b and a in graph.get(b, set()))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the packages and the contracts, to break."""
    for name in PACKAGES:
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def add_import(module: Path, statement: str) -> None:
    """`statement` inside a function at the end of `module`: a lazy import is still an import."""
    with module.open("a") as f:
        f.write(f"\n\ndef _added() -> None:\n    {statement}  # noqa\n")


def test_the_contracts_hold() -> None:
    proc = lint_imports(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 3 kept, 0 broken." in proc.stdout


def test_every_package_of_sim_has_a_layer() -> None:
    placed = {m.strip() for line in layers() for m in line.replace(":", "|").split("|")}
    children = {f"sim.{p.stem}" for p in (ROOT / "sim").glob("*.py") if p.stem != "__init__"}
    children |= {f"sim.{p.parent.name}" for p in (ROOT / "sim").glob("*/__init__.py")}
    assert children - placed == set(), "give each of these a layer in pyproject.toml's [tool.importlinter]"
    assert placed - children - {"real", "policies"} == set(), "layers name modules that do not exist"


def test_no_two_modules_import_each_other() -> None:
    for package in PACKAGES:
        assert mutual_pairs(ROOT / package) == [], package


def test_a_module_that_imports_its_own_package_back_is_a_pair(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("from pkg import b\nA = 1\n")
    (package / "b.py").write_text("import pkg.a\n")
    assert mutual_pairs(package) == [("pkg", "pkg.a"), ("pkg.a", "pkg.b")]


def test_an_import_against_the_layers_breaks_them(tree: Path) -> None:
    add_import(tree / "sim" / "config" / "types.py", "from sim.engine.run import run_policy")
    proc = lint_imports(tree)
    assert proc.returncode == 1
    assert "sim.config is not allowed to import sim.engine" in proc.stdout
    assert "sim.config.types -> sim.engine.run" in proc.stdout


def test_two_modules_that_import_each_other_break_them(tree: Path) -> None:
    # worker imports clocks; clocks importing worker is a cycle inside one layer
    add_import(tree / "sim" / "engine" / "clocks.py", "from sim.engine.worker import IterationRow")
    proc = lint_imports(tree)
    assert proc.returncode == 1
    assert "No cycles are allowed in sim.engine" in proc.stdout


def test_a_policy_that_imports_torch_breaks_them(tree: Path) -> None:
    add_import(tree / "policies" / "ring.py", "import torch")
    proc = lint_imports(tree)
    assert proc.returncode == 1
    assert "policies.ring -> torch" in proc.stdout
