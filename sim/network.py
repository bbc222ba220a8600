"""Flow-level network on a SimPy clock: transfers share links max-min fairly.

One event per transfer start and finish, never per packet. Rates are recomputed only when the set of
active transfers changes; starts and finishes at the same instant are coalesced into one recompute,
and a completion timer made stale by a later recompute is dropped by a version check.

A transfer's data is done when its bytes have crossed its path; it is *delivered* one path latency
later (propagation and per-hop latency), when its event fires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import simpy

from sim.maxmin import max_min_rates

# Transfers whose remaining bytes would take under this long (or are under this fraction of their
# size) finish in the same event; floating-point residue must never schedule a zero-length timer.
FINISH_TOL_S = 1e-12
FINISH_TOL_REL = 1e-9


@dataclass(eq=False)
class Transfer:
    """Active bookkeeping for one transfer (one or more equal-rate sub-flows)."""

    slot: int
    nbytes: float
    latency: float
    done: simpy.Event
    started: float


class Network:
    """Directed links with `capacity` (bytes/s) and `latency` (s), indexed by link id."""

    def __init__(self, env: simpy.Environment, capacity: np.ndarray, latency: np.ndarray) -> None:
        if np.any(np.asarray(capacity) <= 0):
            raise ValueError("every link needs a positive capacity")
        self.env = env
        self.capacity = np.asarray(capacity, dtype=float)
        self.latency = np.asarray(latency, dtype=float)
        self.link_bytes = np.zeros(len(self.capacity))  # bytes carried per link so far
        self.recomputes = 0
        self.transfers_started = 0
        self._slots: list[Optional[Transfer]] = []
        self._remaining = np.zeros(64)
        self._size = np.zeros(64)
        self._rate = np.zeros(64)
        self._cap = np.full(64, np.inf)
        self._active = np.zeros(64, dtype=bool)
        self._coo_link = np.zeros(256, dtype=np.int64)
        self._coo_slot = np.zeros(256, dtype=np.int64)
        self._coo_mult = np.zeros(256)
        self._coo_n = 0
        self._n_active = 0
        self._last_update = 0.0
        self._version = 0
        self._recompute_pending = False

    # ----------------------------------------------------------------------------- public API
    def path_latency(self, path: Sequence[int]) -> float:
        return float(self.latency[list(path)].sum()) if len(path) else 0.0

    def transfer(
        self,
        paths: Sequence[Sequence[int]],
        nbytes: float,
        *,
        latency: Optional[float] = None,
        cap: float = np.inf,
    ) -> simpy.Event:
        """Send `nbytes` along every path in `paths` at one common rate; returns the delivery event.

        `latency` defaults to the largest path latency. `cap` bounds the per-path rate (bytes/s).
        """
        if nbytes < 0:
            raise ValueError(f"transfer of negative size {nbytes}")
        env = self.env
        done = env.event()
        lat = max((self.path_latency(p) for p in paths), default=0.0) if latency is None else latency
        links = [link for path in paths for link in path]
        self.transfers_started += 1
        if nbytes == 0 or not links:
            self._deliver(done, lat)
            return done
        self._advance()
        slot = self._new_slot(nbytes, cap)
        self._slots[slot] = Transfer(slot, nbytes, lat, done, env.now)
        ids, counts = np.unique(np.asarray(links, dtype=np.int64), return_counts=True)
        self._append_coo(ids, np.full(len(ids), slot), counts)
        self._schedule_recompute()
        return done

    @property
    def active_transfers(self) -> int:
        return self._n_active

    def link_load(self) -> np.ndarray:
        """Current bytes/s on every link (for utilisation and invariant checks)."""
        alive = self._alive_entries()
        links = self._coo_link[alive]
        weights = self._coo_mult[alive] * self._rate[self._coo_slot[alive]]
        return np.bincount(links, weights=weights, minlength=len(self.capacity))

    # ----------------------------------------------------------------------------- internals
    def _deliver(self, done: simpy.Event, latency: float) -> None:
        if latency > 0:
            self.env.timeout(latency).callbacks.append(lambda _ev: done.succeed())
        else:
            done.succeed()

    def _new_slot(self, nbytes: float, cap: float) -> int:
        slot = len(self._slots)
        if slot >= len(self._remaining):
            if self._n_active * 2 < slot:
                self._compact()
                slot = len(self._slots)
            if slot >= len(self._remaining):
                grow = len(self._remaining)
                self._remaining = np.concatenate([self._remaining, np.zeros(grow)])
                self._size = np.concatenate([self._size, np.zeros(grow)])
                self._rate = np.concatenate([self._rate, np.zeros(grow)])
                self._cap = np.concatenate([self._cap, np.full(grow, np.inf)])
                self._active = np.concatenate([self._active, np.zeros(grow, dtype=bool)])
        self._slots.append(None)
        self._remaining[slot] = nbytes
        self._size[slot] = nbytes
        self._rate[slot] = 0.0
        self._cap[slot] = cap
        self._active[slot] = True
        self._n_active += 1
        return slot

    def _append_coo(self, links: np.ndarray, slots: np.ndarray, mult: np.ndarray) -> None:
        n, m = self._coo_n, len(links)
        if n + m > len(self._coo_link):
            size = max(2 * len(self._coo_link), n + m)
            for name in ("_coo_link", "_coo_slot", "_coo_mult"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        self._coo_link[n : n + m] = links
        self._coo_slot[n : n + m] = slots
        self._coo_mult[n : n + m] = mult
        self._coo_n = n + m

    def _alive_entries(self) -> np.ndarray:
        return np.flatnonzero(self._active[self._coo_slot[: self._coo_n]])

    def _compact(self) -> None:
        """Renumber live transfers into slots 0..n-1 and drop dead incidence entries."""
        live = [t for t in self._slots if t is not None]
        old_slots = np.array([t.slot for t in live], dtype=np.int64)
        new_of_old = np.full(len(self._slots), -1, dtype=np.int64)
        new_of_old[old_slots] = np.arange(len(live))
        alive = self._alive_entries()
        links, slots, mult = self._coo_link[alive], new_of_old[self._coo_slot[alive]], self._coo_mult[alive]
        remaining, size = self._remaining[old_slots], self._size[old_slots]
        rate, cap = self._rate[old_slots], self._cap[old_slots]
        self._remaining[:] = 0.0
        self._size[:] = 0.0
        self._rate[:] = 0.0
        self._cap[:] = np.inf
        self._active[:] = False
        n = len(live)
        self._remaining[:n], self._size[:n], self._rate[:n], self._cap[:n] = remaining, size, rate, cap
        self._active[:n] = True
        for i, t in enumerate(live):
            t.slot = i
        self._slots = list(live)
        self._coo_n = 0
        self._append_coo(links, slots, mult)

    def _advance(self) -> None:
        """Move every active transfer forward to the current time at its current rate."""
        now = self.env.now
        dt = now - self._last_update
        if dt > 0 and self._n_active:
            n = len(self._slots)
            moved = self._rate[:n] * dt
            self._remaining[:n] -= np.where(self._active[:n], moved, 0.0)
            alive = self._alive_entries()
            self.link_bytes += np.bincount(
                self._coo_link[alive],
                weights=self._coo_mult[alive] * moved[self._coo_slot[alive]],
                minlength=len(self.capacity),
            )
        self._last_update = now

    def _schedule_recompute(self) -> None:
        if not self._recompute_pending:
            self._recompute_pending = True
            self.env.timeout(0).callbacks.append(self._recompute)

    def _recompute(self, _event: object = None) -> None:
        self._recompute_pending = False
        self._advance()
        self._finish_due()
        self._version += 1
        if not self._n_active:
            return
        self.recomputes += 1
        n = len(self._slots)
        alive = self._alive_entries()
        rates = max_min_rates(
            self._coo_link[alive],
            self._coo_slot[alive],
            self._coo_mult[alive],
            self.capacity,
            n,
            self._cap[:n],
        )
        self._rate[:n] = np.where(self._active[:n], rates, 0.0)
        active = np.flatnonzero(self._active[:n])
        eta = self._remaining[active] / self._rate[active]
        version = self._version
        self.env.timeout(max(float(eta.min()), 0.0)).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version == self._version:  # otherwise a later recompute superseded this timer
            self._recompute()

    def _finish_due(self) -> None:
        n = len(self._slots)
        if not self._n_active:
            return
        active = self._active[:n]
        tol_s = max(FINISH_TOL_S, 8 * float(np.spacing(self.env.now)))
        remaining = self._remaining[:n]
        due = active & ((remaining <= self._rate[:n] * tol_s) | (remaining <= self._size[:n] * FINISH_TOL_REL))
        for slot in np.flatnonzero(due):
            transfer = self._slots[slot]
            assert transfer is not None  # an active slot always holds its transfer
            self._slots[slot] = None
            self._active[slot] = False
            self._rate[slot] = 0.0
            self._remaining[slot] = 0.0
            self._n_active -= 1
            self._deliver(transfer.done, transfer.latency)
