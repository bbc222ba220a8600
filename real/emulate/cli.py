"""`syncsim emulate up|down|status`: the emulated cluster from the command line.

Wired into `syncsim` with `add_parser(subparsers)`; also runs alone as `python -m real.emulate`.
Exit codes: 0 success; 2 invalid config or option; 3 the emulation could not be built, found or
removed (not root, no iproute2, tag in use, ...); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

import real.emulate.state as state
from real.emulate.errors import EmulationError
from real.emulate.names import DEFAULT_SUBNET, namespace_prefix, tag_from_name
from real.emulate.shaping import QUEUES
from sim.errors import ConfigError, UsageError
from sim.flags import number

if TYPE_CHECKING:
    from real.emulate.emulation import Emulation

# The commands import what builds, plans and records an emulation (`lifecycle`, `plan`, `netns`: the
# cluster builder and every policy) when they run: `syncsim`'s parser imports this module.

EXIT_CONFIG = 2
EXIT_EMULATION = 3


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add `emulate` (with `up`, `down`, `status`) to a `syncsim` subparsers object; returns its parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--state-dir", help=f"where emulations are recorded (default: ${state.ENV} or {state.DEFAULT_DIR})"
    )
    overrides = argparse.ArgumentParser(add_help=False)  # what sim.cli.common.add_set adds to `syncsim` commands
    overrides.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="change one setting of the config (as YAML)"
    )
    emulate = subparsers.add_parser(
        "emulate",
        help="an emulated cluster of network namespaces with shaped links (Linux, root)",
        description="Build the `cluster:` of a config as network namespaces joined by shaped veths and bridges.",
    )
    sub = emulate.add_subparsers(dest="emulate_command", required=True)
    up = sub.add_parser("up", parents=[common, overrides], help="create the emulated cluster of a config")
    up.add_argument("config", help="YAML config file (its cluster: section is built)")
    up.add_argument("--tag", help="names the emulation's namespaces (default: from the config's name)")
    up.add_argument(
        "--scale",
        type=number(0, above=True, what="a rate multiplier"),
        default=1.0,
        help="multiply every link rate by this (default 1)",
    )
    up.add_argument(
        "--subnet", default=DEFAULT_SUBNET, help=f"private IPv4 range for the hosts (default {DEFAULT_SUBNET})"
    )
    up.add_argument(
        "--queue",
        choices=QUEUES,
        default="fair",
        help="links' queueing: fair (per connection, the default) or fifo (one tbf queue); docs/emulation.md",
    )
    up.add_argument("--replace", action="store_true", help="take down a running emulation with the same tag first")
    up.set_defaults(func=_guarded(_cmd_up))
    down = sub.add_parser(
        "down", parents=[common, overrides], help="delete an emulated cluster (only what `up` recorded)"
    )
    which = down.add_mutually_exclusive_group(required=True)
    which.add_argument("config", nargs="?", help="the config it was brought up from (its tag comes from the name)")
    which.add_argument("--tag", help="the emulation's tag")
    which.add_argument("--all", action="store_true", help="every recorded emulation")
    down.add_argument("--kill", action="store_true", help="terminate processes still running in its namespaces")
    down.set_defaults(func=_guarded(_cmd_down))
    status = sub.add_parser("status", parents=[common], help="list recorded emulations, their hosts and links")
    status.add_argument("--tag", help="only this emulation")
    status.set_defaults(func=_guarded(_cmd_status))
    return emulate


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Errors as messages and exit codes, never tracebacks."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except UsageError as exc:  # a flag's value, not the config
            for line in str(exc).splitlines():
                print(f"emulate: argument error: {line}", file=sys.stderr)
            return EXIT_CONFIG
        except ConfigError as exc:
            print(f"config error in {getattr(args, 'config', None) or 'emulate options'}:", file=sys.stderr)
            for line in str(exc).splitlines():
                print(f"  {line}", file=sys.stderr)
            return EXIT_CONFIG
        except EmulationError as exc:
            print(f"emulate: {exc}", file=sys.stderr)
            return EXIT_EMULATION
        except KeyboardInterrupt:
            print("\nemulate: interrupted", file=sys.stderr)
            return 130

    return run


def _cmd_up(args: argparse.Namespace) -> int:
    import real.emulate.lifecycle as lifecycle
    from real.emulate.plan import plan_config
    from sim.config import load_config

    plan = plan_config(
        load_config(args.config, args.set), args.tag, scale=args.scale, subnet=args.subnet, queue=args.queue
    )
    emulation = lifecycle.up(plan, replace=args.replace, state_dir=args.state_dir)
    print(
        f"emulation {plan.tag!r} up: {len(plan.hosts)} hosts, {len(plan.bridges)} bridges, subnet {plan.subnet}, "
        f"{plan.queue} queues"
    )
    _print_emulation(emulation)
    for note in plan.notes():
        print(f"note: {note}")
    print(f"run in a host: ip netns exec NAMESPACE CMD (the namespace column: {namespace_prefix(plan.tag)}...)")
    print(f"take it down:  syncsim emulate down --tag {plan.tag}")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    import real.emulate.lifecycle as lifecycle

    if args.all:
        results = lifecycle.down_all(state_dir=args.state_dir, kill=args.kill)
        if not results:
            print("no emulations recorded")
        for tag, deleted in results.items():
            print(f"emulation {tag!r} down: deleted {len(deleted)} namespaces")
        return 0
    if args.tag:
        tag = args.tag
    else:
        from sim.config import load_config

        tag = tag_from_name(load_config(args.config, args.set).name)
    deleted = lifecycle.down(tag, state_dir=args.state_dir, kill=args.kill)
    print(f"emulation {tag!r} down: deleted {len(deleted)} namespaces")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    import real.emulate.netns as netns
    from real.emulate.emulation import Emulation

    tags = [args.tag] if args.tag else state.tags(args.state_dir)
    if not tags:
        print(f"no emulations recorded in {state.state_dir(args.state_dir)}")
        return 0
    try:
        present: Optional[set[str]] = netns.namespaces()
    except EmulationError:
        present = None  # no `ip`: report the records alone
    for tag in tags:
        data = state.read(tag, args.state_dir)
        emulation = Emulation.from_dict(data)
        have = "?" if present is None else str(sum(ns in present for ns in emulation.namespaces))
        print(
            f"emulation {tag!r}: {data.get('status', '?')}, {have}/{len(emulation.namespaces)} namespaces present, "
            f"{emulation.topology}, scale {emulation.scale:g}, subnet {emulation.subnet}, {emulation.queue} queues, "
            f"pid {data.get('pid', '?')}"
        )
        _print_emulation(emulation)
    return 0


def _print_emulation(emulation: Emulation) -> None:
    print(f"  {'host':<8} {'namespace':<28} {'address':<15} {'rack':<8} NIC Mbit/s")
    for name, h in emulation.hosts.items():
        print(f"  {name:<8} {h.namespace:<28} {h.address:<15} {h.rack or '-':<8} {h.nic_bps / 1e6:,.1f}")
    uplinks = [link for link in emulation.links if link.device.endswith("-up")]
    for link in uplinks:
        print(f"  uplink {link.direction}: {link.rate_bps / 1e6:,.1f} Mbit/s (and back)")
    wan = [link for link in emulation.links if link.direction.startswith("wan ")][::2]  # one of each link's ends
    for link in wan:
        print(f"  {link.direction}: {link.rate_bps / 1e6:,.1f} Mbit/s (and back), no delay added (no netem)")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m real.emulate ...`: the same commands without the rest of `syncsim`."""
    parser = argparse.ArgumentParser(prog="python -m real.emulate")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["emulate", *(sys.argv[1:] if argv is None else argv)])
    return int(args.func(args))
