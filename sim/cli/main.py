"""`syncsim` command line: the parser (one module per group of commands: `simulation`, `hardware`,
`experiments`; `emulate` is real.emulate's) and the exit codes every command shares.

Exit codes: 0 success; 1 a policy failed mid-run (results so far are written); 2 invalid config, or
a run whose cost estimate exceeds a `simulation.max_estimated_*` limit (sim/estimate/cost.py); 3 the output
folder is held by another running syncsim command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Optional

from sim.cli.experiments import add_fidelity, add_plot, add_search, add_sweep
from sim.cli.hardware import add_calibrate, add_profile, add_real, add_validate
from sim.cli.simulation import add_check, add_list, add_run
from sim.errors import ConfigError, OutputBusy, SyncsimError


def build_parser() -> argparse.ArgumentParser:
    from real.emulate.cli import add_parser as add_emulate  # `syncsim emulate` is real.emulate's own command

    parser = argparse.ArgumentParser(prog="syncsim", description="Simulate synchronization schemes on a cluster.")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        add_run,
        add_real,
        add_calibrate,
        add_validate,
        add_emulate,
        add_search,
        add_fidelity,
        add_check,
        add_sweep,
        add_plot,
        add_profile,
        add_list,
    ):
        add(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with ExitStack() as args.held:  # output folders locked by the command
            return int(args.func(args))
    except ConfigError as exc:
        print(f"config error in {getattr(args, 'config', '?')}:", file=sys.stderr)
        for line in str(exc).splitlines():
            print(f"  {line}", file=sys.stderr)
        return 2
    except OutputBusy as exc:
        print(f"syncsim: {exc}", file=sys.stderr)
        return 3
    except SyncsimError as exc:  # a step that could not run (calibration, emulation, a policy): its message
        print(f"syncsim {args.command}: {exc}", file=sys.stderr)
        return 1
