"""Calibration's domain error."""

from sim.errors import SyncsimError


class CalibrationError(SyncsimError):
    """The measurements cannot give a figure (too few sizes, a non-increasing curve, one host)."""
