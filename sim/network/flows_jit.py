"""One network recompute, compiled: advance, finish what is through, re-solve max-min, next finish time.

`Network` spends most of a busy run in recomputes (one per transfer start and finish). Each used to
make a dozen numpy calls on arrays of a few hundred elements and to solve over the whole incidence,
idle classes and unloaded links included. Here one call does the lot, over live classes only:

* The first round's link loads are kept between recomputes: `BASE` holds, per link, the sum of
  multiplicity x transfer count over the classes as the current rates counted them (`RATED`), and
  moves only where a class's count changed. Loads are whole numbers, so adding and removing them in
  any order gives exactly the sums a fresh pass would: the rates are the same to the bit.
* Links with a load sit in a list (`LOADED`, each link's index in it at `PLACE`), so a round scans
  those, not every link; ties between equal shares go to the lowest link id, as a scan's would.
* A round checks only the unfrozen classes, the entry that stopped a class last time first; frozen
  classes give their load back, except after the last round.

The arithmetic is that of `sim.network.flows`'s numpy path (the reference) and of `sim.network.maxmin_jit`'s
kernel, operation for operation, so where a run switches from one to the other changes no result
(tests compare every solve and whole runs). Class c owns the contiguous entries FIRST[c] to
FIRST[c] + N[c].
"""

from __future__ import annotations

import numpy as np
from numba import njit

# A solve still going after this many rounds has many bottleneck levels (an all-to-all's): the caller
# finishes it with sim.network.maxmin_jit's kernel, which indexes links for such solves. (Calling that kernel
# from here would tie this file's numba cache to another file's source, which numba does not track.)
SCAN_ROUNDS = 8

# Rows of the blocks `sim.network.flows` keeps (it names them in the same order).
REMAINING, NBYTES = 0, 1  # slot floats
CLS, STATE, DUE = 0, 1, 2  # slot ints: class; 0 free / RUNNING / FRESH; out: the slots finished
RUNNING, FRESH = 1, 2  # FRESH: started since the last advance, which must not move it
COUNT, RATED, RATE, CAP, CARRIED, SOONEST = 0, 1, 2, 3, 4, 5  # class floats (SOONEST: work)
FIRST, N, HINT, UNFROZEN, FROZEN = 0, 1, 2, 3, 4  # class ints; HINT: the entry (from FIRST) that froze
# it last time, checked first; UNFROZEN, FROZEN: work lists of a solve
LINK = 0  # entry ints (the entry's class is row 1, unused here)
BASE, LOAD, RESIDUAL = 0, 1, 2  # link floats
PLACE, SATURATED, LOADED = 0, 1, 2  # link ints: index in the LOADED list (or -1); saturated this round


@njit(cache=True, nogil=True)
def advance(dt: float, n_slots: int, nc: int, tf: np.ndarray, ti: np.ndarray, cf: np.ndarray) -> None:
    """Move running transfers on by `dt` at their class's rate, and count the bytes per class."""
    for s in range(n_slots):
        if ti[STATE, s] == RUNNING:
            tf[REMAINING, s] -= cf[RATE, ti[CLS, s]] * dt
    for c in range(nc):
        cf[CARRIED, c] += cf[RATED, c] * cf[RATE, c] * dt


