"""No synchronization at all: the speed limit if communication were free (replicas diverge)."""

from __future__ import annotations

from policies.base import Policy
from policies.held import HeldState


class NoSync(Policy):
    """Every hook returns an empty program; iteration time is compute alone."""

    name = "no_sync"

    def held_state(self) -> HeldState:
        """A replica, its gradient and optimizer state; nothing is sent, so no communication buffers."""
        return HeldState()
