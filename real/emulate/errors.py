"""The emulation's domain error."""

from sim.errors import SyncsimError


class EmulationError(SyncsimError):
    """Building, finding or removing an emulated cluster failed; the message says what and how to fix it."""
