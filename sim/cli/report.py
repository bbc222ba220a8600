"""`syncsim report FOLDER`: the self-contained HTML page of a run or a sweep (sim/report), and the
provenance record `run` and `sweep` leave beside their tables for it."""

from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from sim.cli.common import Subparsers, version, writing


def add_report(sub: Subparsers) -> None:
    """`syncsim report FOLDER [--out FILE]`."""
    report = sub.add_parser("report", help="write one self-contained HTML page of a run or a sweep folder")
    report.add_argument("folder", help="a folder `syncsim run` or `syncsim sweep` wrote")
    report.add_argument("--out", help="the HTML file to write (default: FOLDER/report.html)")
    report.set_defaults(func=_cmd_report)


def _cmd_report(args: argparse.Namespace) -> int:
    from sim.report import write_report

    folder = Path(args.folder)
    with writing(Path(args.out).parent if args.out else folder, "writing the report"):
        path = write_report(folder, args.out)
    print(f"report: {path}")
    return 0


def add_report_flag(parser: argparse.ArgumentParser) -> None:
    """`--report` on `run` and `sweep`."""
    parser.add_argument("--report", action="store_true", help="also write OUT/report.html (see `syncsim report`)")


class Provenance:
    """Times a command and leaves its provenance.json (sim/report/provenance.py) in its output folder."""

    def __init__(self, argv: list[str], seed: Optional[int], config_name: str) -> None:
        self.argv, self.seed, self.config_name = argv, seed, config_name
        self.started, self.clock = datetime.now(timezone.utc), time.perf_counter()

    def write(self, folder: Path) -> None:
        from sim.report.provenance import provenance, write_provenance

        record = provenance(version(), self.argv, self.seed, self.started, time.perf_counter() - self.clock)
        record["config"] = self.config_name
        with writing(folder, "writing provenance.json"):
            write_provenance(folder, record)


def report_after(folder: Path) -> None:
    """`--report`: the page of what the command just wrote."""
    from sim.report import write_report

    with writing(folder, "writing the report"):
        print(f"report: {write_report(folder)}")
