"""What every `syncsim` command shares: `--set` overrides, the held output folder, the torch check."""

from __future__ import annotations

import argparse
import errno
import re
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from sim.errors import ConfigError, OutputError, signal_name

# a writer's hidden temporary (sim.files), named in a message as the file it stood for
TEMPORARY = re.compile(r"^\.(.+)\.[0-9a-f]{8}\.tmp(\.[A-Za-z0-9]+)?$")

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
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out}: is a file, not a folder; name a folder (it is created if missing)")
    with writing(out, "cannot create or lock the folder", kept=False):
        args.held.enter_context(hold_output(out, command=f"syncsim {command}"))
    return out


@contextmanager
def writing(out: Path, doing: str, kept: bool = True) -> Iterator[None]:
    """An OSError in the block (a read-only folder, a full disk) becomes one line naming `--out`; files
    written before it stay (each is written atomically, summary.csv last), which the line says (`kept`)."""
    try:
        yield
    except OSError as exc:
        shown = TEMPORARY.sub(r"\1\2", Path(exc.filename).name) if exc.filename else ""
        name = f" ({shown})" if shown else ""
        reason = exc.strerror or str(exc)
        hint = {
            errno.ENOSPC: "free some space",
            errno.EDQUOT: "free some space",
            errno.EROFS: "choose a writable folder",
            errno.EACCES: "choose a folder you can write",
            errno.EPERM: "choose a folder you can write",
        }.get(exc.errno or 0, "check the folder")
        kept_note = " (what was finished before is kept)" if kept else ""
        raise OutputError(f"--out {out}: {doing}: {reason}{name}; {hint}{kept_note}") from None


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


def exit_code(stop: BaseException) -> int:
    """128 + the signal's number, as a shell reports a process it stopped: 143 for SIGTERM, 130 for Ctrl-C."""
    return 128 + int(signal.SIGTERM if signal_name(stop) == "SIGTERM" else signal.SIGINT)


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
