"""The project's exception hierarchy."""


class SyncsimError(Exception):
    """Base class for syncsim's domain errors."""


class ConfigError(SyncsimError, ValueError):
    """A config (or a policy setting) is invalid; the message names the field and the allowed values."""


class UsageError(ConfigError):
    """A command-line argument has a bad value (`--x`, `--set`, `--nproc`); the message names the flag and
    the allowed values. `syncsim` reports it as an argument error (exit 2, argparse's convention), not as
    an error in the config; code that catches ConfigError still catches it."""


class PolicyError(SyncsimError):
    """A policy yielded an operation the engine cannot execute; the message names the policy and the op."""


class DeadlockError(SyncsimError):
    """The simulation ran out of events while workers were still waiting on each other."""


class OutputBusy(SyncsimError):
    """Another process holds the output folder (`sim.files.hold_output`); the message names its pid and command."""


class OutputError(SyncsimError):
    """The output folder cannot be written (read-only, a file, a full disk); the message names `--out`."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be (`sim.cli.main` installs the handler), so
    that both stop a run the same way: finished results kept, one line."""


class RunInterrupted(KeyboardInterrupt):
    """`simulate` stopped by Ctrl-C or SIGTERM: `result` holds the finished policies, and a summary row
    with status `interrupted` for each one that was not; `signal` names what stopped it."""

    def __init__(self, result: object, signal: str) -> None:
        super().__init__(signal)
        self.result = result
        self.signal = signal


def signal_name(stop: BaseException) -> str:
    """What stopped a run, for one line: SIGTERM or Ctrl-C (SIGINT)."""
    if isinstance(stop, RunInterrupted):
        return stop.signal
    return "SIGTERM" if isinstance(stop, Terminated) else "Ctrl-C (SIGINT)"
