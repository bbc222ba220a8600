"""Max-min fair rates by progressive filling, vectorised over a sparse link x transfer incidence.

A *transfer* is one or more sub-flows that must progress at the same rate (a single flow, or the p
flows of a pipelined ring collective). Its incidence with link l is the number of its sub-flows
crossing l, so a transfer with two sub-flows on a link takes two fair shares there: exactly what
two independent flows would get, except that both are held to the slower one's rate.

Progressive filling raises every unfrozen transfer's rate together until some link saturates (or a
transfer reaches its own cap), freezes the transfers crossing a saturated link, and repeats. Each
round is a couple of `np.bincount` calls over the incidence entries, and the number of rounds is the
number of distinct bottleneck levels, usually a handful.
"""

from __future__ import annotations

import numpy as np

# A link counts as saturated when its residual capacity is below this fraction of its capacity.
SATURATION_TOL = 1e-12


def max_min_rates(
    links: np.ndarray,
    transfers: np.ndarray,
    multiplicity: np.ndarray,
    capacity: np.ndarray,
    n_transfers: int,
    cap: np.ndarray | None = None,
) -> np.ndarray:
    """Rates (per sub-flow) of `n_transfers` transfers sharing links max-min fairly.

    links, transfers, multiplicity: the non-zero incidence entries (link id, transfer id, count).
    capacity: capacity of every link id (indexable by `links`).
    cap: optional per-transfer rate ceiling (inf for none).
    A transfer with no incidence entries gets its cap (inf without one).
    """
    n_links = capacity.shape[0]
    ceiling = np.full(n_transfers, np.inf) if cap is None else np.asarray(cap, dtype=float)
    rates = np.zeros(n_transfers)
    residual = capacity.astype(float, copy=True)
    on_links = np.bincount(transfers, minlength=n_transfers) > 0
    rates[~on_links] = ceiling[~on_links]
    frozen = ~on_links
    mult = multiplicity.astype(float, copy=False)
    while not frozen.all():
        weights = mult * ~frozen[transfers]
        load = np.bincount(links, weights=weights, minlength=n_links)
        loaded = np.flatnonzero(load > 0)
        share = residual[loaded] / load[loaded]
        k = int(np.argmin(share))
        delta = max(float(share[k]), 0.0)
        headroom = ceiling[~frozen] - rates[~frozen]
        capped = bool(headroom.size) and float(headroom.min()) < delta
        if capped:
            delta = float(headroom.min())
        rates[~frozen] += delta
        residual[loaded] -= delta * load[loaded]
        saturated = np.zeros(n_links, dtype=bool)
        saturated[loaded] = residual[loaded] <= SATURATION_TOL * capacity[loaded]
        if not capped:
            saturated[loaded[k]] = True  # the argmin link saturates by construction; guard against rounding
            residual[loaded[k]] = 0.0
        hit = np.bincount(transfers, weights=saturated[links], minlength=n_transfers) > 0
        newly = ~frozen & (hit | (rates >= ceiling * (1 - SATURATION_TOL)))
        frozen |= newly
    return rates
