"""DiLoCo as PRIME ran it for INTELLECT-1 (arXiv 2412.01152; github.com/PrimeIntellect-ai/prime): the built-in
`diloco`, but the outer average is not one all-reduce of the whole model. PRIME's `Diloco.sync_pseudo_gradient`
(src/zeroband/diloco.py, from 2024-10-10 through the report's commit of 2024-11-29) cuts the flat pseudo-gradient
at every change of the layer index in the parameter names and all-reduces the pieces one after the other, each
a blocking ring of its own: the embedding, one per transformer layer, and the final norm with the output head.
Each piece pays the ring's 2(k - 1) latency steps, so the outer step pays them `groups` times.

Plug-in: `name: prime_diloco:PrimeDiLoCo` in a config beside this file (docs/policies.md, "Plug-ins")."""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from policies.base import SettingError
from policies.diloco import DiLoCo, DiLoCoSettings
from policies.ops import AllReduce, Program
from policies.tensors import Fragment
from policies.view import ClusterView, ModelInfo

MAX_GROUPS = 10_000  # a model of more layers than this is not a transformer anyone trains


class PrimeDiLoCoSettings(DiLoCoSettings):
    groups: int = Field(
        1,
        ge=1,
        le=MAX_GROUPS,
        description="blocking all-reduces, one after the other, that the outer average is cut into (equal "
        "parts; PRIME: the layers + 2; 1 is the built-in diloco)",
    )


class PrimeDiLoCo(DiLoCo):
    """`diloco` whose outer average runs as `groups` blocking all-reduces of equal parts of the model, one after
    the other. In the alpha-beta ring the parts' sizes do not matter: each costs 2(k - 1) latency steps and its
    bytes' share of the bandwidth term, so the sum is the same for any split into `groups` parts."""

    name = "prime_diloco"
    Settings = PrimeDiLoCoSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        if self.settings.groups > 1 and self.replica_size != 1:
            raise SettingError("groups", f"{self.settings.groups} parts need replica: rank (PRIME's one ring)")

    def parameter_average(
        self,
        rank: int,
        nbytes: float,
        tensor: Optional[str] = None,
        fragment: Optional[Fragment] = None,
        handle: Optional[str] = None,
        step: Optional[int] = None,
    ) -> Program:
        groups = self.settings.groups
        if groups == 1 or fragment is not None or handle is not None:  # bind refused replicas of several ranks
            yield from super().parameter_average(rank, nbytes, tensor, fragment, handle, step)
            return
        for _ in range(groups):
            yield self._average_op(AllReduce, self.world_at(step), nbytes / groups, {"tensor": tensor})
