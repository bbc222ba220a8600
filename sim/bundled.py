"""The configs that ship with syncsim, found from anywhere (notebooks, examples, a user's own folder)."""

from __future__ import annotations

from pathlib import Path

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def bundled(name: str) -> Path:
    """The bundled config `name` (e.g. "quickstart.yaml", "sweeps/dssync_oversubscription.yaml")."""
    path = CONFIGS / name
    if not path.is_file():
        shown = ", ".join(sorted(str(p.relative_to(CONFIGS)) for p in CONFIGS.rglob("*.yaml")))
        raise FileNotFoundError(f"no bundled config {name!r}; bundled: {shown}")
    return path
