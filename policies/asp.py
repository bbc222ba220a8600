"""ASP (asynchronous parallel): read from the parameter servers, compute, push; never wait for peers."""

from __future__ import annotations

from policies.ps import AsyncShardedPolicy


class ASP(AsyncShardedPolicy):
    """Each step reads the shards' current parameters as forward needs them, and pushes each
    bucket's gradient slices as backward produces them to asynchronous shards, which apply every
    push on arrival, one at a time (`apply_ms_per_mb` of server time per MB). No barrier anywhere:
    workers share the config's iterations x workers updates, so fast workers do more of them. The
    shards record the staleness of every update they apply, in updates: those others applied to
    the bucket since the pusher last read it."""

    name = "asp"
