"""Flow-level network on a SimPy clock: transfers share links max-min fairly.

One event per transfer start and finish, never per packet. Rates are recomputed only when the set of
active transfers changes; starts and finishes at the same instant are coalesced into one recompute,
and a completion timer made stale by a later recompute is dropped by a version check.

Transfers crossing exactly the same links (with the same multiplicities and cap) form a *class*.
The max-min allocation is unique, so identical transfers always get identical rates: the solver
runs over classes, each weighted by its number of active transfers. A PS worker's concurrent
pushes of many buckets, or a stepwise ring's flows, collapse into a handful of classes.

A transfer's data is done when its bytes have crossed its path; it is *delivered* one path latency
later (propagation and per-hop latency), when its event fires.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np
import simpy
from simpy.core import NORMAL

from sim.maxmin import max_min_rates

# The network solves with numpy until this many recomputes, then with the compiled kernel: a short run
# never pays the kernel's one-off load (about 0.5 s per process), a long one gains several times over.
# Both give bitwise-identical rates, so where the switch falls changes no result. Large solves (an
# all-to-all's thousands of flows) switch sooner: after this many incidence entries solved in all.
COMPILE_AFTER = 2_000
COMPILE_AFTER_ENTRIES = 2_000_000

# Transfers whose remaining bytes would take under this long (or are under this fraction of their
# size) finish in the same event; floating-point residue must never schedule a zero-length timer.
FINISH_TOL_S = 1e-12
FINISH_TOL_REL = 1e-9


@dataclass(eq=False)
class Transfer:
    """Bookkeeping for one active transfer (one or more equal-rate sub-flows)."""

    slot: int
    nbytes: float
    latency: float
    done: simpy.Event


class _Growable:
    """Named numpy columns that double in length when full."""

    def __init__(self, length: int, **columns: tuple[type, float]) -> None:
        self._spec = columns
        for name, (dtype, fill) in columns.items():
            setattr(self, name, np.full(length, fill, dtype=dtype))
        self.size = length

    def ensure(self, n: int) -> None:
        if n <= self.size:
            return
        new = max(2 * self.size, n)
        for name, (dtype, fill) in self._spec.items():
            old = getattr(self, name)
            grown = np.full(new, fill, dtype=dtype)
            grown[: self.size] = old
            setattr(self, name, grown)
        self.size = new


class Network:
    """Directed links with `capacity` (bytes/s) and `latency` (s), indexed by link id."""

    def __init__(self, env: simpy.Environment, capacity: np.ndarray, latency: np.ndarray) -> None:
        if np.any(np.asarray(capacity) <= 0):
            raise ValueError("every link needs a positive capacity")
        self.env = env
        self.capacity = np.asarray(capacity, dtype=float)
        self.latency = np.asarray(latency, dtype=float)
        self._folded_bytes = np.zeros(len(self.capacity))  # bytes of classes since forgotten, per link
        self.recomputes = 0
        self._solved_entries = 0
        self.transfers_started = 0
        # transfers, by slot
        self._slots: list[Optional[Transfer]] = []
        self._t = _Growable(64, remaining=(float, 0.0), nbytes=(float, 0.0), cls=(np.int64, 0), active=(bool, False))
        self._n_active = 0
        self._n_open = 0  # of them, open flows (background traffic, which never ends)
        self._n_delivering = 0  # transfers whose bytes are through, waiting out their latency
        self.latency_version = 0  # bumped whenever a link's latency changes
        # classes of identical transfers, and their link incidence (link, class, multiplicity)
        self._class_of: dict[tuple, int] = {}
        # count: active transfers per class; rated: how many of them the current rates were computed
        # for (a transfer that joins a class has no rate until the recompute at the same instant)
        # carried: bytes moved so far per sub-flow, summed over the class's transfers (per-link byte
        # counts are derived from it on demand, so advancing time costs O(classes), not O(links))
        self._c = _Growable(
            16, count=(float, 0.0), rated=(float, 0.0), rate=(float, 0.0), cap=(float, np.inf), carried=(float, 0.0)
        )
        self._n_classes = 0
        self._e = _Growable(64, link=(np.int64, 0), cls=(np.int64, 0), mult=(float, 0.0))
        self._n_entries = 0
        self._path_latency: dict[tuple[int, ...], float] = {}
        self._class_by_paths: dict[tuple, int] = {}  # (paths, cap) -> class, until classes are renumbered
        self._last_update = 0.0
        self._version = 0
        self._recompute_pending = False

    # ----------------------------------------------------------------------------- public API
    def path_latency(self, path: Sequence[int]) -> float:
        key = tuple(path)
        lat = self._path_latency.get(key)
        if lat is None:
            lat = self._path_latency[key] = float(self.latency[list(key)].sum()) if key else 0.0
        return lat

    def transfer(
        self,
        paths: Sequence[Sequence[int]],
        nbytes: float,
        *,
        latency: Optional[float] = None,
        cap: float = np.inf,
        done: Optional[simpy.Event] = None,
    ) -> simpy.Event:
        """Send `nbytes` along every path in `paths` at one common rate; returns the delivery event.

        `latency` defaults to the largest path latency. `cap` bounds the per-path rate (bytes/s).
        `done`: the (untriggered) event to fire on delivery, if the caller has one already.
        """
        if nbytes < 0:
            raise ValueError(f"transfer of negative size {nbytes}")
        if not cap > 0:
            raise ValueError(f"transfer rate cap must be > 0, got {cap}")
        if done is None:
            done = self.env.event()
        lat = max((self.path_latency(p) for p in paths), default=0.0) if latency is None else latency
        self.transfers_started += 1
        links = [link for path in paths for link in path]
        if nbytes == 0 or not links:
            self._deliver(done, lat)
            return done
        self._advance()
        cls = self._class_of_paths(paths, links, cap)
        slot = self._new_slot(nbytes, cls)
        self._slots[slot] = Transfer(slot, nbytes, lat, done)
        self._schedule_recompute()
        return done

    def open_flow(self, paths: Sequence[Sequence[int]], cap: float) -> Transfer:
        """A flow with no end (background traffic) at up to `cap` bytes/s per path, until `close_flow`."""
        if not (0 < cap < np.inf):
            raise ValueError(f"an open flow needs a finite rate cap > 0, got {cap}")
        links = [link for path in paths for link in path]
        if not links:
            raise ValueError("an open flow needs at least one link")
        self._advance()
        slot = self._new_slot(np.inf, self._class(links, cap))
        transfer = self._slots[slot] = Transfer(slot, np.inf, 0.0, self.env.event())
        self._n_open += 1
        self._schedule_recompute()
        return transfer

    def close_flow(self, transfer: Transfer) -> None:
        """Stop an open flow; its bytes so far stay counted on its links."""
        if self._slots[transfer.slot] is not transfer:
            raise ValueError("that flow is not open")
        self._advance()
        self._release(transfer.slot)
        self._n_open -= 1
        self._schedule_recompute()

    def set_capacity(self, links: Sequence[int], capacity: Sequence[float] | float) -> None:
        """Change link capacities from now on (e.g. a transiently slowed link)."""
        values = np.broadcast_to(np.asarray(capacity, dtype=float), (len(links),))
        if np.any(values <= 0):
            raise ValueError("link capacities must stay > 0")
        self._advance()
        self.capacity[list(links)] = values
        self._schedule_recompute()

    def set_latency(self, links: Sequence[int], latency: Sequence[float] | float) -> None:
        """Change link latencies for transfers that start from now on (in-flight ones keep theirs)."""
        self.latency[list(links)] = np.broadcast_to(np.asarray(latency, dtype=float), (len(links),))
        self._path_latency.clear()
        self.latency_version += 1  # callers that cache path latencies drop them

    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried per link up to the last time the network advanced."""
        e, n = self._e, self._n_entries
        weights = e.mult[:n] * self._c.carried[e.cls[:n]]
        return self._folded_bytes + np.bincount(e.link[:n], weights=weights, minlength=len(self.capacity))

    def carried_bytes(self) -> np.ndarray:
        """Bytes carried per link up to the current time."""
        self._advance()
        return self.link_bytes

    @property
    def active_transfers(self) -> int:
        return self._n_active

    @property
    def finite_transfers(self) -> int:
        """Transfers in flight that will end (open background flows aside), latency included: while any
        is, work goes on."""
        return self._n_active - self._n_open + self._n_delivering

    def link_load(self) -> np.ndarray:
        """Current bytes/s on every link (for utilisation and invariant checks)."""
        e, c, n = self._e, self._c, self._n_entries
        weights = e.mult[:n] * c.rated[e.cls[:n]] * c.rate[e.cls[:n]]
        return np.bincount(e.link[:n], weights=weights, minlength=len(self.capacity))

    # ----------------------------------------------------------------------------- transfers
    def _class_of_paths(self, paths: Sequence[Sequence[int]], links: list[int], cap: float) -> int:
        """`_class`, remembered per path set: a worker's transfers reuse the same paths all run long."""
        key = (tuple(tuple(path) for path in paths), cap)
        cls = self._class_by_paths.get(key)
        if cls is None:
            cls = self._class(links, cap)
            self._class_by_paths[key] = cls
        else:
            self._c.count[cls] += 1
        return cls

    def _class(self, links: list[int], cap: float) -> int:
        ids, counts = np.unique(np.asarray(links, dtype=np.int64), return_counts=True)
        key = (ids.tobytes(), counts.tobytes(), cap)
        cls = self._class_of.get(key)
        if cls is None:
            if self._n_classes == self._c.size and self._live_classes() * 2 <= self._n_classes:
                self._compact_classes()
            cls = self._class_of[key] = self._n_classes
            self._n_classes += 1
            self._c.ensure(self._n_classes)
            c = self._c
            c.count[cls], c.rated[cls], c.rate[cls], c.cap[cls], c.carried[cls] = 0.0, 0.0, 0.0, cap, 0.0
            n, m = self._n_entries, len(ids)
            self._e.ensure(n + m)
            self._e.link[n : n + m], self._e.cls[n : n + m], self._e.mult[n : n + m] = ids, cls, counts
            self._n_entries = n + m
        self._c.count[cls] += 1
        return cls

    def _new_slot(self, nbytes: float, cls: int) -> int:
        slot = len(self._slots)
        if slot == self._t.size and self._n_active * 2 <= slot:
            self._compact_slots()
            slot = len(self._slots)
        self._t.ensure(slot + 1)
        self._slots.append(None)
        t = self._t
        t.remaining[slot], t.nbytes[slot], t.cls[slot], t.active[slot] = nbytes, nbytes, cls, True
        self._n_active += 1
        return slot

    def _deliver(self, done: simpy.Event, latency: float) -> None:
        if latency > 0:  # `done` itself fires `latency` from now, as a Timeout would: one event, not two
            self._n_delivering += 1
            done.callbacks.insert(0, self._delivered)
            done._ok, done._value = True, None
            self.env.schedule(done, NORMAL, latency)
        else:
            done.succeed()

    def _delivered(self, _done: simpy.Event) -> None:
        self._n_delivering -= 1

    def _live_classes(self) -> int:
        return int(np.count_nonzero(self._c.count[: self._n_classes]))

    def _compact_slots(self) -> None:
        """Renumber live transfers into slots 0..n-1 (finished slots are never reused otherwise)."""
        live = [t for t in self._slots if t is not None]
        old = np.array([t.slot for t in live], dtype=np.int64)
        t, n = self._t, len(live)
        remaining, nbytes, cls = t.remaining[old], t.nbytes[old], t.cls[old]
        t.active[:] = False
        t.remaining[:n], t.nbytes[:n], t.cls[:n], t.active[:n] = remaining, nbytes, cls, True
        for i, transfer in enumerate(live):
            transfer.slot = i
        self._slots = live

    def _compact_classes(self) -> None:
        """Forget classes with no active transfer and renumber the rest."""
        c, e = self._c, self._e
        self._folded_bytes = self.link_bytes  # forgotten classes keep their bytes on their links
        keep = np.flatnonzero(c.count[: self._n_classes] > 0)
        new_of_old = np.full(self._n_classes, -1, dtype=np.int64)
        new_of_old[keep] = np.arange(len(keep))
        entries = np.flatnonzero(new_of_old[e.cls[: self._n_entries]] >= 0)
        links, classes, mult = e.link[entries], new_of_old[e.cls[entries]], e.mult[entries]
        self._n_entries = len(entries)
        e.link[: self._n_entries], e.cls[: self._n_entries], e.mult[: self._n_entries] = links, classes, mult
        count, rated, rate, cap = c.count[keep], c.rated[keep], c.rate[keep], c.cap[keep]
        self._n_classes = nk = len(keep)
        c.count[:nk], c.rated[:nk], c.rate[:nk], c.cap[:nk] = count, rated, rate, cap
        c.count[nk:], c.rated[nk:] = 0.0, 0.0
        c.carried[:] = 0.0  # kept classes' bytes so far are in _folded_bytes now
        self._class_of = {k: int(new_of_old[v]) for k, v in self._class_of.items() if new_of_old[v] >= 0}
        self._class_by_paths.clear()
        n = len(self._slots)
        self._t.cls[:n] = np.where(self._t.active[:n], new_of_old[self._t.cls[:n]], 0)

    # ----------------------------------------------------------------------------- dynamics
    def _advance(self, active: np.ndarray | None = None) -> None:
        """Move every active transfer (slots `active`, if known) forward to now at its current rate."""
        now = self.env.now
        dt = now - self._last_update
        self._last_update = now
        if dt <= 0 or not self._n_active:
            return
        t, c, nc = self._t, self._c, self._n_classes
        if active is None:
            active = np.flatnonzero(t.active[: len(self._slots)])
        t.remaining[active] -= c.rate[t.cls[active]] * dt
        c.carried[:nc] += c.rated[:nc] * c.rate[:nc] * dt

    def _schedule_recompute(self) -> None:
        if not self._recompute_pending:
            self._recompute_pending = True
            self.env.timeout(0).callbacks.append(self._recompute)

    def _recompute(self, _event: object = None) -> None:
        self._recompute_pending = False
        t, c = self._t, self._c
        active = np.flatnonzero(t.active[: len(self._slots)])
        self._advance(active)
        active = self._finish_due(active)
        nc = self._n_classes
        c.rated[:nc] = c.count[:nc]  # the rates below are for exactly these transfers
        self._version += 1
        if not len(active):
            return
        self.recomputes += 1
        e, ne = self._e, self._n_entries
        # a class stands for its `count` identical transfers; classes with none are idle (rate 0)
        self._solved_entries += ne
        compiled = self.recomputes > COMPILE_AFTER or self._solved_entries > COMPILE_AFTER_ENTRIES
        c.rate[:nc] = max_min_rates(
            e.link[:ne], e.cls[:ne], e.mult[:ne], self.capacity, nc, c.cap[:nc], c.count[:nc], compiled
        )
        eta = float((t.remaining[active] / c.rate[t.cls[active]]).min())
        if eta == np.inf:  # only open flows are active: nothing will finish by itself
            return
        version = self._version
        self.env.timeout(max(eta, 0.0)).callbacks.append(lambda _ev: self._on_timer(version))

    def _on_timer(self, version: int) -> None:
        if version == self._version:  # otherwise a later recompute superseded this timer
            self._recompute()

    def _finish_due(self, active: np.ndarray) -> np.ndarray:
        """Deliver the active transfers whose bytes are through; return the slots still active."""
        if not len(active):
            return active
        t = self._t
        tol_s = max(FINISH_TOL_S, 8 * float(np.spacing(self.env.now)))
        remaining, rate = t.remaining[active], self._c.rate[t.cls[active]]
        near = (remaining <= rate * tol_s) | (remaining <= t.nbytes[active] * FINISH_TOL_REL)
        due = near & np.isfinite(remaining)  # open flows never finish by themselves
        if not due.any():
            return active
        for slot in active[due]:
            transfer = self._slots[slot]
            assert transfer is not None  # an active slot always holds its transfer
            self._release(slot)
            self._deliver(transfer.done, transfer.latency)
        return active[~due]

    def _release(self, slot: int) -> None:
        t = self._t
        self._slots[slot] = None
        t.active[slot] = False
        t.remaining[slot] = 0.0
        self._c.count[t.cls[slot]] -= 1
        self._n_active -= 1
