"""The project's exception hierarchy."""


class SyncsimError(Exception):
    """Base class for syncsim's domain errors."""


class ConfigError(SyncsimError, ValueError):
    """A config (or a policy setting) is invalid; the message names the field and the allowed values."""


class PolicyError(SyncsimError):
    """A policy yielded an operation the engine cannot execute; the message names the policy and the op."""


class DeadlockError(SyncsimError):
    """The simulation ran out of events while workers were still waiting on each other."""


class OutputBusy(SyncsimError):
    """Another process holds the output folder (`sim.files.hold_output`); the message names its pid and command."""
