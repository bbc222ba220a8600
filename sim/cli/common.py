"""What every `syncsim` command shares: `--set` overrides, the held output folder, the torch check."""

from __future__ import annotations

import argparse
from pathlib import Path

from sim.errors import ConfigError

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
