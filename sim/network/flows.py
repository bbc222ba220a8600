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

A link may also limit each flow crossing it (`flow_cap`: a WAN link's connections * window / RTT, as
TCP's window bounds a connection): a transfer's cap is the lowest of its own and those of every link on
its paths, so the solvers see an ordinary per-transfer cap. Capacities may change mid-run
(`set_capacity`: faults, WAN bandwidth traces in `sim.network.traces`); the rates are re-solved then.

A recompute advances the transfers, finishes those that are through, re-solves and sets the next
timer. Past the first few thousand it runs as one compiled call (`sim.network.flows_jit`) over the live
classes only, keeping the first round's link loads between calls; before that (and without numba)
the numpy code below does the same arithmetic, which is the reference.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional

import numpy as np
import simpy
from simpy.core import NORMAL
from simpy.events import Event

from sim.kernel.environment import Wake, queue_call
from sim.network.compiled import flows_kernels
from sim.network.maxmin import SATURATION_TOL, max_min_rates, max_min_rates_numpy

# The network recomputes with numpy until this many recomputes, then with the compiled kernel: a short
# run never pays the kernel's one-off load (about 0.5 s per process), a long one gains several times
# over. Both give bitwise-identical results, so where the switch falls changes none. Large solves (an
# all-to-all's thousands of flows) switch sooner: after this many incidence entries solved in all.
COMPILE_AFTER = 2_000
COMPILE_AFTER_ENTRIES = 2_000_000

# Transfers whose remaining bytes would take under this long (or are under this fraction of their
# size) finish in the same event; floating-point residue must never schedule a zero-length timer.
CLASS_TUPLE_LIMIT = 50_000  # tuples of paths whose class is remembered by identity

FINISH_TOL_S = 1e-12
FINISH_TOL_REL = 1e-9

# A slot's state (sim.network.flows_jit numbers them the same): FRESH transfers started since the network
# last advanced, so the advance that catches up with their start must not move them.
FREE, RUNNING, FRESH = 0, 1, 2


@dataclass(eq=False)
class Transfer:
    """Bookkeeping for one active transfer (one or more equal-rate sub-flows)."""

    slot: int
    nbytes: float
    latency: float
    done: simpy.Event


class _Columns:
    """Named columns of one dtype, stored as the rows of one 2-D array (a single argument for the
    compiled kernel, which numbers the rows in the order given here); doubles in length when full."""

    def __init__(self, length: int, dtype: Any, **fill: float) -> None:
        self._names = tuple(fill)
        self._fill = np.array([fill[name] for name in self._names], dtype=dtype)[:, None]
        self.data = np.empty((len(self._names), length), dtype=dtype)
        self.data[:] = self._fill
        self._bind()

    @property
    def size(self) -> int:
        return self.data.shape[1]

    def _bind(self) -> None:
        for i, name in enumerate(self._names):
            setattr(self, name, self.data[i])

    def ensure(self, n: int) -> None:
        if n <= self.size:
            return
        grown = np.empty((len(self._names), max(2 * self.size, n)), dtype=self.data.dtype)
        grown[:] = self._fill
        grown[:, : self.size] = self.data
        self.data = grown
        self._bind()


class Network:
    """Directed links with `capacity` (bytes/s) and `latency` (s), indexed by link id; `flow_cap`
    (bytes/s, inf for none): the most one flow crossing the link may move, or None where no link limits."""

    def __init__(
        self,
        env: simpy.Environment,
        capacity: np.ndarray,
        latency: np.ndarray,
        flow_cap: Optional[np.ndarray] = None,
    ) -> None:
        if np.any(np.asarray(capacity) <= 0):
            raise ValueError("every link needs a positive capacity")
        self.env = env
        self.capacity = np.asarray(capacity, dtype=float)
        self.latency = np.asarray(latency, dtype=float)
        n_links = len(self.capacity)
        if flow_cap is not None:
            flow_cap = np.asarray(flow_cap, dtype=float)
            if flow_cap.shape != (n_links,) or not np.all(flow_cap > 0):
                raise ValueError("flow_cap: one value > 0 per link (inf for no limit)")
        self.flow_cap = flow_cap
        self._folded_bytes = np.zeros(n_links)  # bytes of classes since forgotten, per link
        self.recomputes = 0
        self._solved_entries = 0
        self._compiled = False  # recomputes run compiled from now on
        self._may_compile = True  # until the kernels fail to load
        self._kernels: Optional[ModuleType] = None  # sim.network.flows_jit, once compiled
        self.transfers_started = 0
        # transfers, by slot (due: the compiled recompute lists the slots it finished there)
        self._slots: list[Optional[Transfer]] = []
        self._tf = _Columns(64, float, remaining=0.0, nbytes=0.0)
        self._ti = _Columns(64, np.int64, cls=0, state=FREE, due=0)
        self._n_active = 0
        self._n_fresh = 0  # of them, FRESH
        self._n_open = 0  # of them, open flows (background traffic, which never ends)
        self._n_delivering = 0  # transfers whose bytes are through, waiting out their latency
        self.latency_version = 0  # bumped whenever a link's latency changes
        # classes of identical transfers, and their link incidence (link, class, multiplicity)
        self._class_of: dict[tuple, int] = {}
        # count: active transfers per class; rated: how many of them the current rates were computed
        # for (a transfer that joins a class has no rate until the recompute at the same instant)
        # carried: bytes moved so far per sub-flow, summed over the class's transfers (per-link byte
        # counts are derived from it on demand, so advancing time costs O(classes), not O(links));
        # first, n: the class's incidence entries (contiguous); the rest, the compiled solver's
        self._cf = _Columns(16, float, count=0.0, rated=0.0, rate=0.0, cap=np.inf, carried=0.0, soonest=0.0)
        self._ci = _Columns(16, np.int64, first=0, n=0, hint=0, unfrozen=0, frozen=0)
        self._n_classes = 0
        self._ef = _Columns(64, float, mult=0.0)
        self._ei = _Columns(64, np.int64, link=0, cls=0)
        self._n_entries = 0
        # for the compiled recompute: per link the rated classes' load, a round's load and residual
        # capacity; its place in the list of loaded links (or -1), whether a round saturated it, the list
        self._lf = np.zeros((3, n_links))
        self._li = np.zeros((3, n_links), dtype=np.int64)
        self._li[0] = -1
        self._n_loaded = 0
        self._rebuild = True  # the kept loads are stale (after numpy recomputes or compaction)
        self._arrays: Optional[tuple[np.ndarray, ...]] = None  # the kernel's arrays, until one grows
        self._path_latency: dict[tuple[int, ...], float] = {}
        self._class_by_paths: dict[tuple, int] = {}  # (paths, cap) -> class, until classes are renumbered
        self._class_by_tuple: dict[int, tuple[tuple, float, int]] = {}  # id -> (paths, cap, class), likewise
        self._last_update = 0.0
        self._timer: Optional[Wake] = None  # the completion timer of the latest recompute
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
            done = Event(self.env)
        lat = max((self.path_latency(p) for p in paths), default=0.0) if latency is None else latency
        self.transfers_started += 1
        # a worker's transfers reuse the same paths all run long: their class is remembered per path set,
        # and per tuple of paths for callers that keep theirs (cached routes and rings)
        created = False
        known = self._class_by_tuple.get(id(paths)) if type(paths) is tuple else None
        if known is not None and known[0] is paths and known[1] == cap:
            cls = known[2]
        else:
            key = (tuple(map(tuple, paths)), cap)
            cls = self._class_by_paths.get(key)
            if cls is None:
                links = [link for path in paths for link in path]
                if nbytes == 0 or not links:
                    self._deliver(done, lat)
                    return done
                cls = self._class_by_paths[key] = self._class(links, cap)  # counts this transfer
                created = True
            if type(paths) is tuple:
                if len(self._class_by_tuple) >= CLASS_TUPLE_LIMIT:
                    self._class_by_tuple.clear()
                self._class_by_tuple[id(paths)] = (paths, cap, cls)  # kept alive here: the id stays unique
        if not created:
            if nbytes == 0:
                self._deliver(done, lat)
                return done
            self._cf.count[cls] += 1
        # no advance here: the transfer starts FRESH, and the recompute at this instant catches up
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
        n = self._n_entries
        weights = self._ef.mult[:n] * self._cf.carried[self._ei.cls[:n]]
        return self._folded_bytes + np.bincount(self._ei.link[:n], weights=weights, minlength=len(self.capacity))

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
        c, n, cls = self._cf, self._n_entries, self._ei.cls[: self._n_entries]
        weights = self._ef.mult[:n] * c.rated[cls] * c.rate[cls]
        return np.bincount(self._ei.link[:n], weights=weights, minlength=len(self.capacity))

    # ----------------------------------------------------------------------------- transfers
    def _class(self, links: list[int], cap: float) -> int:
        ids, counts = np.unique(np.asarray(links, dtype=np.int64), return_counts=True)
        key = (ids.tobytes(), counts.tobytes(), cap)
        cls = self._class_of.get(key)
        if cls is None:
            if self._n_classes == self._cf.size and self._live_classes() * 2 <= self._n_classes:
                self._advance()  # bytes so far are folded by class: bring them up to now first
                self._compact_classes()
            if self.flow_cap is not None:  # the links' own per-flow limits (WAN windows) join the cap
                cap = min(cap, float(self.flow_cap[ids].min()))
            cls = self._class_of[key] = self._n_classes
            self._n_classes += 1
            self._cf.ensure(self._n_classes)
            self._ci.ensure(self._n_classes)
            self._cf.data[:, cls] = (0.0, 0.0, 0.0, cap, 0.0, 0.0)
            n, m = self._n_entries, len(ids)
            self._ci.first[cls], self._ci.n[cls], self._ci.hint[cls] = n, m, 0
            self._ef.ensure(n + m)
            self._ei.ensure(n + m)
            self._arrays = None
            self._ei.link[n : n + m], self._ei.cls[n : n + m], self._ef.mult[n : n + m] = ids, cls, counts
            self._n_entries = n + m
        self._cf.count[cls] += 1
        return cls

    def _new_slot(self, nbytes: float, cls: int) -> int:
        slot = len(self._slots)
        if slot == self._tf.size:
            if self._n_active * 2 <= slot:
                self._compact_slots()
                slot = len(self._slots)
            self._tf.ensure(slot + 1)
            self._ti.ensure(slot + 1)
            self._arrays = None
        self._slots.append(None)
        self._tf.remaining[slot] = self._tf.nbytes[slot] = nbytes
        self._ti.cls[slot], self._ti.state[slot] = cls, FRESH
        self._n_active += 1
        self._n_fresh += 1
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
        return int(np.count_nonzero(self._cf.count[: self._n_classes]))

    def _compact_slots(self) -> None:
        """Renumber live transfers into slots 0..n-1 (finished slots are never reused otherwise)."""
        live = [t for t in self._slots if t is not None]
        old = np.array([t.slot for t in live], dtype=np.int64)
        tf, ti, n = self._tf, self._ti, len(live)
        floats, ints = tf.data[:, old], ti.data[:, old]
        ti.state[:] = FREE
        tf.data[:, :n], ti.data[:, :n] = floats, ints
        for i, transfer in enumerate(live):
            transfer.slot = i
        self._slots = live

    def _compact_classes(self) -> None:
        """Forget classes with no active transfer and renumber the rest."""
        c, ne = self._cf, self._n_entries
        self._folded_bytes = self.link_bytes  # forgotten classes keep their bytes on their links
        keep = np.flatnonzero(c.count[: self._n_classes] > 0)
        new_of_old = np.full(self._n_classes, -1, dtype=np.int64)
        new_of_old[keep] = np.arange(len(keep))
        entries = np.flatnonzero(new_of_old[self._ei.cls[:ne]] >= 0)
        links, classes, mult = self._ei.link[entries], new_of_old[self._ei.cls[entries]], self._ef.mult[entries]
        self._n_entries = ne = len(entries)
        self._ei.link[:ne], self._ei.cls[:ne], self._ef.mult[:ne] = links, classes, mult
        floats, ints = c.data[:, keep], self._ci.data[:, keep]
        self._n_classes = nk = len(keep)
        c.data[:, :nk], self._ci.data[:, :nk] = floats, ints
        c.count[nk:], c.rated[nk:] = 0.0, 0.0
        c.carried[:] = 0.0  # kept classes' bytes so far are in _folded_bytes now
        self._ci.first[:nk] = np.cumsum(self._ci.n[:nk]) - self._ci.n[:nk]  # entries stay in class order
        self._class_of = {k: int(new_of_old[v]) for k, v in self._class_of.items() if new_of_old[v] >= 0}
        self._class_by_paths.clear()
        self._class_by_tuple.clear()
        n = len(self._slots)
        self._ti.cls[:n] = np.where(self._ti.state[:n] != FREE, new_of_old[self._ti.cls[:n]], 0)
        self._rebuild = True

    # ----------------------------------------------------------------------------- dynamics
    def _advance(self) -> None:
        """Move every running transfer forward to now at its current rate."""
        now = self.env.now
        dt = now - self._last_update
        self._last_update = now
        if dt <= 0 or self._n_active == self._n_fresh:
            return
        tf, ti, c, n, nc = self._tf, self._ti, self._cf, len(self._slots), self._n_classes
        if self._compiled:
            self._kernels.advance(dt, n, nc, tf.data, ti.data, c.data)
            return
        running = np.flatnonzero(ti.state[:n] == RUNNING)
        tf.remaining[running] -= c.rate[ti.cls[running]] * dt
        c.carried[:nc] += c.rated[:nc] * c.rate[:nc] * dt

    def _schedule_recompute(self) -> None:
        if not self._recompute_pending:
            self._recompute_pending = True
            queue_call(self.env, 0.0, self._recompute)  # as a Timeout(0), with no Event: two per transfer

    def _recompute(self, _event: object = None) -> None:
        self._recompute_pending = False
        now = self.env.now
        tol_s = max(FINISH_TOL_S, 8 * math.ulp(now))
        ne = self._n_entries
        if self._may_compile and not self._compiled:
            if self.recomputes >= COMPILE_AFTER or self._solved_entries + ne > COMPILE_AFTER_ENTRIES:
                self._kernels = flows_kernels()
                self._compiled = self._may_compile = self._kernels is not None
        if self._compiled:
            eta, due, left = self._step_compiled(now, tol_s)
        else:
            eta, due, left = self._step_numpy(now, tol_s)
        slots = self._slots
        for slot in due:  # in slot order
            transfer = slots[slot]
            assert transfer is not None  # an active slot always holds its transfer
            slots[slot] = None
            self._deliver(transfer.done, transfer.latency)
        self._n_active = left
        self._n_fresh = 0
        self._timer = None  # an earlier timer is stale now
        if not left:
            return
        self.recomputes += 1
        self._solved_entries += ne
        if eta == np.inf:  # only open flows are active: nothing will finish by itself
            return
        self._timer = queue_call(self.env, max(eta, 0.0), self._on_timer)

    def _step_compiled(self, now: float, tol_s: float) -> tuple[float, list[int], int]:
        """The recompute's arithmetic in one compiled call: returns (time to the next finish, slots
        finished, transfers left)."""
        dt, self._last_update = now - self._last_update, now
        if self._arrays is None:
            self._arrays = (
                self._tf.data,
                self._ti.data,
                self._cf.data,
                self._ci.data,
                self._ei.data,
                self._ef.mult,
                self.capacity,
                self._lf,
                self._li,
            )
        eta, n_due, left, self._n_loaded, solved = self._kernels.recompute(
            dt,
            tol_s,
            FINISH_TOL_REL,
            SATURATION_TOL,
            len(self._slots),
            self._n_active - self._n_fresh,
            self._n_classes,
            self._rebuild,
            self._n_loaded,
            *self._arrays,
        )
        self._rebuild = False
        due = self._ti.due[:n_due].tolist() if n_due else []
        if not solved:  # many bottleneck levels: sim.network.maxmin's compiled solver indexes links for those
            eta = self._solve_with(True)
        return eta, due, left

    def _step_numpy(self, now: float, tol_s: float) -> tuple[float, list[int], int]:
        """`_step_compiled` in numpy (the reference)."""
        tf, ti, c = self._tf, self._ti, self._cf
        self._advance()
        active = np.flatnonzero(ti.state[: len(self._slots)])
        ti.state[active] = RUNNING
        remaining, rate = tf.remaining[active], c.rate[ti.cls[active]]
        near = (remaining <= rate * tol_s) | (remaining <= tf.nbytes[active] * FINISH_TOL_REL)
        due = near & np.isfinite(remaining)  # open flows never finish by themselves
        finished = active[due].tolist()
        for slot in finished:
            ti.state[slot] = FREE
            tf.remaining[slot] = 0.0
            c.count[ti.cls[slot]] -= 1
        active = active[~due]
        nc = self._n_classes
        c.rated[:nc] = c.count[:nc]  # the rates below are for exactly these transfers
        self._rebuild = True
        if not len(active):
            return np.inf, finished, 0
        return self._solve_with(False), finished, len(active)

    def _solve_with(self, compiled: bool) -> float:
        """Rates of every class from scratch (with sim.network.maxmin); returns the time to the next finish."""
        e, c, ti, nc, ne = self._ei, self._cf, self._ti, self._n_classes, self._n_entries
        # a class stands for its `count` identical transfers; classes with none are idle (rate 0)
        c.rate[:nc] = (max_min_rates if compiled else max_min_rates_numpy)(
            e.link[:ne], e.cls[:ne], self._ef.mult[:ne], self.capacity, nc, c.cap[:nc], c.count[:nc]
        )
        active = np.flatnonzero(ti.state[: len(self._slots)])
        return float((self._tf.remaining[active] / c.rate[ti.cls[active]]).min())

    def _on_timer(self, timer: Wake) -> None:
        if timer is self._timer:  # otherwise a later recompute superseded it
            self._recompute()

    def _release(self, slot: int) -> None:
        tf, ti = self._tf, self._ti
        if ti.state[slot] == FRESH:
            self._n_fresh -= 1
        self._slots[slot] = None
        ti.state[slot] = FREE
        tf.remaining[slot] = 0.0
        self._cf.count[ti.cls[slot]] -= 1
        self._n_active -= 1
