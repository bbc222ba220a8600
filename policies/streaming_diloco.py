"""Streaming DiLoCo (Douillard et al., arXiv 2501.18512): DiLoCo on P strided fragments of the model,
each synchronized every H steps on a staggered schedule, its all-reduce overlapped with tau inner steps,
and the outer result mixed into the local parameters."""

from __future__ import annotations

from pydantic import Field

from policies.base import SettingError
from policies.diloco import DiLoCo, DiLoCoSettings
from policies.membership import Membership
from policies.ops import Program, Wait
from policies.tensors import Fragment, fragment_bytes
from policies.view import ClusterView, ModelInfo


class StreamingDiLoCoSettings(DiLoCoSettings):
    period: int = Field(100, description="H: inner steps between two outer steps of one fragment (1 to 100000)")
    fragments: int = Field(4, ge=1, description="P: strided fragments (every P-th bucket); divides the buckets")
    overlap_steps: int = Field(1, ge=0, description="tau: inner steps a fragment's all-reduce overlaps (below H/P)")
    mixing: float = Field(0.5, ge=0, le=1, description="alpha: weight of the local parameters when merging a fragment")


class StreamingDiLoCo(DiLoCo):
    """Fragment p (buckets p, p + P, ...) syncs after inner step L (counted from warm-up's end) when
    L + 1 = o_p + k*H, k >= 0, with o_p = floor(p*H/P) (o_0 = H): it sends anchor - parameters, launched
    without waiting. tau steps later it waits for the mean, steps the fragment's anchor with it and sets the
    fragment's parameters to alpha * parameters + (1 - alpha) * anchor. tau = 0 waits at once."""

    name = "streaming_diloco"
    Settings = StreamingDiLoCoSettings

    def membership_problems(self, membership: Membership) -> list[tuple[str, str]]:
        if not membership.changes:
            return []
        why = "its fragments are averaged at staggered steps, so no step lies between two outer steps of every fragment"
        return [("departures", f"workers may not leave or join under {self.name}: {why}")]

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        s, buckets = self.settings, len(model.bucket_bytes)
        if self.replica_size > 1:
            raise SettingError("replica", "streaming_diloco averages fragments over every rank; allowed: rank")
        if buckets % s.fragments:
            allowed = [p for p in range(1, buckets + 1) if buckets % p == 0]
            raise SettingError("fragments", f"must divide the model's {buckets} gradient buckets; allowed: {allowed}")
        if s.overlap_steps * s.fragments >= s.period:
            raise SettingError("overlap_steps", f"must be below H/P = {s.period}/{s.fragments} (got {s.overlap_steps})")
        self.parts = [Fragment(p, s.fragments) for p in range(s.fragments)]
        ratio = model.parameter_ratio
        self.part_bytes = [fragment_bytes(model.bucket_bytes, f) * ratio for f in self.parts]

    def syncs_after(self, step: int, part: int) -> bool:
        """Whether fragment `part` launches its all-reduce at the end of `step`."""
        s = self.settings
        local = step - s.warmup_steps
        offset = (part * s.period) // s.fragments or s.period
        return local >= 0 and (local + 1 - offset) % s.period == 0 and local + 1 >= offset

    def end_step(self, rank: int, step: int) -> Program:
        s = self.settings
        if self.warming_up(step):
            yield from super().end_step(rank, step)  # anchor = parameters; warm-up never ends with an outer step
        for p, fragment in enumerate(self.parts):
            if s.overlap_steps and self.syncs_after(step - s.overlap_steps, p):
                yield Wait(f"fragment{p}")
                yield from self.apply_outer(s.mixing, fragment=fragment)
        for p, fragment in enumerate(self.parts):
            if self.syncs_after(step, p):
                if s.overlap_steps == 0:
                    yield from self.outer_step(rank, self.part_bytes[p], fragment=fragment)
                else:
                    yield from self.outer_step(rank, self.part_bytes[p], fragment=fragment, handle=f"fragment{p}")
