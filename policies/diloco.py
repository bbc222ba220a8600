"""DiLoCo (Douillard et al., arXiv 2311.08105): H inner steps alone, then an outer step on the mean
pseudo-gradient, written with the public tensor primitives (policies.tensors, policies.ops)."""

from __future__ import annotations

from dataclasses import replace

from pydantic import Field, ValidationInfo, field_validator

from policies.held import HeldState
from policies.local_sgd import LocalSGD, LocalSGDSettings
from policies.ops import Broadcast, Combine, Encode, Group, OptimizerStep, Program
from policies.tensors import PARAMETERS, Buffer, Codec, Optimizer

ANCHOR, OUTER_GRADIENT, RESIDUAL, OUTER_STATE = "anchor", "outer_gradient", "residual", "outer"


class DiLoCoSettings(LocalSGDSettings):
    period: int = Field(500, description="H: inner steps between two outer steps (1 to 100000)")
    outer_lr: float = Field(0.7, gt=0, le=100, description="outer optimizer's learning rate")
    outer_momentum: float = Field(0.9, ge=0, lt=1, description="outer optimizer's momentum")
    nesterov: bool = Field(True, description="Nesterov momentum in the outer step (needs outer_momentum > 0)")
    error_feedback: bool = Field(
        False, description="keep what the wire's rounding loses of each pseudo-gradient and add it to the next"
    )

    @field_validator("error_feedback")
    @classmethod
    def _feedback_needs_a_wire(cls, on: bool, info: ValidationInfo) -> bool:
        if on and info.data.get("wire") in (None, "fp32"):
            raise ValueError("needs wire set to a type that rounds (bf16, fp16, fp8_e4m3, fp8_e5m2, int8, fp4)")
        return on


class DiLoCo(LocalSGD):
    """Every worker keeps an `anchor`, the global parameters of the last outer step. After every
    `period`-th inner step (past warm-up): pseudo-gradient = anchor - parameters, averaged over all ranks
    (in `wire` when set, with error feedback when asked); the outer SGD steps the anchor with it, and
    the parameters restart from the anchor. Warm-up steps are data parallel, each ending with anchor = parameters."""

    name = "diloco"
    Settings = DiLoCoSettings

    def buffers(self) -> tuple[Buffer, ...]:
        residual = (Buffer(RESIDUAL),) if self.settings.error_feedback else ()
        return (Buffer(ANCHOR, initial="parameters"), Buffer(OUTER_GRADIENT), *residual)

    @property
    def global_tensor(self) -> str:
        return ANCHOR

    def held_state(self) -> HeldState:
        """The replica's state and buffers, and the outer optimizer's momentum: one more fp32 copy."""
        held = super().held_state()
        return replace(held, extra_copies=held.extra_copies + (self.settings.outer_momentum > 0))

    @property
    def outer(self) -> Optimizer:
        s = self.settings
        return Optimizer("sgd", lr=s.outer_lr, momentum=s.outer_momentum, nesterov=s.nesterov and s.outer_momentum > 0)

    def end_step(self, rank: int, step: int) -> Program:
        if self.warming_up(step):  # the anchor follows the data-parallel model (the global one during warm-up)
            yield Combine(ANCHOR, ((1.0, PARAMETERS),))
        if self.averages_after(step):
            yield from self.outer_step(rank, self.bound_model.parameter_bytes, step=step)

    def hand_over(self, rank: int, group: Group, source: int) -> Program:
        """A joiner gets the anchor and the outer momentum, and restarts its parameters from the anchor."""
        nbytes = self.bound_model.parameter_bytes
        yield Broadcast(group, nbytes, tensor=ANCHOR, root=source)
        if self.settings.outer_momentum > 0:
            yield Broadcast(group, nbytes, state=OUTER_STATE, root=source)
        if rank != source:
            yield Combine(PARAMETERS, ((1.0, ANCHOR),))

    def outer_step(self, rank: int, nbytes: float, **where: object) -> Program:
        """The outer step on `nbytes` of the model (a `fragment=`, a `handle=` to launch the all-reduce,
        and the `step=` whose live ranks average pass through to the ops; a launched one is finished by
        `apply_outer`)."""
        fragment = where.get("fragment")
        yield Combine(OUTER_GRADIENT, ((1.0, ANCHOR), (-1.0, PARAMETERS)), fragment=fragment)
        s = self.settings
        if s.error_feedback:
            yield Encode(OUTER_GRADIENT, Codec(s.wire, s.block), residual=RESIDUAL, fragment=fragment)
        yield from self.parameter_average(rank, nbytes, tensor=OUTER_GRADIENT, **where)  # type: ignore[arg-type]
        if where.get("handle") is None:
            yield from self.apply_outer(fragment=fragment)

    def apply_outer(self, mixing: float = 0.0, **where: object) -> Program:
        """Step the anchor with the mean pseudo-gradient; the parameters become `mixing` * theirs +
        (1 - mixing) * the anchor (0: the anchor)."""
        fragment = where.get("fragment")
        yield OptimizerStep(ANCHOR, OUTER_GRADIENT, self.outer, state=OUTER_STATE, fragment=fragment)  # type: ignore[arg-type]
        terms = ((1.0, ANCHOR),) if mixing == 0 else ((mixing, PARAMETERS), (1.0 - mixing, ANCHOR))
        yield Combine(PARAMETERS, terms, fragment=fragment)  # type: ignore[arg-type]
