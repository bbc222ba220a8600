"""What every `syncsim` command shares: `--set` overrides, the held output folder, the torch check."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TypeVar

from sim.errors import ConfigError

T = TypeVar("T")

Subparsers = argparse._SubParsersAction  # what add_subparsers() returns; argparse keeps the name private


def add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the config, e.g. --set cluster.uplink_gbps=25 --set policies[0].group_size=4 "
        "(the value is read as YAML; repeat for several)",
    )


def hold(args: argparse.Namespace, out: Path) -> Path:
    """Lock the output folder for the rest of the command (another run into it is refused)."""
    from sim.files import hold_output

    command = " ".join(str(part) for part in (args.command, getattr(args, "config", None)) if part)
    args.held.enter_context(hold_output(out, command=f"syncsim {command}"))
    return out


def require_torch(command: str) -> None:
    """The real backend needs torch; say how to install it instead of a ModuleNotFoundError traceback."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"`syncsim {command}` runs torch.distributed and torch is not installed; install it with: "
            "pip install -c constraints.txt -e '.[numerics]' "
            "(README.md, 'Which PyTorch you get': the CPU or the CUDA build)"
        ) from None


def progress(desc: str, at_least: int = 1_000) -> Callable[[Iterator[T], int], Iterable[T]]:
    """A `progress(items, total)` for long loops (a sweep's points): a bar on stderr when it is a
    terminal, else one line saying what is under way; silent below `at_least` items."""

    def wrap(items: Iterator[T], total: int) -> Iterable[T]:
        if total < at_least:
            return items
        if not sys.stderr.isatty():
            print(f"{desc} {total:,} points...", file=sys.stderr, flush=True)
            return items
        from tqdm.auto import tqdm

        return tqdm(items, total=total, desc=desc, unit=" points", dynamic_ncols=True, leave=False)

    return wrap
