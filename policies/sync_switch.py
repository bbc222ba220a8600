"""Sync-Switch (Li, Mangoubi, Xu, Guo, ICDCS'21): start in BSP, switch to ASP (or back) when a
switching policy says so. Built by composition: it wraps two policies, `first` (default `ps`, BSP
through parameter servers) and `then` (default `asp`), and runs them as phases (policies.phases).

Offline switching (`switching: offline`): a fixed `pattern` of phases, `1` for `first` and `0` for
`then` ("10": first then `then`; "101" and longer allowed), with `switch_at` the fractions of the
training budget where one phase ends and the next begins. The budget is counted as the paper counts
it: x% BSP is x% of the BSP steps, the rest runs as ASP updates counted per worker (8 workers:
8,000 BSP steps <-> 64,000 ASP updates).

Online switching (`switching: online`, for transient stragglers): run `first` and watch each
worker's own pace (iteration time less the time blocked on others). A worker slower than
`threshold` x the median pace of its peers for `window` iterations in a row starts a `then` phase;
it ends once every worker has run `window` iterations in a row faster than `release` x its peers'
median (release < threshold: the hysteresis that keeps it from flapping), and `first` resumes.

Every switch stops all workers, checkpoints the model, restarts in the other mode, and costs
`switch_cost_s` seconds (the paper measured its framework overhead as low as 1.7% of training).
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from policies.base import Bucket, Policy, PolicySettings, SettingError
from policies.ops import Program, ServerSpec
from policies.phases import Phase, Progress, Timing
from policies.view import ClusterView, ModelInfo

InnerPolicy = Union[str, dict[str, Any]]


class SyncSwitchSettings(PolicySettings):
    first: InnerPolicy = Field("ps", description="the policy of '1' phases: a name, or {name: ..., settings...}")
    then: InnerPolicy = Field("asp", description="the policy of '0' phases: a name, or {name: ..., settings...}")
    switching: Literal["offline", "online"] = Field(
        "offline", description="offline: the fixed pattern and switch_at; online: switch on observed stragglers"
    )
    pattern: str = Field("10", description="offline: phases in order, 1 = first, 0 = then (e.g. 10, 101)")
    switch_at: Union[Annotated[float, Field(ge=0, le=1)], list[Annotated[float, Field(ge=0, le=1)]]] = Field(
        0.05,
        description="offline: fraction of the training budget where each phase ends (one number per switch "
        "of the pattern, increasing); 0.05 with 10 = 5% of the BSP steps, then ASP",
    )
    switch_cost_s: float = Field(
        0.0, ge=0, le=1e6, description="idle seconds every switch costs (checkpoint and restart)"
    )
    threshold: float = Field(
        1.5,
        gt=1,
        le=1e3,
        description="online: a worker slower than this x its peers' median is slow",
    )
    window: int = Field(
        5, ge=1, le=1_000_000, description="online: iterations in a row that make a worker slow (or recovered)"
    )
    release: Optional[float] = Field(
        None,
        gt=1,
        description="online: a slow worker has recovered below this x its peers' median; default halfway "
        "between 1 and threshold (must not exceed threshold)",
    )

    @model_validator(mode="wrap")
    @classmethod
    def _release_with_other_errors(cls, data: Any, handler: Any) -> SyncSwitchSettings:
        """release above threshold is reported beside the other settings' errors, not after them
        (a failing field stops the model before SyncSwitch can compare the two)."""
        try:
            return handler(data)
        except ValidationError as exc:
            release, threshold = (data.get(k) if isinstance(data, dict) else None for k in ("release", "threshold"))
            threshold = 1.5 if threshold is None and isinstance(data, dict) else threshold
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (release, threshold))
            failed = {e["loc"][:1] for e in exc.errors()}
            if not numbers or release <= threshold or ("release",) in failed or ("threshold",) in failed:
                raise
            why = ValueError(f"must not exceed threshold ({threshold}), got {release}")
            extra = {"type": "value_error", "loc": ("release",), "input": release, "ctx": {"error": why}}
            raise ValidationError.from_exception_data(exc.title, [*exc.errors(), extra]) from None  # type: ignore[list-item]

    @field_validator("pattern")
    @classmethod
    def _binary(cls, value: str) -> str:
        if not value or set(value) - {"0", "1"}:
            raise ValueError(f"use only the letters 1 (first) and 0 (then), e.g. 10 or 101 (got {value!r})")
        return value

    @property
    def boundaries(self) -> tuple[float, ...]:
        """Offline: the fraction of the budget where each phase of the pattern ends (the last is 1)."""
        cuts = [self.switch_at] if isinstance(self.switch_at, float) else list(self.switch_at)
        return (*cuts, 1.0)

    @property
    def release_factor(self) -> float:
        return self.release if self.release is not None else 1 + (self.threshold - 1) / 2


def inner_policy(field: str, spec: InnerPolicy) -> Policy:
    """Create a wrapped policy; its errors name the wrapper's setting (`first.name`, `then.staleness`)."""
    from policies.registry import create  # the registry imports this module

    name, settings = (spec, {}) if isinstance(spec, str) else (spec.get("name"), dict(spec))
    settings.pop("name", None)
    if not isinstance(name, str) or not name:
        raise SettingError(field, "needs a policy name, e.g. ps or {name: asp, shards: 4}")
    if name == SyncSwitch.name:
        raise SettingError(f"{field}.name", "sync_switch cannot wrap itself; allowed: any other policy")
    try:
        return create(name, settings)
    except SettingError as exc:
        raise SettingError.of([(f"{field}.{name}", detail) for name, detail in exc.problems]) from None


