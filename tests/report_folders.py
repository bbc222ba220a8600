"""A small run folder and a small sweep folder, written through the CLI with `--report`, for the report's
tests (tests/test_report.py in-process, tests/test_report_browser.py in Chromium)."""

from __future__ import annotations

from pathlib import Path

import yaml

from sim.cli import main

ROOT = Path(__file__).parent.parent


def run_folder(tmp: Path) -> Path:
    """quickstart at 3 iterations, run with --report."""
    data = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text()) | {"iterations": 3}
    config = tmp / "quickstart_small.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp / "run"
    assert main(["run", str(config), "--out", str(out), "--quiet", "--no-plot", "--report"]) == 0
    return out


def sweep_folder(tmp: Path) -> Path:
    """zen_density's sweep cut to 3 densities and 3 policies, run with --report."""
    data = yaml.safe_load((ROOT / "configs" / "sweeps" / "zen_density.yaml").read_text())
    data["sweep"]["grid"]["workload.sparsity.topk"] = [0.001, 0.01, 0.1]
    data["policies"] = data["policies"][:3]
    config = tmp / "zen_small.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp / "sweep"
    assert main(["sweep", str(config), "--out", str(out), "--quiet", "--jobs", "1", "--report"]) == 0
    return out
