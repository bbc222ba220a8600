"""DiLoCo with the outer all-reduce overlapped with the next H inner steps (Kale et al., "Eager Updates For
Overlapped Communication and Computation in DiLoCo", arXiv 2502.12996): the mean of outer step t's
pseudo-gradients is applied at outer step t + 1, as it is (`delayed`) or with each worker's fresh
pseudo-gradient in place of its own stale share (`eager`). Written with the public primitives only."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from policies.base import SettingError
from policies.diloco import ANCHOR, RESIDUAL, DiLoCo, DiLoCoSettings
from policies.membership import Membership
from policies.ops import Combine, Encode, OptimizerStep, Program, Wait
from policies.tensors import PARAMETERS, Buffer, Codec
from policies.view import ClusterView, ModelInfo

# Outer step t = 1, 2, ... sends its pseudo-gradient in SENT[(t - 1) % 2] while SENT[t % 2], sent at t - 1, comes
# back as the mean: two buffers, so the one in flight is never touched before its Wait (policies.ops).
SENT = ("outer_gradient_0", "outer_gradient_1")
OWN = "own_gradient"  # eager: this worker's pseudo-gradient of the last outer step, its share of the mean in flight


class EagerDiLoCoSettings(DiLoCoSettings):
    update: Literal["delayed", "eager"] = Field(
        "eager",
        description="delayed: outer step t applies the mean pseudo-gradient of step t - 1; eager: the same mean "
        "with this worker's share replaced by its pseudo-gradient of step t",
    )


class EagerDiLoCo(DiLoCo):
    """After every `period`-th inner step (past warm-up), outer step t = 1, 2, ...: the pseudo-gradient
    anchor - parameters goes into SENT[(t - 1) % 2]; the all-reduce of step t - 1 is waited for; with `eager` the
    mean becomes mean + (fresh - own) / M and own = fresh; the all-reduce of the fresh one is launched;
    the outer SGD steps the anchor with the mean (zero at t = 1) and the parameters restart from the
    anchor. So the whole all-reduce overlaps the next H inner steps."""

    name = "eager_diloco"
    Settings = EagerDiLoCoSettings

    def membership_problems(self, membership: Membership) -> list[tuple[str, str]]:
        if not membership.changes:
            return []
        why = "its outer averages run across steps, so no step lies between two of them"
        return [("departures", f"workers may not leave or join under {self.name}: {why}")]

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        if self.replica_size > 1:
            raise SettingError("replica", "eager_diloco launches one all-reduce of every rank; allowed: rank")

    def buffers(self) -> tuple[Buffer, ...]:
        s = self.settings
        own = (Buffer(OWN),) if s.update == "eager" else ()
        residual = (Buffer(RESIDUAL),) if s.error_feedback else ()
        return (Buffer(ANCHOR, initial="parameters"), *(Buffer(name) for name in SENT), *own, *residual)

    @property
    def global_tensor(self) -> Optional[str]:
        # eager workers' anchors differ (each applied its own share first): score the replicas' mean then
        return ANCHOR if self.settings.update == "delayed" else None

    def end_step(self, rank: int, step: int) -> Program:
        s = self.settings
        if self.warming_up(step):  # as DiLoCo: the anchor follows the data-parallel model
            yield Combine(ANCHOR, ((1.0, PARAMETERS),))
        if not self.averages_after(step):
            return
        t = (step - s.warmup_steps + 1) // s.period
        fresh, mean = SENT[(t - 1) % 2], SENT[t % 2]
        yield Combine(fresh, ((1.0, ANCHOR), (-1.0, PARAMETERS)))
        if s.error_feedback:
            yield Encode(fresh, Codec(s.wire, s.block), residual=RESIDUAL)
        if t > 1:  # at t = 1 nothing was sent: `mean` holds its initial zeros
            yield Wait(mean)
        if s.update == "eager":
            share = 1.0 / self.bound_view.world_size
            yield Combine(mean, ((1.0, mean), (share, fresh), (-share, OWN)))
            yield Combine(OWN, ((1.0, fresh),))
        yield from self.parameter_average(rank, self.bound_model.parameter_bytes, tensor=fresh, handle=fresh)
        yield OptimizerStep(ANCHOR, mean, self.outer)
        yield Combine(PARAMETERS, ((1.0, ANCHOR),))