class SyncSwitch(Policy):
    """Sync-Switch: phases of `first` and `then`, offline by a fixed pattern and fractions of the BSP
    step budget, or online while stragglers last; every switch stops, checkpoints and restarts the
    workers (docs/sync_switch.md)."""

    name = "sync_switch"
    Settings = SyncSwitchSettings

    def __init__(self, settings: BaseModel | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        s = self.settings
        problems: list[tuple[str, str]] = []  # every bad setting at once, not only the first
        if s.switching == "online":
            for field in ("pattern", "switch_at"):
                if field in s.model_fields_set:
                    problems.append((field, "has no effect with switching: online; remove it"))
            if s.release_factor > s.threshold:
                problems.append(("release", f"must not exceed threshold ({s.threshold}), got {s.release}"))
        else:
            for field in ("threshold", "window", "release"):
                if field in s.model_fields_set:
                    problems.append((field, "has no effect with switching: offline; remove it"))
            wanted = len(s.pattern) - 1
            cuts = s.boundaries
            if len(cuts) - 1 != wanted:
                problems.append(
                    ("switch_at", f"pattern {s.pattern} switches {wanted} time(s): give {wanted} fraction(s)")
                )
            elif any(b < a for a, b in zip(cuts, cuts[1:])):
                problems.append(("switch_at", f"fractions must not decrease, got {list(cuts[:-1])}"))
        inner = {}
        for field in ("first", "then"):
            try:
                inner[field] = inner_policy(field, getattr(s, field))
            except SettingError as exc:
                problems += exc.problems
        if problems:
            raise SettingError.of(problems)
        self.first, self.then = inner["first"], inner["then"]
        self._windows: dict[int, deque[float]] = {}  # rank -> its last `window` paces
        self._paces: dict[int, float] = {}  # rank -> the median of its window
        self._recovered_ranks = 0  # ranks with `window` iterations in a row at pace
        self._suspects: tuple[int, ...] = ()
        self._recovered: dict[int, int] = {}  # rank -> iterations in a row at pace (a `then` phase)
        self._ranks: set[int] = set()  # every rank observed
        self._over = self._straggling = False
        self.switches: list[tuple[int, str]] = []  # (step, why) of every online switch decided

    # -- plan -------------------------------------------------------------------------------------
    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        for field, policy in (("first", self.first), ("then", self.then)):
            try:
                policy.bind(view, model)
            except SettingError as exc:
                raise SettingError.of([(f"{field}.{name}", detail) for name, detail in exc.problems]) from None

    def phase_policies(self) -> Sequence[Policy]:
        return (self.first, self.then)

    def pinned_settings(self) -> dict[str, Any]:
        """`first` and `then` pinned as their own policies pin themselves."""
        given = super().pinned_settings()
        for field, policy in (("first", self.first), ("then", self.then)):
            spec = getattr(self.settings, field)
            name = spec if isinstance(spec, str) else spec["name"]
            pinned = policy.pinned_settings()
            if pinned or field in given:
                given[field] = {"name": name, **pinned}
        return given

    # -- phases -----------------------------------------------------------------------------------
    def next_phase(self, progress: Progress) -> Optional[Phase[Policy]]:
        if progress.left <= 0:
            return None
        cost = self.settings.switch_cost_s if progress.phases else 0.0
        if self.settings.switching == "online":
            policy = self.first if progress.phases % 2 == 0 else self.then
            self._start_window(straggling=policy is self.then)
            return Phase(policy, progress.left, self._label(policy), adaptive=True, switch_cost_s=cost)
        ends = self._planned_ends(progress)
        for letter, end in zip(self.settings.pattern, ends):
            if end > progress.updates:
                policy = self.first if letter == "1" else self.then
                return Phase(policy, end - progress.updates, self._label(policy), switch_cost_s=cost)
        return None

    def _planned_ends(self, progress: Progress) -> list[int]:
        """Worker-iterations at the end of each offline phase: whole BSP steps, so both modes agree."""
        steps = progress.budget // progress.workers
        return [round(f * steps) * progress.workers for f in self.settings.boundaries[:-1]] + [progress.budget]

    def _label(self, policy: Policy) -> str:
        if policy is self.then and self.first.name == self.then.name:
            return f"{policy.name}'"
        return policy.name

    # -- online switching -------------------------------------------------------------------------
    def _start_window(self, straggling: bool) -> None:
        """A new online phase: fresh windows; `straggling` for a `then` phase begun for stragglers."""
        self._windows, self._paces, self._recovered, self._over = {}, {}, {}, False
        self._recovered_ranks = 0
        self._straggling = straggling
        if not straggling:
            self._suspects = ()

    def observe(self, timing: Timing) -> None:
        """Costs O(workers): only the observed rank is judged against its peers (a rank whose peers
        changed is judged at its own next iteration, one step later at most)."""
        if self.settings.switching != "online" or self._over:
            return
        rank, window = timing.rank, self.settings.window
        self._ranks.add(rank)
        paces = self._windows.setdefault(rank, deque(maxlen=window))
        paces.append(timing.busy_s)
        self._paces[rank] = statistics.median(paces)
        peers = self._peer_median(rank)
        if not self._straggling:  # a `first` phase: look for a straggler
            if len(paces) == window and peers is not None and min(paces) > self.settings.threshold * peers:
                self._suspects, self._over = self._slow_ranks(), True
                self.switches.append((timing.step, f"ranks {list(self._suspects)} slow"))
            return
        # a `then` phase begun for stragglers: over once every worker ran `window` in a row at pace
        before = self._recovered.get(rank, 0)
        after = before + 1 if peers is not None and timing.busy_s < self.settings.release_factor * peers else 0
        self._recovered[rank] = after
        self._recovered_ranks += (after >= window) - (before >= window)
        if self._recovered_ranks == len(self._ranks):
            self.switches.append((timing.step, f"ranks {list(self._suspects)} recovered"))
            self._over = True

    def phase_over(self) -> bool:
        return self._over

    def _peer_median(self, rank: int) -> Optional[float]:
        """The median of the other ranks' windowed median paces."""
        others = [pace for r, pace in self._paces.items() if r != rank]
        return float(np.median(others)) if others else None

    def _slow_ranks(self) -> tuple[int, ...]:
        """Ranks whose last `window` paces all exceed `threshold` x their peers' median pace (at a
        switch only: O(workers^2))."""
        window, slow = self.settings.window, []
        for rank, paces in sorted(self._windows.items()):
            peers = self._peer_median(rank)
            if len(paces) == window and peers is not None and min(paces) > self.settings.threshold * peers:
                slow.append(rank)
        return tuple(slow)

    def state_dict(self) -> dict[str, Any]:
        return {
            "straggling": self._straggling,
            "suspects": list(self._suspects),
            "switches": list(self.switches),
            "first": self.first.state_dict(),
            "then": self.then.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._straggling = bool(state.get("straggling", False))
        self._suspects = tuple(state.get("suspects", ()))
        self.switches = [tuple(s) for s in state.get("switches", ())]  # type: ignore[misc]
        self.first.load_state_dict(state.get("first", {}))
        self.then.load_state_dict(state.get("then", {}))

    # -- hooks: a phased policy runs its phases' policies; called directly, it is `first` ----------
    def begin_step(self, rank: int, step: int) -> Program:
        return self.first.begin_step(rank, step)

    def on_forward(self, rank: int, step: int, bucket: Bucket) -> Program:
        return self.first.on_forward(rank, step, bucket)

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        return self.first.on_gradients(rank, step, bucket)

    def end_step(self, rank: int, step: int) -> Program:
        return self.first.end_step(rank, step)

    def servers(self) -> Sequence[ServerSpec]:
        return self.first.servers()
