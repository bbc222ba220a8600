"""The state files that record what each emulation created: one JSON file per tag.

`up` writes the file *before* it creates anything, so a run that crashes half way still leaves a
record that `down` can clean up from; `down` deletes only what a file lists (see lifecycle.py).
The folder is /run/syncsim-emulate (tmpfs: it goes with a reboot, as namespaces do), or
$SYNCSIM_EMULATE_DIR.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Union

from real.emulate.errors import EmulationError
from real.emulate.names import check_tag
from sim.files import atomic_write

ENV = "SYNCSIM_EMULATE_DIR"
DEFAULT_DIR = "/run/syncsim-emulate"

StateDir = Optional[Union[str, Path]]


def state_dir(folder: StateDir = None) -> Path:
    """The state folder: `folder`, else $SYNCSIM_EMULATE_DIR, else /run/syncsim-emulate."""
    return Path(folder or os.environ.get(ENV) or DEFAULT_DIR)


def state_path(tag: str, folder: StateDir = None) -> Path:
    return state_dir(folder) / f"{check_tag(tag)}.json"


def tags(folder: StateDir = None) -> list[str]:
    """Tags with a state file, sorted."""
    root = state_dir(folder)
    return sorted(p.stem for p in root.glob("*.json")) if root.is_dir() else []


def exists(tag: str, folder: StateDir = None) -> bool:
    return state_path(tag, folder).exists()


def read(tag: str, folder: StateDir = None) -> dict[str, Any]:
    """The recorded state of emulation `tag`; EmulationError naming the running tags if there is none."""
    path = state_path(tag, folder)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        running = ", ".join(tags(folder)) or "none"
        raise EmulationError(f"no emulation with tag {tag!r} (no {path}); running: {running}") from None
    except (OSError, ValueError) as exc:
        raise EmulationError(f"cannot read emulation state {path}: {exc}") from None
    if not isinstance(data, dict) or data.get("tag") != tag or not isinstance(data.get("namespaces"), list):
        raise EmulationError(f"{path} is not the state of emulation {tag!r}; inspect it and remove it by hand")
    return data


def write(tag: str, data: dict[str, Any], folder: StateDir = None) -> Path:
    """Write the state of `tag` atomically (a reader sees the old file or the new one, never half)."""
    path = state_path(tag, folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, indent=2) + "\n")
    except OSError as exc:
        raise EmulationError(f"cannot write emulation state {path}: {exc}") from None
    return path


def remove(tag: str, folder: StateDir = None) -> None:
    state_path(tag, folder).unlink(missing_ok=True)
