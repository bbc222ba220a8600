"""Max-min fair rates by progressive filling, vectorised over a sparse link x transfer incidence.

A *transfer* is one or more sub-flows that must progress at the same rate (a single flow, or the p
flows of a pipelined ring collective). Its incidence with link l is the number of its sub-flows
crossing l, so a transfer with two sub-flows on a link takes two fair shares there: exactly what
two independent flows would get, except that both are held to the slower one's rate.

Progressive filling raises every unfrozen transfer's rate together until some link saturates (or a
transfer reaches its own cap), freezes the transfers crossing a saturated link, and repeats. Each
round is a couple of passes over the incidence entries, and the number of rounds is the number of
distinct bottleneck levels, usually a handful.

The solver runs once per transfer start or finish, so its fixed cost matters as much as its
scaling. `max_min_rates_numpy` is the vectorised reference; when numba is available the same loop
runs compiled (`sim/network/maxmin_jit.py`), several times faster on the few-thousand-entry problems a run
solves again and again, and with bitwise-identical results (tests compare whole runs). Set
SYNCSIM_NO_JIT=1 to force the numpy path.
"""

from __future__ import annotations

import numpy as np

from sim.network.compiled import progressive_filling

# A link counts as saturated when its residual capacity is below this fraction of its capacity.
SATURATION_TOL = 1e-12


def max_min_rates_numpy(
    links: np.ndarray,
    transfers: np.ndarray,
    multiplicity: np.ndarray,
    capacity: np.ndarray,
    n_transfers: int,
    cap: np.ndarray | None = None,
    scale: np.ndarray | None = None,
) -> np.ndarray:
    """Rates (per sub-flow) of `n_transfers` transfers sharing links max-min fairly.

    links, transfers, multiplicity: the incidence entries (link id, transfer id, count).
    capacity: capacity of every link id (indexable by `links`).
    cap: optional per-transfer rate ceiling (inf for none).
    scale: optional per-transfer factor on its multiplicities: how many identical transfers it
    stands for. A transfer with scale 0 is idle and gets rate 0, so a caller can keep its entries.
    A transfer with no incidence entries gets its cap (inf without one).
    """
    n_links = capacity.shape[0]
    ceiling = np.full(n_transfers, np.inf) if cap is None else np.asarray(cap, dtype=float)
    scale = np.ones(n_transfers) if scale is None else np.asarray(scale, dtype=float)
    rates = np.zeros(n_transfers)
    residual = capacity.astype(float)  # a copy
    unlinked = np.bincount(transfers, minlength=n_transfers) == 0  # no links: only the cap limits them
    idle = scale == 0
    rates[unlinked & ~idle] = ceiling[unlinked & ~idle]
    frozen = unlinked | idle
    capped = bool(np.isfinite(ceiling[~frozen]).any())
    weights = np.asarray(multiplicity, dtype=float) * scale[transfers] * ~frozen[transfers]
    while not frozen.all():
        load = np.bincount(links, weights=weights, minlength=n_links)
        loaded = np.flatnonzero(load)
        share = residual[loaded] / load[loaded]
        k = int(share.argmin())
        delta = max(float(share[k]), 0.0)
        at_cap = False
        if capped:
            headroom = float((ceiling[~frozen] - rates[~frozen]).min())
            if headroom < delta:
                delta, at_cap = headroom, True
        rates[~frozen] += delta
        residual[loaded] -= delta * load[loaded]
        saturated = np.zeros(n_links, dtype=bool)
        saturated[loaded[residual[loaded] <= SATURATION_TOL * capacity[loaded]]] = True
        if not at_cap:  # the argmin link saturates by construction: guard against rounding
            saturated[loaded[k]] = True
            residual[loaded[k]] = 0.0
        newly = np.zeros(n_transfers, dtype=bool)
        newly[transfers[saturated[links]]] = True
        if capped:
            newly |= rates >= ceiling * (1 - SATURATION_TOL)
        frozen |= newly
        weights[newly[transfers]] = 0.0
    return rates


def max_min_rates(
    links: np.ndarray,
    transfers: np.ndarray,
    multiplicity: np.ndarray,
    capacity: np.ndarray,
    n_transfers: int,
    cap: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    compiled: bool = True,
) -> np.ndarray:
    """Max-min fair rates; see `max_min_rates_numpy` for the arguments. `compiled`: use the numba
    kernel if available (a process's first compiled call loads it: about half a second)."""
    kernel = progressive_filling() if compiled else None
    if kernel is None:
        return max_min_rates_numpy(links, transfers, multiplicity, capacity, n_transfers, cap, scale)
    as_float = np.ascontiguousarray
    return kernel(
        np.ascontiguousarray(links, dtype=np.int64),
        np.ascontiguousarray(transfers, dtype=np.int64),
        as_float(multiplicity, dtype=float),
        np.ones(n_transfers) if scale is None else as_float(scale, dtype=float),
        as_float(capacity, dtype=float),
        np.full(n_transfers, np.inf) if cap is None else as_float(cap, dtype=float),
        SATURATION_TOL,
    )
