"""Where a run's results came from: `provenance.json` beside its tables, written by `syncsim run` and
`syncsim sweep`, read by the report.

It records what a reader needs to reproduce or doubt a figure: the syncsim version, the command line, the
config's seed, when and how long it ran, and the machine (OS, Python, CPU count, the versions of the
libraries the results depend on). Nothing in it changes a result: two runs of one config and seed differ
here only in time, duration and machine.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Optional

from sim.files import atomic_write

PROVENANCE_FILE = "provenance.json"
LIBRARIES = ("simpy", "numpy", "pandas", "torch", "networkx", "pydantic", "matplotlib", "plotly")


def library_versions() -> dict[str, Optional[str]]:
    """The installed version of each library results depend on (None: not installed)."""
    found: dict[str, Optional[str]] = {}
    for name in LIBRARIES:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def provenance(
    syncsim: str, argv: Sequence[str], seed: Optional[int], started: datetime, wall_s: float
) -> dict[str, Any]:
    """The record for syncsim version `syncsim` run as `argv` (its arguments after `syncsim`), begun at
    `started` and taking `wall_s` seconds."""
    return {
        "syncsim": syncsim,
        "command": "syncsim " + " ".join(argv),
        "seed": seed,
        "started_utc": started.astimezone(timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(wall_s, 3),
        "machine": {
            "hostname": platform.node(),
            "platform": platform.platform(),
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
        },
        "libraries": library_versions(),
    }


def write_provenance(folder: Path, record: dict[str, Any]) -> Path:
    """`record` as `folder/provenance.json`."""
    path = Path(folder) / PROVENANCE_FILE
    atomic_write(path, json.dumps(record, indent=2) + "\n")
    return path


def read_provenance(folder: Path) -> Optional[dict[str, Any]]:
    """The folder's record, or None where the folder was written without one (an older version, the API)."""
    path = Path(folder) / PROVENANCE_FILE
    if not path.is_file():
        return None
    return json.loads(path.read_text())
