"""What every `syncsim` command shares: the parser's one-line argument errors, `--set` overrides, the
package version, the held output folder, the torch check."""

from __future__ import annotations

import argparse
import errno
import re
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn, TypeVar

from sim.errors import ConfigError, OutputError, signal_name

# a writer's hidden temporary (sim.files), named in a message as the file it stood for
TEMPORARY = re.compile(r"^\.(.+)\.[0-9a-f]{8}\.tmp(\.[A-Za-z0-9]+)?$")

T = TypeVar("T")

Subparsers = argparse._SubParsersAction  # what add_subparsers() returns; argparse keeps the name private

# the torch build the README installs for CPU work, and the extra that takes PyPI's (CUDA) build for GPUs
TORCH_INSTALL = (
    "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
    "pip install -c constraints.txt -e '.[numerics]' (PyTorch's CPU build, about 200 MB; on a GPU machine "
    "take the CUDA build instead: pip install -c constraints.txt -e '.[real]'; README.md, 'Which PyTorch you get')"
)


class Parser(argparse.ArgumentParser):
    """argparse with a bad argument reported in one line (`syncsim real: argument error: ...`) instead
    of a usage dump; exit status 2, as argparse's. Subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        message = re.sub(r"^argument ", "", message)
        self.exit(2, f"{self.prog}: argument error: {message} (`{self.prog} --help` lists the arguments)\n")


def add_set(parser: argparse.ArgumentParser) -> None:
    """`--set KEY=VALUE` (repeatable), applied to the config before it is validated (sim.config.overrides)."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the config, e.g. --set cluster.uplink_gbps=25 --set policies[0].group_size=4 "
        "(the value is read as YAML; repeat for several)",
    )


def version() -> str:
    """The installed syncsim's version; from pyproject.toml when the package is not installed (a checkout
    run in place)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("syncsim")
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
        return found.group(1) if found else "unknown"


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
            f"`syncsim {command}` runs torch and torch is not installed; install it with: {TORCH_INSTALL}"
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