@njit(cache=True, nogil=True, error_model="numpy")
def recompute(
    dt: float,
    tol_s: float,
    tol_rel: float,
    tol: float,
    n_slots: int,
    n_running: int,
    nc: int,
    rebuild: bool,
    n_loaded: int,
    tf: np.ndarray,
    ti: np.ndarray,
    cf: np.ndarray,
    ci: np.ndarray,
    ei: np.ndarray,
    mult: np.ndarray,
    capacity: np.ndarray,
    lf: np.ndarray,
    li: np.ndarray,
) -> tuple[float, int, int, int, bool]:
    """Advance by `dt` (if any transfer ran), finish the transfers within `tol_s` of their end or
    `tol_rel` of their size (their slots go to `ti[DUE]`, in slot order), and, if any remain,
    re-solve the rates. `rebuild`: recount the kept loads from scratch. Returns (time to the next
    finish, number finished, transfers left, links loaded, solved); not solved: the solve needs
    more than SCAN_ROUNDS rounds, and the rates and the time to the next finish are left to the caller."""
    moving = dt > 0 and n_running > 0
    for c in range(nc):
        if moving:
            cf[CARRIED, c] += cf[RATED, c] * cf[RATE, c] * dt
        cf[SOONEST, c] = np.inf
    n_due, n_left, odd = 0, 0, False
    for s in range(n_slots):  # advance (as `advance` does) and finish, in one pass
        state = ti[STATE, s]
        if state == 0:
            continue
        c = ti[CLS, s]
        if moving and state == RUNNING:
            tf[REMAINING, s] -= cf[RATE, c] * dt
        rem = tf[REMAINING, s]
        near = rem <= cf[RATE, c] * tol_s or rem <= tf[NBYTES, s] * tol_rel
        if near and np.isfinite(rem):  # open flows never finish by themselves
            ti[DUE, n_due] = s
            n_due += 1
            ti[STATE, s] = 0
            tf[REMAINING, s] = 0.0
            cf[COUNT, c] -= 1.0
        else:
            ti[STATE, s] = RUNNING
            n_left += 1
            odd = odd or rem != rem
            cf[SOONEST, c] = min(cf[SOONEST, c], rem)
    n_loaded = _rate_these_counts(nc, rebuild, n_loaded, cf, ci, ei, mult, lf, li)
    if n_left == 0:
        return np.inf, n_due, 0, n_loaded, True
    if not _solve(tol, nc, n_loaded, cf, ci, ei, mult, capacity, lf, li):
        return np.nan, n_due, n_left, n_loaded, False
    # The next finish: rates are per class and dividing by a rate >= 0 keeps order, so the smallest
    # remaining per class gives the same minimum as every transfer's (NaN aside: then per transfer).
    eta = np.inf
    for c in range(nc):
        if cf[COUNT, c] > 0.0:
            odd = odd or not np.isfinite(cf[RATE, c])
            eta = min(eta, cf[SOONEST, c] / cf[RATE, c])
    if odd:
        eta = _soonest_by_slot(n_slots, tf, ti, cf)
    return eta, n_due, n_left, n_loaded, True


@njit(cache=True, nogil=True, error_model="numpy")
def _soonest_by_slot(n_slots: int, tf: np.ndarray, ti: np.ndarray, cf: np.ndarray) -> float:
    """The time to the next finish as numpy's min over every transfer gives it (NaN included)."""
    eta = np.inf
    for s in range(n_slots):
        if ti[STATE, s] != 0:
            x = tf[REMAINING, s] / cf[RATE, ti[CLS, s]]
            if x != x:
                return x
            eta = min(eta, x)
    return eta


@njit(cache=True, nogil=True)
def _rate_these_counts(
    nc: int,
    rebuild: bool,
    n_loaded: int,
    cf: np.ndarray,
    ci: np.ndarray,
    ei: np.ndarray,
    mult: np.ndarray,
    lf: np.ndarray,
    li: np.ndarray,
) -> int:
    """Set `rated` to the current counts and move the kept loads (and the loaded list) with them."""
    if rebuild:
        for i in range(n_loaded):
            lf[BASE, li[LOADED, i]] = 0.0
            li[PLACE, li[LOADED, i]] = -1
        n_loaded = 0
    for c in range(nc):
        step = cf[COUNT, c] if rebuild else cf[COUNT, c] - cf[RATED, c]
        cf[RATED, c] = cf[COUNT, c]
        if step == 0.0:
            continue
        for e in range(ci[FIRST, c], ci[FIRST, c] + ci[N, c]):
            lk = ei[LINK, e]
            before = lf[BASE, lk]
            after = before + mult[e] * step
            lf[BASE, lk] = after
            if before == 0.0 and after != 0.0:
                li[PLACE, lk] = n_loaded
                li[LOADED, n_loaded] = lk
                n_loaded += 1
            elif after == 0.0 and before != 0.0:  # swap the last loaded link into its place
                n_loaded -= 1
                moved = li[LOADED, n_loaded]
                li[LOADED, li[PLACE, lk]] = moved
                li[PLACE, moved] = li[PLACE, lk]
                li[PLACE, lk] = -1
    return n_loaded


