"""Tensor-side primitives: buffers a policy owns, ops on one rank's tensors, and fragments of the model.

The communication ops of `policies.ops` move tensors between ranks; the values here say what a policy
does to tensors in between, so that schemes such as DiLoCo (an anchor copy of the parameters, a
pseudo-gradient, an outer optimizer), error feedback and low-precision payloads are written as op
programs and run alike in simulation, in numerics mode and on torch.distributed.

- A **buffer** is a flat tensor the size of the model that every worker holds; a policy declares
  its buffers (`Policy.buffers`) with their initial value. `parameters` and `gradients` are built in.
- A **fragment** narrows an op of a whole-model hook to every `count`-th gradient bucket starting at
  `index` (buckets are the model's layer groups, in the order backward produces them), as Streaming
  DiLoCo's strided fragments do. Its bytes are those buckets' bytes (`fragment_bytes`).
- An `Optimizer` is one a policy owns (DiLoCo's outer optimizer), a `Codec` how `Encode` compresses.

The local ops that use these values (`Combine`, `OptimizerStep`, `Encode`) are in `policies.ops`.
No simpy, no torch: backends carry the ops out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from policies.wire import DEFAULT_BLOCK, check_block, wire_type

PARAMETERS = "parameters"  # the replica's parameters (what the local optimizer steps)
GRADIENTS = "gradients"  # this step's gradient (what the backward pass produced)
BUILT_IN: tuple[str, ...] = (PARAMETERS, GRADIENTS)
INITIAL_VALUES: tuple[str, ...] = ("zeros", "parameters")
OPTIMIZERS: tuple[str, ...] = ("sgd", "adamw")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def check_name(name: object, field: str = "buffer") -> str:
    """A buffer name: an identifier (letters, digits, underscores)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{field} {name!r}; allowed: an identifier (letters, digits, _), or one of {BUILT_IN}")
    return name


@dataclass(frozen=True)
class Buffer:
    """A flat, model-sized fp32 tensor every worker keeps for the policy: `initial` is `zeros` or
    `parameters` (a copy of the initial parameters, the same on every worker)."""

    name: str
    initial: str = "zeros"

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.name in BUILT_IN:
            raise ValueError(f"buffer {self.name!r} is built in; declare buffers of other names")
        if self.initial not in INITIAL_VALUES:
            raise ValueError(f"initial {self.initial!r}; allowed: {', '.join(INITIAL_VALUES)}")


@dataclass(frozen=True)
class Fragment:
    """Buckets index, index + count, index + 2*count, ...: one of `count` strided fragments."""

    index: int
    count: int

    def __post_init__(self) -> None:
        for name in ("index", "count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"fragment {name} {value!r}; allowed: an int")
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"fragment {self.index} of {self.count}; allowed: count >= 1 and 0 <= index < count")

    def buckets(self, bucket_count: int) -> tuple[int, ...]:
        """The buckets of this fragment in a model of `bucket_count` buckets."""
        return tuple(range(self.index, bucket_count, self.count))


def fragment_bytes(bucket_bytes: Sequence[float], fragment: Optional[Fragment]) -> float:
    """Bytes of `fragment`'s buckets (all of them when None)."""
    if fragment is None:
        return float(sum(bucket_bytes))
    return float(sum(bucket_bytes[b] for b in fragment.buckets(len(bucket_bytes))))


@dataclass(frozen=True)
class Optimizer:
    """An optimizer a policy owns (DiLoCo's outer optimizer): `sgd` (momentum, optionally Nesterov, as
    torch.optim.SGD) or `adamw` (decoupled weight decay, as torch.optim.AdamW). The backend keeps its
    state per worker and per `OptimizerStep.state` key."""

    name: str = "sgd"
    lr: float = 0.7
    momentum: float = 0.0
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.name!r}; allowed: {', '.join(OPTIMIZERS)}")
        numbers = {"lr": self.lr, "momentum": self.momentum, "eps": self.eps, "weight_decay": self.weight_decay}
        for field, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"optimizer {field} {value!r}; allowed: a finite number >= 0")
        if not self.momentum < 1:
            raise ValueError(f"optimizer momentum {self.momentum!r}; allowed: 0 <= momentum < 1")
        if self.nesterov and (self.name != "sgd" or self.momentum == 0):
            raise ValueError("optimizer nesterov: needs name sgd and momentum > 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ValueError(f"optimizer betas {self.betas!r}; allowed: two numbers in [0, 1)")


@dataclass(frozen=True)
class Codec:
    """How `Encode` compresses values: `wire` rounds them to an element type (policies.wire: a native
    type, or a scaled one with `block` values per scale); `topk` (a fraction in (0, 1]) keeps that
    share of largest magnitudes of the region and zeroes the rest. Both may be given: top-k first."""

    wire: Optional[str] = None
    block: int = DEFAULT_BLOCK
    topk: Optional[float] = None

    def __post_init__(self) -> None:
        if self.wire is None and self.topk is None:
            raise ValueError("codec: give wire, topk or both")
        if self.wire is not None:
            wire_type(self.wire)
        check_block(self.block)
        if self.topk is not None:
            check_fraction(self.topk, "codec topk")


def check_fraction(value: object, field: str) -> float:
    """A fraction in (0, 1] (a top-k's share of values kept)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"{field} {value!r}; allowed: a fraction in (0, 1]")
    return float(value)


def kept(topk: float, values: int) -> int:
    """Values a top-k of share `topk` keeps of `values`: ceil(topk * values), at most all of them (the
    count `Encode` keeps, and the pairs a coding's `topk` declares)."""
    return min(values, math.ceil(topk * values))
