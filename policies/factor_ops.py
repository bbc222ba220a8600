"""Local ops on low-rank factors (`policies.lowrank`): what a PowerSGD-style codec does between its collectives.

Each acts on one bucket's region (ops of `on_forward` / `on_gradients`; a whole-model hook has no region
to factor) and moves nothing. `matrices` names a model-sized buffer (the gradients, say) whose region holds
the tensors; `p`, `q` and `rest` name `FactorBuffer`s of the policy, whose `lowrank` decides which of those
tensors are factored (all the op's factor buffers must share it). For a factored matrix M with factors P, Q:

- `RandomFill(q, seed)`: every factor of `q` gets standard-normal values, one draw per matrix in factor
  order from a generator seeded with `seed` (torch's CPU generator, as the PyTorch hook draws its first Q).
- `Orthogonalize(p)`: the columns of every factor made orthonormal (Gram-Schmidt at rank <= 2, a QR
  factorization above, as the hook does; `epsilon` is added to each column's norm).
- `Project(matrices, source, out)`: out = M source for each matrix (P = M Q); `transpose`: M^T source
  (Q = M^T P).
- `Reconstruct(matrices, p, q)`: M = P Q^T, written over the matrices' values (the rest untouched).
- `Pack(matrices, rest)` / `Unpack(rest, matrices)`: copy the tensors that are not factored into the flat
  `rest` buffer, end to end, and back.

No simpy, no torch: backends carry them out (sim/numerics/lowrank_rules.py holds the tensor rules).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from policies.ops import LocalOp
from policies.tensors import Fragment


class FactorOp(LocalOp):
    """Base of the ops on factors: a bucket's region only, never a fragment."""

    fragment: ClassVar[Optional[Fragment]] = None
    factor_fields: ClassVar[tuple[str, ...]] = ()  # fields naming factor buffers (the rest name model-sized ones)

    @property
    def factors(self) -> tuple[str, ...]:
        """The factor buffers the op names (read or written)."""
        return tuple(getattr(self, f) for f in self.factor_fields)


@dataclass(frozen=True)
class RandomFill(FactorOp):
    """Fill factor buffer `out` with standard-normal values from a generator seeded with `seed`."""

    out: str
    seed: int
    factor_fields: ClassVar[tuple[str, ...]] = ("out",)

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2**63:
            raise ValueError(f"RandomFill seed {self.seed!r}; allowed: an int in [0, 2**63)")
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return ()

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.out,)


@dataclass(frozen=True)
class Orthogonalize(FactorOp):
    """Make the columns of every factor in factor buffer `factor` orthonormal."""

    factor: str
    epsilon: float = 0.0
    factor_fields: ClassVar[tuple[str, ...]] = ("factor",)

    def __post_init__(self) -> None:
        eps = self.epsilon
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
            raise ValueError(f"Orthogonalize epsilon {eps!r}; allowed: a finite number >= 0")
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.factor,)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.factor,)


@dataclass(frozen=True)
class Project(FactorOp):
    """out = M source (or M^T source with `transpose`) for every factored matrix M of `matrices`."""

    matrices: str
    source: str
    out: str
    transpose: bool = False
    factor_fields: ClassVar[tuple[str, ...]] = ("source", "out")

    def __post_init__(self) -> None:
        if not isinstance(self.transpose, bool):
            raise ValueError(f"Project transpose {self.transpose!r}; allowed: True, False")
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.matrices, self.source)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.out,)


@dataclass(frozen=True)
class Reconstruct(FactorOp):
    """M = P Q^T for every factored matrix M of `matrices`, from factor buffers `p` and `q`."""

    matrices: str
    p: str
    q: str
    factor_fields: ClassVar[tuple[str, ...]] = ("p", "q")

    def __post_init__(self) -> None:
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.p, self.q)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.matrices,)


@dataclass(frozen=True)
class Pack(FactorOp):
    """Copy the tensors of `matrices` that are not factored into factor buffer `rest`, end to end."""

    matrices: str
    rest: str
    factor_fields: ClassVar[tuple[str, ...]] = ("rest",)

    def __post_init__(self) -> None:
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.matrices,)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.rest,)


@dataclass(frozen=True)
class Unpack(FactorOp):
    """Copy factor buffer `rest` back over the tensors of `matrices` that are not factored."""

    rest: str
    matrices: str
    factor_fields: ClassVar[tuple[str, ...]] = ("rest",)

    def __post_init__(self) -> None:
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.rest,)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.matrices,)


FACTOR_OPS: tuple[type[FactorOp], ...] = (RandomFill, Orthogonalize, Project, Reconstruct, Pack, Unpack)
