"""SSP (stale synchronous parallel): ASP, but no worker runs more than s steps ahead of the slowest."""

from __future__ import annotations

from pydantic import Field

from policies.ops import Program, WaitForClock
from policies.ps import AsyncShardedPolicy, PSSettings


class SSPSettings(PSSettings):
    staleness: int = Field(
        3,
        ge=0,
        le=1_000_000,
        description="bound s, in steps (clocks): start step c only once every worker finished step c-s-1 "
        "(the staleness output counts updates instead: docs/policies.md)",
    )


class SSP(AsyncShardedPolicy):
    """ASP plus the bound of Ho et al. (2013): a worker at clock c may start step c, and read the
    parameters it will use, only when the slowest worker has finished step c - s - 1, so its reads
    include every update from those clocks. s = 0 is BSP through the parameter server; a large s
    approaches ASP. Time blocked on the bound is recorded as wait.

    Units: s counts steps (clocks); the staleness the shards record counts updates (others' updates
    to the bucket between a worker's read and its update, about p - 1 per step with p workers). Workers
    that never drift s steps apart never block, and SSP(s) then runs exactly as ASP."""

    name = "ssp"
    Settings = SSPSettings

    def begin_step(self, rank: int, step: int) -> Program:
        finished = step - self.settings.staleness  # every worker must have finished this many steps
        if finished > 0:
            yield WaitForClock(finished)
