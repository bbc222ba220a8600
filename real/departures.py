"""A worker's part in a phase where workers leave and come back (`faults.departures`, policies.membership).

A rank away at a step runs nothing of it; it resumes at the step it comes back at (`resume_at`), or ends the
phase if it never does. While away it must wait for the others' steps, which may take far longer than the
run's `--timeout`, the most any collective waits for a peer. So it waits outside every collective, on a key
of the rendezvous store (`Rendezvous`) that one live rank sets: the rank that hands it over
(`Membership.source`) as it starts the step it comes back at, or, for a rank away to the phase's end, the
first rank live at the phase's last step once it has ended the phase. It waits for as long as that rank is
alive, stamping its heartbeat (real/liveness.py) without having said it failed; then the hand-over's
collectives start at once, well within their timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Optional

from policies.base import Policy
from policies.membership import Membership
from real.liveness import PERIOD, PREFIX, STATE, connect

FOREVER = timedelta(days=365)  # an away rank's wait ends when the key is set, or when its opener is gone


class PeerGone(RuntimeError):
    """The rank an away rank waited for stopped or went silent."""


def resume_at(policy: Policy, rank: int, step: int, end: int) -> int:
    """The first step from `step` on at which `rank` trains; `end` (the phase's end) if it is away from
    there to the end."""
    view = policy.view  # None: an unbound policy, every rank at every step
    if view is None or not view.membership.changes or step >= end:
        return step
    back = view.membership.next_live(rank, step)
    return end if back is None else min(back, end)


class Rendezvous:
    """Keys `syncsim/departures/<tag>/<step>` of the rendezvous store: a live rank opens a step, an away rank
    waits until it is open while the rank that opens it is alive. `connect` makes a client of the store (default:
    to MASTER_ADDR:MASTER_PORT; None there: no waiting, the collectives' own timeout bounds it)."""

    def __init__(self, tag: str, connect: Callable[[], Any] = connect, period: float = PERIOD) -> None:
        self.tag, self.period, self.connect = tag, period, connect
        self.store = connect()

    def key(self, step: int) -> str:
        return f"syncsim/departures/{self.tag}/{step}"

    def open(self, step: int) -> None:
        if self.store is not None:
            self.store.set(self.key(step), "open")

    def wait(self, step: int, opener: int) -> None:
        """Return once `step` is open; raise PeerGone if `opener` stops or goes silent first. The key is
        waited for on a thread with a client of its own, which the store wakes as the key is set (polling
        would delay the hand-over; a store wait that times out logs a warning each time); this thread watches
        the opener meanwhile."""
        if self.store is None:
            return
        opened, failed = threading.Event(), []
        client = self.connect()

        def block() -> None:
            try:
                client.wait([self.key(step)], FOREVER)
            except Exception as exc:  # noqa: BLE001 - the store is gone: said below
                failed.append(exc)
            opened.set()

        threading.Thread(target=block, daemon=True, name="syncsim-departure").start()
        while not opened.wait(self.period):
            why = self._silence(opener)
            if why is not None:  # the thread stays blocked; the rank is about to stop
                raise PeerGone(f"back at step {step}, waiting for rank {opener} to start it: {why}")
        if failed:
            raise PeerGone(f"back at step {step}: the rendezvous store went away ({failed[0]})")

    def _silence(self, rank: int) -> Optional[str]:
        """Why `rank` will not open a step: it said it stopped, or its heartbeat went stale (None: alive)."""
        store = self.store
        try:
            if store.check([STATE + str(rank)]):
                return f"rank {rank} stopped ({store.get(STATE + str(rank)).decode()})"
            if not store.check([PREFIX + str(rank)]):
                return None  # no stamp yet: a rank without a heartbeat (tests), or one still starting
            age = time.time() - float(store.get(PREFIX + str(rank)).decode())
        except Exception:  # noqa: BLE001 - rank 0 hosts the store: its loss is the answer
            return "rank 0 is gone (it hosted the rendezvous store)"
        return f"rank {rank} silent for {age:.1f} s" if age > 4 * self.period else None


class Departures:
    """One worker's steps in one phase (up to, not including, step `end`) of a run where `membership` changes."""

    def __init__(self, membership: Membership, rank: int, end: int, rendezvous: Rendezvous) -> None:
        self.membership, self.rank, self.end, self.rendezvous = membership, rank, end, rendezvous

    def next_step(self, policy: Policy, step: int) -> int:
        """The step this rank trains next from `step` on (`end`: none). Coming back from away, it first waits
        until the step is open; handing others over at a step, it opens it."""
        back = resume_at(policy, self.rank, step, self.end)
        m = self.membership
        if back != step:  # it was away
            self.rendezvous.wait(back, self._opener(back))
        if back < self.end and m.joining(back) and m.source(back) == self.rank:
            self.rendezvous.open(back)
        return back

    def finish(self) -> None:
        """The phase ended on this rank: the first rank live at its last step lets those away to the end go."""
        last = self.membership.live(self.end - 1)
        if last and last[0] == self.rank and len(last) < self.membership.world_size:
            self.rendezvous.open(self.end)

    def _opener(self, step: int) -> int:
        if step < self.end:
            source = self.membership.source(step)
            if source is None:  # refused when the policy is bound (LocalSGD.membership_problems)
                raise RuntimeError(f"nobody hands over the ranks joining at step {step}")
            return source
        return self.membership.live(self.end - 1)[0]
