"""`syncsim` command line: the parser (one module per group of commands: `simulation`, `hardware`,
`experiments`; `emulate` is real.emulate's) and the exit codes every command shares.

Exit codes: 0 success; 1 a policy failed mid-run (results so far are written), or the output folder
cannot be written (read-only, a file, a full disk: one line naming `--out`); 2 an argument error (an
unknown flag, a bad `--set`, a flag's value outside the allowed ones: one line, `argument error`), an
invalid config, or a run whose cost estimate exceeds a `simulation.max_estimated_*` limit
(sim/estimate/cost.py); 3 the output folder is held by another running syncsim command; 130 stopped
by Ctrl-C, 143 by SIGTERM (one line on stderr; what finished is kept).
"""

from __future__ import annotations

import argparse
import gc
import signal
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from typing import NoReturn, Optional

from sim.cli.common import Parser, exit_code, version
from sim.cli.experiments import add_bandwidth, add_fidelity, add_plot, add_search, add_sweep
from sim.cli.hardware import add_calibrate, add_profile, add_real, add_validate
from sim.cli.report import add_report
from sim.cli.simulation import add_check, add_list, add_run
from sim.errors import ConfigError, OutputBusy, SyncsimError, Terminated, UsageError, signal_name
from sim.files import not_a_link


def build_parser() -> argparse.ArgumentParser:
    from real.emulate.cli import add_parser as add_emulate  # `syncsim emulate` is real.emulate's own command

    parser = Parser(prog="syncsim", description="Simulate synchronization schemes on a cluster.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
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
        add_bandwidth,
        add_plot,
        add_report,
        add_profile,
        add_list,
    ):
        add(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed: provenance.json records it
    if unknown:  # named by the command's parser, whose --help lists what it takes
        _command_parser(parser, args).error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if isinstance(getattr(args, "out", None), str):  # every command's --out, folder or file, before it runs
            not_a_link(args.out)
        with ExitStack() as args.held, _sigterm_interrupts():  # output folders locked by the command
            return int(args.func(args))
    except KeyboardInterrupt as stop:  # wherever it came (a command's own handler says more)
        print(f"\nsyncsim {args.command}: stopped by {signal_name(stop)}", file=sys.stderr)
        return exit_code(stop)
    except UsageError as exc:  # a flag's value: the flag is named, the config is not at fault
        for line in str(exc).splitlines():
            print(f"syncsim {args.command}: argument error: {line}", file=sys.stderr)
        return 2
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


def console() -> NoReturn:
    """The `syncsim` console script (and `python -m sim.cli`): `main`, then exit.

    Before exiting, every object left is frozen out of the garbage collector: the interpreter's last
    collections would otherwise walk all of them (pandas', pydantic's, the run's) only to free what the
    process's exit frees anyway, 0.2 s of a small run's 1.2 s. Finalizers still run as modules are
    cleared; only cyclic garbage goes uncollected, and every file a command writes is closed by then."""
    code = main()
    gc.freeze()
    sys.exit(code)


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the (sub)command `args` ran: `syncsim emulate up`'s for `emulate up`."""
    while True:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or getattr(args, sub.dest, None) is None:
            return parser
        parser = sub.choices[getattr(args, sub.dest)]


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated("SIGTERM")


class _sigterm_interrupts:
    """While a command runs, SIGTERM stops it as Ctrl-C does (raising `Terminated`, a KeyboardInterrupt),
    so that it keeps what finished and says so in one line; the previous handler comes back after.
    Only in the main thread, where Python can install handlers."""

    def __enter__(self) -> None:
        import threading

        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGTERM, _raise_terminated)

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGTERM, self.previous)
