"""The progressive-filling loop of `sim.maxmin`, compiled with numba.

The solver runs once per transfer start or finish on a few thousand incidence entries, where numpy's
per-call overhead (a dozen calls per round, each a few microseconds) dominates the arithmetic. This is
the same algorithm as `sim.maxmin.max_min_rates_numpy`, entry by entry, so the two agree to rounding
(tests compare them); numba only removes the interpreter from the loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit


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
    """Per-sub-flow rates; arguments as `sim.maxmin.max_min_rates` (scale 0 = idle transfer)."""
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
    while unfrozen > 0:
        load[:] = 0.0
        for e in range(n_entries):
            load[links[e]] += weights[e]
        delta, k = np.inf, -1
        for lk in range(n_links):
            if load[lk] > 0.0:
                share = residual[lk] / load[lk]
                if share < delta:
                    delta, k = share, lk
        at_cap = False
        if capped:
            for t in range(n_transfers):
                if not frozen[t] and ceiling[t] - rates[t] < delta:
                    delta, at_cap = ceiling[t] - rates[t], True
        if k < 0 and not at_cap:  # what is left crosses no loaded link: only its cap limits it
            for t in range(n_transfers):
                if not frozen[t]:
                    rates[t] = ceiling[t]
            break
        if delta < 0.0:
            delta = 0.0
        for t in range(n_transfers):
            if not frozen[t]:
                rates[t] += delta
        for lk in range(n_links):
            saturated[lk] = False
            if load[lk] > 0.0:
                residual[lk] -= delta * load[lk]
                if residual[lk] <= tol * capacity[lk]:
                    saturated[lk] = True
        if not at_cap and k >= 0:  # the argmin link saturates by construction: guard against rounding
            saturated[k] = True
            residual[k] = 0.0
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
