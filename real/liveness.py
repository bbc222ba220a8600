"""Heartbeats through the rendezvous store, so a rank that died or hung can be named.

Every process stamps `syncsim/alive/<rank>` every `period` seconds from a background thread on its
own store connection, and says `syncsim/state/<rank>` = failed when it gives up. When a rank's
communication fails or times out, `suspects` names the ranks whose stamp went stale without such a
word (waiting a few periods for the staleness to show): those died or froze. Each is named with its
role ("rank 4 (parameter-server shard 0)"), so a reader knows which kind of process to look at.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Optional

import torch.distributed as dist

PERIOD = 0.5  # seconds between two stamps
PREFIX = "syncsim/alive/"
STATE = "syncsim/state/"


def named(rank: int, roles: Mapping[int, str]) -> str:
    """The rank and its role, "rank 4 (parameter-server shard 0)"; "rank 4" where the role is unknown."""
    role = roles.get(rank)
    return f"rank {rank} ({role})" if role else f"rank {rank}"


class Heartbeat:
    def __init__(
        self, rank: int, world: int, period: float = PERIOD, roles: Optional[Mapping[int, str]] = None
    ) -> None:
        """`roles`: rank -> what it runs ("worker", "parameter-server shard 0"), for the messages."""
        self.rank, self.world, self.period = rank, world, period
        self.roles: Mapping[int, str] = roles or {}
        self._stop = threading.Event()
        self._store = connect()
        self._thread: Optional[threading.Thread] = None
        if self._store is not None:
            self._store.set(PREFIX + str(rank), repr(time.time()))
            self._thread = threading.Thread(target=self._beat, daemon=True, name="syncsim-heartbeat")
            self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self._store.set(PREFIX + str(self.rank), repr(time.time()))  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - the store went away with rank 0: nothing left to stamp
                return

    def mark(self, state: str) -> None:
        """Tell the others this rank stopped on purpose (so it is not named as the culprit)."""
        if self._store is not None:
            try:
                self._store.set(STATE + str(self.rank), state)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass

    def suspects(self, patience: Optional[float] = None) -> str:
        """A sentence naming the ranks that died or froze (or why none can be named)."""
        if self._store is None:
            return "no heartbeat store to name the rank"
        deadline = time.monotonic() + (8 * self.period if patience is None else patience)
        try:
            while True:
                stale = self._stale()
                if stale or time.monotonic() > deadline:
                    break
                time.sleep(self.period / 2)
        except Exception:  # noqa: BLE001 - rank 0 hosts the store: its loss is the answer
            return f"{named(0, self.roles)} is gone (it hosted the rendezvous store)"
        return "dead or frozen: " + ", ".join(stale) if stale else "no rank went silent (a rank is stuck?)"

    def _stale(self) -> list[str]:
        store, now, out = self._store, time.time(), []
        for r in range(self.world):
            if r == self.rank or store.check([STATE + str(r)]):
                continue
            if not store.check([PREFIX + str(r)]):
                out.append(f"{named(r, self.roles)} never started")
                continue
            age = now - float(store.get(PREFIX + str(r)).decode())
            if age > 4 * self.period:
                out.append(f"{named(r, self.roles)} silent for {age:.1f} s")
        return out

    def close(self) -> None:
        self._stop.set()


def connect() -> Any:
    """A private client of the rendezvous store (TCPStore at MASTER_ADDR:MASTER_PORT)."""
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    if not addr or not port:
        return None
    try:
        return dist.TCPStore(addr, int(port), is_master=False, timeout=timedelta(seconds=5))
    except Exception:  # noqa: BLE001 - liveness is a diagnostic, never a reason to fail
        return None
