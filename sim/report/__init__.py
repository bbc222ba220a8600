"""`syncsim report`: one self-contained HTML page per run or sweep folder (sim/report/page.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from sim.errors import UsageError
from sim.files import atomic_write
from sim.report.names import REPORT_FILE


def write_report(folder: str | Path, out: Optional[str | Path] = None) -> Path:
    """Write the report of the run or sweep in `folder` to `out` (default `folder/report.html`)."""
    from sim.experiments.sweep_runner import ERRORS_FILE, TABLE_FILE
    from sim.report.page import run_page, sweep_page

    folder = Path(folder)
    if (folder / TABLE_FILE).is_file():
        text = sweep_page(folder, TABLE_FILE, ERRORS_FILE)
    elif (folder / "summary.csv").is_file() and (folder / "config.yaml").is_file():
        text = run_page(folder)
    else:
        raise UsageError(
            f"folder: {folder} holds neither a run (summary.csv and config.yaml) nor a sweep ({TABLE_FILE}); "
            "name a folder `syncsim run` or `syncsim sweep` wrote"
        )
    path = Path(out) if out is not None else folder / REPORT_FILE
    atomic_write(path, text)
    return path
