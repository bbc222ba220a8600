"""Types for numeric command-line flags (argparse's `type=`): each states its range, so NaN, inf, a
negative or (where it means nothing) a zero is one argument error naming the flag, raised while the
command line is parsed, before any config is read or process launched. Stdlib only: `syncsim`'s
commands and `real`'s own entry points share them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def number(least: float, *, above: bool = False, what: str = "a number") -> Callable[[str], float]:
    """An argparse `type` for a float flag: finite and >= `least` (> with `above`), else an argument error
    naming the flag, raised while the command line is parsed, so before anything is read or launched."""
    bound = f"{'>' if above else '>='} {least:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < least or (above and value == least):
            raise argparse.ArgumentTypeError(f"expected {what}, finite and {bound}, got {text}")
        return value

    parse.__name__ = what  # argparse's own messages name the type
    return parse


def count(least: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse `type` for an integer flag: a whole number >= `least`, else an argument error naming it."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"expected {what} >= {least}, got {text}")
        return value

    parse.__name__ = what
    return parse


SECONDS = number(0, above=True, what="seconds")  # a timeout: zero, negative, NaN or inf make no sense
