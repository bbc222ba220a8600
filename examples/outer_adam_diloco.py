"""A DiLoCo variant written as a plug-in: the outer optimizer is AdamW instead of Nesterov SGD.

Every line is a public primitive (policies.ops, policies.tensors); the same object runs in simulation, in
numerics mode and on torch.distributed. A config names it `outer_adam_diloco:OuterAdamDiLoCo` with this file
beside the config or in the working directory (docs/policies.md, "Tensor-side primitives").
"""

from __future__ import annotations

from pydantic import Field

from policies import Policy
from policies.base import PolicySettings
from policies.ops import AllReduce, Combine, Group, OptimizerStep, Payload
from policies.tensors import Buffer, Optimizer


class OuterAdamSettings(PolicySettings):
    period: int = Field(10, ge=1, description="H: inner steps between outer steps")
    outer_lr: float = Field(0.01, gt=0, description="the outer AdamW's learning rate")


class OuterAdamDiLoCo(Policy):
    """After every `period`-th step: pseudo-gradient = anchor - parameters, averaged over every rank; AdamW
    steps the anchor with it; the parameters restart from the anchor."""

    name = "outer_adam_diloco"
    Settings = OuterAdamSettings

    def bind(self, view, model):  # type: ignore[no-untyped-def]
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))
        self.outer = Optimizer("adamw", lr=self.settings.outer_lr)

    def buffers(self):  # type: ignore[no-untyped-def]
        return (Buffer("anchor", initial="parameters"), Buffer("delta"))

    @property
    def global_tensor(self) -> str:
        return "anchor"

    def end_step(self, rank, step):  # type: ignore[no-untyped-def]
        if (step + 1) % self.settings.period:
            return
        yield Combine("delta", ((1.0, "anchor"), (-1.0, "parameters")))
        yield AllReduce(self.world, self.bound_model.parameter_bytes, payload=Payload.PARAMETERS, tensor="delta")
        yield OptimizerStep("anchor", "delta", self.outer)
        yield Combine("parameters", ((1.0, "anchor"),))
