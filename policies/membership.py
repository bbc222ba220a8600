"""Which ranks train at each step: workers that leave the run and come back between outer steps.

An `Absence` takes a set of ranks out of steps `leave_step` .. `join_step - 1` (for good when `join_step`
is None). Absent ranks neither compute nor communicate; the others' collectives run over the live ranks
only. A rank is *joining* at the first step it is live again (or first live at all), where a policy hands
it the state it missed (`policies.ops.Broadcast`). Backends take the absences from the config
(`faults.departures`, docs/wan.md) and hand them to policies on the `ClusterView`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Absence:
    """`ranks` are away from step `leave_step` up to, not including, `join_step` (None: to the end).
    `index` names the config entry it comes from (`faults.departures[index]`)."""

    ranks: tuple[int, ...]
    leave_step: int
    join_step: Optional[int] = None
    index: int = 0

    def __post_init__(self) -> None:
        if not self.ranks:
            raise ValueError("an absence needs at least one rank")
        if self.leave_step < 0:
            raise ValueError(f"leave_step {self.leave_step}; allowed: 0 or more")
        if self.join_step is not None and self.join_step <= self.leave_step:
            raise ValueError(f"join_step {self.join_step}; allowed: more than leave_step ({self.leave_step})")

    def covers(self, step: int) -> bool:
        return self.leave_step <= step and (self.join_step is None or step < self.join_step)


@dataclass(frozen=True)
class Membership:
    """The live ranks of a world of `world_size` at every step, given its `absences`."""

    world_size: int
    absences: tuple[Absence, ...] = ()

    def __post_init__(self) -> None:
        for absence in self.absences:
            outside = [r for r in absence.ranks if not 0 <= r < self.world_size]
            if outside:
                raise ValueError(f"ranks {outside} do not exist (world size {self.world_size})")
        # policies ask at every step of every rank; membership changes only at these steps
        joins = frozenset(a.join_step for a in self.absences if a.join_step is not None)
        object.__setattr__(self, "_joins", joins)
        object.__setattr__(self, "_live", {})

    @property
    def changes(self) -> bool:
        """Whether any rank is ever away."""
        return bool(self.absences)

    def is_live(self, rank: int, step: int) -> bool:
        return not any(rank in a.ranks and a.covers(step) for a in self.absences)

    def live(self, step: int) -> tuple[int, ...]:
        """The ranks that train at `step`, in rank order."""
        if not self.absences:
            return tuple(range(self.world_size))
        covering = tuple(i for i, a in enumerate(self.absences) if a.covers(step))  # few: one entry per pattern
        found = self._live.get(covering)  # type: ignore[attr-defined]
        if found is None:
            away = {r for i in covering for r in self.absences[i].ranks}
            found = self._live[covering] = tuple(r for r in range(self.world_size) if r not in away)  # type: ignore[attr-defined]
        return found  # type: ignore[no-any-return]

    def joining(self, step: int) -> tuple[int, ...]:
        """Ranks live at `step` that were away at `step - 1` (none at step 0: every rank starts alike)."""
        if step not in self._joins:  # type: ignore[attr-defined]
            return ()
        return tuple(r for r in self.live(step) if not self.is_live(r, step - 1))

    def source(self, step: int) -> Optional[int]:
        """The lowest rank live at both `step - 1` and `step`: the one that hands joiners their state
        (None when every live rank is joining)."""
        before = set(self.live(step - 1))
        return next((r for r in self.live(step) if r in before), None)

    def next_live(self, rank: int, step: int) -> Optional[int]:
        """The first step from `step` on at which `rank` is live (None: it never comes back)."""
        while not self.is_live(rank, step):
            ends = [a.join_step for a in self.absences if rank in a.ranks and a.covers(step)]
            if any(end is None for end in ends):
                return None
            step = max(ends)  # type: ignore[type-var]
        return step

    def boundaries(self) -> tuple[tuple[int, str, int], ...]:
        """Every step at which membership changes, as (step, 'leave_step' or 'join_step', config index)."""
        found = [(a.leave_step, "leave_step", a.index) for a in self.absences]
        found += [(a.join_step, "join_step", a.index) for a in self.absences if a.join_step is not None]
        return tuple(sorted(found))
