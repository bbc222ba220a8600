"""`python -m real CONFIG --out DIR`: one process of a real run (what torchrun and `syncsim real` start)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from real.backends import BACKENDS
from real.launch import LAUNCHED_ENV
from real.results import print_real_results
from real.session import main
from real.timing_run import with_timing_numerics
from sim.config import load_config
from sim.errors import ConfigError, SyncsimError
from sim.flags import SECONDS


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m real", description=__doc__)
    parser.add_argument("config")
    parser.add_argument("--out", required=True, help="results folder (with --calibrate: the calibrated YAML)")
    parser.add_argument("--calibrate", action="store_true", help="measure the cluster instead of training")
    parser.add_argument("--timeout", type=SECONDS, default=60.0, help="seconds before a silent peer counts as dead")
    parser.add_argument("--backend", choices=BACKENDS, default="auto")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="change one config setting")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.set)
        if args.calibrate:
            from real.calibrate.session import main as calibrate

            return calibrate(config, Path(args.out), args.timeout, args.backend)
        code = main(with_timing_numerics(config), Path(args.out), args.timeout, args.backend)
        if code == 0 and os.environ.get("RANK") == "0" and not os.environ.get(LAUNCHED_ENV):
            print_real_results(Path(args.out))  # torchrun: no parent of ours prints it
        return code
    except ConfigError as exc:
        print(f"config error in {args.config}: {exc}", file=sys.stderr)
        return 2
    except SyncsimError as exc:  # a calibration that cannot fit a figure, ...: one line, not a traceback
        print(f"rank {os.environ.get('RANK', '?')}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
