"""The progressive-filling loop of `sim.network.maxmin`, compiled with numba.

The solver runs once per transfer start or finish on a few thousand incidence entries, where numpy's
per-call overhead (a dozen calls per round, each a few microseconds) dominates the arithmetic. This is
the same algorithm as `sim.network.maxmin.max_min_rates_numpy`, entry by entry, so the two agree to rounding
(tests compare them); numba only removes the interpreter from the loop.

A round first rescans every incidence entry, which is cheapest when a solve has a few bottleneck
levels, as most do. A solve still running after `SCAN_ROUNDS` rounds (an all-to-all's thousands of
transfers of unequal sizes, with as many levels) builds link and transfer indexes and continues
incrementally: loads lose the weights of each round's newly frozen transfers, and saturated links
find their transfers through the index, so a round costs O(links + entries it freezes). Weights are
whole numbers (multiplicities times transfer counts), so both ways sum them exactly: the rates are
the same whichever way a solve ends.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SCAN_ROUNDS = 8


@njit(cache=True, nogil=True)
def progressive_filling(
    links: np.ndarray,
    transfers: np.ndarray,
    mult: np.ndarray,
    scale: np.ndarray,
    capacity: np.ndarray,
    ceiling: np.ndarray,
    tol: float,
) -> np.ndarray:
    """Per-sub-flow rates; arguments as `sim.network.maxmin.max_min_rates` (scale 0 = idle transfer)."""
    n_links, n_entries, n_transfers = capacity.size, links.size, scale.size
    rates = np.zeros(n_transfers)
    frozen = np.ones(n_transfers, dtype=np.bool_)  # until it is seen on a link
    for e in range(n_entries):
        frozen[transfers[e]] = False
    for t in range(n_transfers):
        if scale[t] == 0.0:
            frozen[t] = True  # idle: rate 0
        elif frozen[t]:
            rates[t] = ceiling[t]  # on no link: only its cap limits it
    capped = False
    for t in range(n_transfers):
        if not frozen[t] and np.isfinite(ceiling[t]):
            capped = True
    residual = capacity.copy()
    weights = np.empty(n_entries)
    for e in range(n_entries):
        t = transfers[e]
        weights[e] = 0.0 if frozen[t] else mult[e] * scale[t]
    unfrozen = 0
    for t in range(n_transfers):
        if not frozen[t]:
            unfrozen += 1
    load = np.empty(n_links)
    saturated = np.empty(n_links, dtype=np.bool_)
    newly = np.empty(n_transfers, dtype=np.bool_)
    rounds, level = 0, 0.0
    while unfrozen > 0:
        if rounds == SCAN_ROUNDS:
            _continue_incrementally(links, transfers, weights, frozen, rates, residual, capacity, ceiling, capped, tol)
            break
        rounds += 1
        load[:] = 0.0
        for e in range(n_entries):
            load[links[e]] += weights[e]
        delta, k, at_cap = _smallest_step(load, residual, ceiling, frozen, level, capped)
        if k < 0 and not at_cap:  # what is left crosses no loaded link: only its cap limits it
            _rise_to_caps(rates, frozen, ceiling)
            break
        level += delta
        for t in range(n_transfers):
            if not frozen[t]:
                rates[t] += delta  # the same sum as `level`
        _saturate(load, residual, capacity, delta, k, at_cap, tol, saturated)
        newly[:] = False
        for e in range(n_entries):
            if saturated[links[e]]:
                newly[transfers[e]] = True
        if capped:
            for t in range(n_transfers):
                if rates[t] >= ceiling[t] * (1.0 - tol):
                    newly[t] = True
        for t in range(n_transfers):
            if newly[t] and not frozen[t]:
                frozen[t] = True
                unfrozen -= 1
        for e in range(n_entries):
            if newly[transfers[e]]:
                weights[e] = 0.0
    return rates


@njit(cache=True, nogil=True)
def _continue_incrementally(
    links: np.ndarray,
    transfers: np.ndarray,
    weights: np.ndarray,
    frozen: np.ndarray,
    rates: np.ndarray,
    residual: np.ndarray,
    capacity: np.ndarray,
    ceiling: np.ndarray,
    capped: bool,
    tol: float,
) -> None:
    """Finish a solve from its state after some rounds (`rates` of unfrozen transfers: the common
    level so far); fills `rates` in place."""
    n_links, n_entries, n_transfers = capacity.size, links.size, frozen.size
    level = 0.0
    unfrozen = 0
    for t in range(n_transfers):
        if not frozen[t]:
            level = rates[t]  # every unfrozen transfer has risen by the same deltas
            unfrozen += 1
    load = np.zeros(n_links)
    active = np.zeros(n_links, dtype=np.int64)  # unfrozen entries per link
    for e in range(n_entries):
        if weights[e] > 0.0:
            load[links[e]] += weights[e]
            active[links[e]] += 1
    # entries by link and by transfer, each in entry order
    by_link_start = np.zeros(n_links + 1, dtype=np.int64)
    by_transfer_start = np.zeros(n_transfers + 1, dtype=np.int64)
    for e in range(n_entries):
        by_link_start[links[e] + 1] += 1
        by_transfer_start[transfers[e] + 1] += 1
    for lk in range(n_links):
        by_link_start[lk + 1] += by_link_start[lk]
    for t in range(n_transfers):
        by_transfer_start[t + 1] += by_transfer_start[t]
    by_link = np.empty(n_entries, dtype=np.int64)
    by_transfer = np.empty(n_entries, dtype=np.int64)
    fill_link = by_link_start[:-1].copy()
    fill_transfer = by_transfer_start[:-1].copy()
    for e in range(n_entries):
        by_link[fill_link[links[e]]] = e
        fill_link[links[e]] += 1
        by_transfer[fill_transfer[transfers[e]]] = e
        fill_transfer[transfers[e]] += 1
    saturated = np.zeros(n_links, dtype=np.bool_)
    newly = np.zeros(n_transfers, dtype=np.bool_)
    fresh = np.empty(n_transfers, dtype=np.int64)  # the transfers frozen this round
    while unfrozen > 0:
        delta, k, at_cap = _smallest_step(load, residual, ceiling, frozen, level, capped)
        if k < 0 and not at_cap:  # what is left crosses no loaded link: only its cap limits it
            _rise_to_caps(rates, frozen, ceiling)
            return
        level += delta
        _saturate(load, residual, capacity, delta, k, at_cap, tol, saturated)
        n_fresh = 0
        for lk in range(n_links):
            if saturated[lk] and load[lk] > 0.0:
                for i in range(by_link_start[lk], by_link_start[lk + 1]):
                    t = transfers[by_link[i]]
                    if not frozen[t] and not newly[t]:
                        newly[t] = True
                        fresh[n_fresh] = t
                        n_fresh += 1
        if capped:
            for t in range(n_transfers):
                if not frozen[t] and not newly[t] and level >= ceiling[t] * (1.0 - tol):
                    newly[t] = True
                    fresh[n_fresh] = t
                    n_fresh += 1
        for i in range(n_fresh):
            t = fresh[i]
            newly[t] = False
            frozen[t] = True
            rates[t] = level  # it rose with every other unfrozen transfer until now
            unfrozen -= 1
            for j in range(by_transfer_start[t], by_transfer_start[t + 1]):
                e = by_transfer[j]
                if weights[e] > 0.0:
                    lk = links[e]
                    load[lk] -= weights[e]
                    active[lk] -= 1
                    if active[lk] == 0:
                        load[lk] = 0.0
                    weights[e] = 0.0


@njit(cache=True, nogil=True)
def _smallest_step(
    load: np.ndarray, residual: np.ndarray, ceiling: np.ndarray, frozen: np.ndarray, level: float, capped: bool
) -> tuple[float, int, bool]:
    """How far the common level can rise: to the first loaded link's saturation (k) or, if sooner,
    to an unfrozen transfer's cap (at_cap), never below zero. A link is loaded while an unfrozen
    transfer crosses it."""
    delta, k = np.inf, -1
    for lk in range(load.size):
        if load[lk] > 0.0:
            share = residual[lk] / load[lk]
            if share < delta:
                delta, k = share, lk
    at_cap = False
    if capped:
        for t in range(frozen.size):
            if not frozen[t] and ceiling[t] - level < delta:
                delta, at_cap = ceiling[t] - level, True
    return max(delta, 0.0), k, at_cap


@njit(cache=True, nogil=True)
def _rise_to_caps(rates: np.ndarray, frozen: np.ndarray, ceiling: np.ndarray) -> None:
    for t in range(frozen.size):
        if not frozen[t]:
            rates[t] = ceiling[t]


@njit(cache=True, nogil=True)
def _saturate(
    load: np.ndarray,
    residual: np.ndarray,
    capacity: np.ndarray,
    delta: float,
    k: int,
    at_cap: bool,
    tol: float,
    saturated: np.ndarray,
) -> None:
    """Raise every loaded link's use by `delta` and mark the links left without capacity."""
    for lk in range(load.size):
        saturated[lk] = False
        if load[lk] > 0.0:
            residual[lk] -= delta * load[lk]
            if residual[lk] <= tol * capacity[lk]:
                saturated[lk] = True
    if not at_cap and k >= 0:  # the argmin link saturates by construction: guard against rounding
        saturated[k] = True
        residual[k] = 0.0
