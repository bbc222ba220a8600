"""The configs (and measured validations) that ship with syncsim, found from anywhere (notebooks,
examples, a user's own folder)."""

from __future__ import annotations

from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
MEASURED = CONFIGS.parent / "docs" / "validation"


def bundled(name: str) -> Path:
    """The bundled config `name` (e.g. "quickstart.yaml", "sweeps/dssync_oversubscription.yaml")."""
    path = CONFIGS / name
    if not path.is_file():
        shown = ", ".join(sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml")))
        raise FileNotFoundError(f"no bundled config {name!r}; bundled: {shown}")
    return path


def measured(name: str) -> Path:
    """A bundled `syncsim validate` output folder (e.g. "validate_2x2"): real runs measured on this
    project's emulated clusters, for notebooks and examples to read."""
    path = MEASURED / name
    if not (path / "validation.csv").is_file():
        shown = ", ".join(sorted(p.parent.name for p in MEASURED.glob("*/validation.csv")))
        raise FileNotFoundError(f"no bundled validation {name!r}; bundled: {shown or '(none)'}")
    return path