@njit(cache=True, nogil=True)
def _solve(
    tol: float,
    nc: int,
    n_loaded: int,
    cf: np.ndarray,
    ci: np.ndarray,
    ei: np.ndarray,
    mult: np.ndarray,
    capacity: np.ndarray,
    lf: np.ndarray,
    li: np.ndarray,
) -> bool:
    """Progressive filling over the classes with transfers (weighted by their count); idle classes
    get rate 0, classes on no link their cap. Writes `cf[RATE]`; False if it gave up after
    SCAN_ROUNDS rounds."""
    n_unfrozen = 0
    capped = False
    for c in range(nc):
        if cf[COUNT, c] == 0.0:
            cf[RATE, c] = 0.0
        elif ci[N, c] == 0:
            cf[RATE, c] = cf[CAP, c]
        else:
            ci[UNFROZEN, n_unfrozen] = c
            n_unfrozen += 1
            capped = capped or np.isfinite(cf[CAP, c])
    loaded = li[LOADED]
    for i in range(n_loaded):
        lk = loaded[i]
        lf[LOAD, lk] = lf[BASE, lk]
        lf[RESIDUAL, lk] = capacity[lk]
    level, rounds = 0.0, 0
    while n_unfrozen > 0:
        if rounds == SCAN_ROUNDS:
            return False
        rounds += 1
        delta, k = np.inf, -1
        for i in range(n_loaded):
            lk = loaded[i]
            if lf[LOAD, lk] > 0.0:
                share = lf[RESIDUAL, lk] / lf[LOAD, lk]
                if share < delta or (share == delta and lk < k):  # ties: the lowest link, as a scan finds
                    delta, k = share, lk
        at_cap = False
        if capped:
            for i in range(n_unfrozen):
                headroom = cf[CAP, ci[UNFROZEN, i]] - level
                if headroom < delta:
                    delta, at_cap = headroom, True
        delta = max(delta, 0.0)
        if k < 0 and not at_cap:  # what is left crosses no loaded link: only its cap limits it
            for i in range(n_unfrozen):
                cf[RATE, ci[UNFROZEN, i]] = cf[CAP, ci[UNFROZEN, i]]
            return True
        level += delta
        for i in range(n_loaded):
            lk = loaded[i]
            li[SATURATED, lk] = 0
            if lf[LOAD, lk] > 0.0:
                lf[RESIDUAL, lk] -= delta * lf[LOAD, lk]
                if lf[RESIDUAL, lk] <= tol * capacity[lk]:
                    li[SATURATED, lk] = 1
        if not at_cap and k >= 0:  # the argmin link saturates by construction: guard against rounding
            li[SATURATED, k] = 1
            lf[RESIDUAL, k] = 0.0
        kept, n_frozen = 0, 0
        for i in range(n_unfrozen):  # (inline: a call per class costs as much as the check)
            c = ci[UNFROZEN, i]
            first = ci[FIRST, c]
            # at its cap, or on a link saturated now; the link that stopped it last time first
            freeze = capped and level >= cf[CAP, c] * (1.0 - tol)
            freeze = freeze or li[SATURATED, ei[LINK, first + ci[HINT, c]]] != 0
            j = 0
            while not freeze and j < ci[N, c]:
                if li[SATURATED, ei[LINK, first + j]] != 0:
                    freeze = True
                    ci[HINT, c] = j
                j += 1
            if freeze:
                cf[RATE, c] = level
                ci[FROZEN, n_frozen] = c
                n_frozen += 1
            else:
                ci[UNFROZEN, kept] = c
                kept += 1
        n_unfrozen = kept
        if n_unfrozen > 0:  # the frozen give their load back (needless after the last round)
            if n_frozen <= n_unfrozen:
                for i in range(n_frozen):
                    c = ci[FROZEN, i]
                    for e in range(ci[FIRST, c], ci[FIRST, c] + ci[N, c]):
                        lf[LOAD, ei[LINK, e]] -= mult[e] * cf[COUNT, c]
            else:  # fewer left than frozen: count the loads of those left afresh (whole numbers: the same sums)
                for i in range(n_loaded):
                    lf[LOAD, loaded[i]] = 0.0
                for i in range(n_unfrozen):
                    c = ci[UNFROZEN, i]
                    for e in range(ci[FIRST, c], ci[FIRST, c] + ci[N, c]):
                        lf[LOAD, ei[LINK, e]] += mult[e] * cf[COUNT, c]
    return True
