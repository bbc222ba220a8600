"""Local SGD (periodic model averaging): workers step alone and average their parameters every H steps."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator

from policies.base import Bucket, Policy
from policies.ops import AllReduce, Group, Payload, Program
from policies.tensors import Fragment
from policies.view import ClusterView, ModelInfo
from policies.wire_settings import WireName, WireSettings

MAX_PERIOD = 100_000  # past this no run of any config here averages at all; a typo, not a schedule
MAX_WARMUP = 10_000_000
PARAMETER_BYTES_PER_VALUE = 4  # parameters travel as fp32 master weights (policies.ops: the PARAMETERS default)


class LocalSGDSettings(WireSettings):
    wire: Optional[WireName] = Field(
        None, description="element type the parameter averaging travels in (docs/policies.md); unset: fp32"
    )
    period: int = Field(4, description=f"H: local steps between two parameter averagings (1 to {MAX_PERIOD})")
    warmup_steps: int = Field(
        0, description=f"steps of plain data parallelism (gradients all-reduced every step) first (0 to {MAX_WARMUP})"
    )

    @field_validator("period")
    @classmethod
    def _period_in_range(cls, period: int) -> int:
        if not 1 <= period <= MAX_PERIOD:
            raise ValueError(f"allowed: an integer from 1 to {MAX_PERIOD} (got {period})")
        return period

    @field_validator("warmup_steps")
    @classmethod
    def _warmup_in_range(cls, warmup: int) -> int:
        if not 0 <= warmup <= MAX_WARMUP:
            raise ValueError(f"allowed: an integer from 0 to {MAX_WARMUP} (got {warmup})")
        return warmup


class LocalSGD(Policy):
    """Steps 0 .. warmup_steps-1 all-reduce every gradient bucket over one ring of all ranks (as `ring`);
    from then on each worker steps on its own gradients, and after every `period`-th such step the
    replicas' parameters are averaged by one all-reduce of the whole model (in `wire` when set), so
    that after step warmup_steps + k*period - 1 (k >= 1) every replica holds the mean of the replicas."""

    name = "local_sgd"
    Settings = LocalSGDSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))

    def warming_up(self, step: int) -> bool:
        return step < self.settings.warmup_steps

    def averages_after(self, step: int) -> bool:
        """Whether `step` ends with the replicas' parameters averaged."""
        local = step - self.settings.warmup_steps
        return local >= 0 and (local + 1) % self.settings.period == 0

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if self.warming_up(step):
            yield AllReduce(self.world, bucket.nbytes)

    def end_step(self, rank: int, step: int) -> Program:
        if self.averages_after(step):
            yield self.parameter_average(self.bound_model.parameter_bytes)

    def parameter_average(
        self,
        nbytes: float,
        tensor: Optional[str] = None,
        fragment: Optional[Fragment] = None,
        handle: Optional[str] = None,
    ) -> AllReduce:
        """The all-reduce of `nbytes` of fp32 parameter-space values (of `tensor`; default the parameters)
        over every rank, in `wire` when set."""
        where = {"tensor": tensor, "fragment": fragment, "handle": handle}
        s = self.settings
        if s.wire is None:
            return AllReduce(self.world, nbytes, payload=Payload.PARAMETERS, **where)
        values = nbytes / PARAMETER_BYTES_PER_VALUE
        return AllReduce(self.world, elements=values, wire=s.wire, block=s.block, payload=Payload.PARAMETERS, **where)
