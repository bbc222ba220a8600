"""No synchronization at all: the speed limit if communication were free (replicas diverge)."""

from __future__ import annotations

from policies.base import Policy


class NoSync(Policy):
    """Every hook returns an empty program; iteration time is compute alone."""

    name = "no_sync"
