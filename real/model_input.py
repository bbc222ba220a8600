"""What `syncsim profile module:factory` is told about a user's own module: the `module:factory` that
builds it and the `--input` specifications of one sample, checked while the command line is parsed.

A target is `module:factory`: `module.py` a file in the working directory (a plain name, as policy
plug-ins are named: no dots, slashes or a name the standard library uses), `factory` a callable in it
(or a dotted attribute path, `Models.small`) that returns a `torch.nn.Module` when called without arguments.

An input specification is `DTYPE:DIMS[:vocab=N]`, one sample's shape (the batch dimension is added in
front): `float32:3x224x224` is an image of standard normal values; `int64:1024:vocab=32000` a sequence
of 1,024 token ids drawn uniformly from [0, 32000). Integer inputs need `vocab`, float inputs refuse it.
Each `--input` is one positional argument of the module's forward, in order.

Stdlib only: the flags are checked before torch is imported (`InputSpec.batch` imports it when called).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

FLOAT_TYPES = ("float32", "float16", "bfloat16", "float64")
INT_TYPES = ("int64", "int32")
MAX_SAMPLE_VALUES = 2**31  # values in one sample: past this, the batch alone would not fit a GPU
FORM = "DTYPE:DIMS[:vocab=N], e.g. float32:3x224x224 or int64:1024:vocab=32000"
TARGET_FORM = "module:factory, where module.py is a file in the working directory"


@dataclass(frozen=True)
class InputSpec:
    """One positional input of the module: its dtype and one sample's shape (ids below `vocab`)."""

    dtype: str
    shape: tuple[int, ...]
    vocab: int = 0  # integer inputs: ids are drawn from [0, vocab)

    def __str__(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{self.dtype}:{dims}" + (f":vocab={self.vocab}" if self.vocab else "")

    def batch(self, size: int, generator: Any) -> Any:
        """A seeded batch of `size` samples, on the CPU: standard normal floats, or uniform ids."""
        import torch

        shape = (size, *self.shape)
        if self.vocab:
            return torch.randint(self.vocab, shape, generator=generator, dtype=getattr(torch, self.dtype))
        return torch.randn(shape, generator=generator).to(getattr(torch, self.dtype))


def parse_input(text: str) -> InputSpec:
    """An `--input` specification (argparse `type`): an argument error naming what is wrong, else the spec."""
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise argparse.ArgumentTypeError(f"expected {FORM}, got {text}")
    dtype, dims = parts[0], parts[1]
    if dtype not in FLOAT_TYPES + INT_TYPES:
        raise argparse.ArgumentTypeError(f"dtype {dtype!r} in {text!r}; allowed: {', '.join(FLOAT_TYPES + INT_TYPES)}")
    try:
        shape = tuple(int(d) for d in dims.split("x"))
    except ValueError:
        shape = ()
    if not shape or any(d < 1 for d in shape) or math.prod(shape) > MAX_SAMPLE_VALUES:
        raise argparse.ArgumentTypeError(
            f"dimensions {dims!r} in {text!r}: expected integers >= 1 joined by x (3x224x224), "
            f"at most {MAX_SAMPLE_VALUES:,} values a sample"
        )
    vocab = 0
    if len(parts) == 3:
        key, _, value = parts[2].partition("=")
        vocab = int(value) if key == "vocab" and value.isdigit() else 0
        if vocab < 1 or dtype in FLOAT_TYPES:
            raise argparse.ArgumentTypeError(
                f"{parts[2]!r} in {text!r}: expected vocab=N (an integer >= 1), for an integer dtype only"
            )
    if dtype in INT_TYPES and not vocab:
        raise argparse.ArgumentTypeError(f"{text!r}: an integer input needs :vocab=N, the ids' range")
    return InputSpec(dtype, shape, vocab)


def parse_target(text: str) -> tuple[str, str]:
    """`module:factory` split and checked (nothing is imported): module a plain file name that shadows
    no standard library module, factory an attribute path."""
    module, colon, factory = text.partition(":")
    if not colon:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {TARGET_FORM}")
    if not module.isidentifier():
        hint = f" (write {module[:-3]}:{factory})" if module.endswith(".py") and module[:-3].isidentifier() else ""
        raise argparse.ArgumentTypeError(
            f"{module!r} is not a file's name (no dots, slashes or relative names){hint}; expected {TARGET_FORM}"
        )
    if module in sys.stdlib_module_names or module in sys.builtin_module_names:
        raise argparse.ArgumentTypeError(f"{module}.py would shadow the standard library's {module!r}; rename the file")
    if not all(part.isidentifier() for part in factory.split(".")):
        raise argparse.ArgumentTypeError(f"{factory!r} is not a callable's name; expected {TARGET_FORM}")
    return module, factory
