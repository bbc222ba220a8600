"""Fit the NCCL model's pipeline slices to published nccl-tests results, and score every row.

Everything else in the model is NCCL's own figure (latencies, protocol factors, LL ceilings, NVLink
per link) or a figure NVIDIA states (NVLS's rate). What NCCL's tuner leaves out is the pipeline: how long
each step waits for a slice. That is one number per protocol (and for NVLS) per GPU architecture,
fitted here by minimising the squared log error of the bus bandwidth over the architecture's
published rows (bug reports excluded).

    python -m sim.nccl.fit                  # the fitted slices per architecture, and each row's error
    python -m sim.nccl.fit --table mine.csv # constants for one's own cluster, as config keys
    python -m sim.nccl.fit --held-out       # each source's rows scored by a fit to the other sources
    python -m sim.nccl.fit --transports     # EFA's and TCPX's constants, each on its own rows only

The transports other than InfiniBand and RoCE (sim/nccl/transports.py) have two constants each, a
network step's cost beyond NCCL's IB figure and the share of the NICs' line rate reached, fitted after
the architectures' constants and with them fixed, on the rows of that transport alone.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Sequence

import numpy as np
import pandas as pd

from sim.catalog.gpus import get_gpu
from sim.nccl.fabrics import CONSTANT_KEYS, Fabric, Slices, fabric_of
from sim.nccl.published import Published, read_table, row_shape, rows
from sim.nccl.transports import FITTED, IB_NIC_SHARE, Transport, transport, with_fitted
from sim.nccl.tuner import Latency, Shape, choose

SLICE_NAMES = ("ll", "ll128", "simple", "nvls")  # the slice a step inside a host waits for (`Latency.slice`)
NAMES = (*SLICE_NAMES, "launch", "step_scale")
BOUNDS = [(0.0, 4000.0)] * 4 + [(0.0, 100.0), (0.0, 2.0)]  # slices in KB; launch in us; latency scale
NETWORK_NAMES = ("network", "network_scale")
NETWORK_BOUNDS = [(0.0, 16000.0), (0.2, 5.0)]
FITTED_NETWORKS = ("infiniband", "roce")
TRANSPORT_NAMES = ("step_us", "nic_share")
# a step's extra cost: 0 to 0.5 ms (EFA's plugin reports 75-150 us to NCCL's tuner); a NIC's share: 20% to all
TRANSPORT_BOUNDS = [(0.0, 500.0), (0.2, 1.0)]


def predict(row: Published, fabric: Fabric) -> tuple[float, str, str]:
    """Bus bandwidth (GB/s) the model predicts for `row`, with the algorithm and protocol it picks."""
    shape = row_shape(row, fabric, get_gpu(row.gpu).intra_host_gbps / 8)
    choice = choose(shape, fabric, row.algorithm)
    return row.bus_factor() * row.nbytes / choice.seconds / 1e9, choice.algorithm, choice.protocol


def score(
    figures: Sequence[Published],
    fabrics: dict[str, Fabric] | None = None,
    transports: dict[str, Transport] | None = None,
) -> pd.DataFrame:
    """Each row with the model's bus bandwidth and its error (predicted / published - 1); `fabrics` by
    GPU and `transports` by name in place of the committed ones."""
    out = []
    for row in figures:
        over = (transports or {}).get(row.transport) or transport(row.transport)
        own = (fabrics or {}).get(row.gpu)
        fabric = dataclasses.replace(own, transport=over) if own else fabric_of(row.gpu, over)
        busbw, algorithm, protocol = predict(row, fabric)
        out.append(
            {
                "kind": row.kind,
                "network": row.network,
                "collective": row.collective,
                "gpu": row.gpu,
                "nodes": row.nodes,
                "gpus": row.ranks,
                "size_bytes": row.nbytes,
                "sized": row.sized,
                "published_gbs": row.busbw_gbs,
                "predicted_gbs": busbw,
                "error": busbw / row.busbw_gbs - 1,
                "algorithm": algorithm,
                "protocol": protocol,
                "source": row.source,
            }
        )
    return pd.DataFrame(out)


def fit(figures: Sequence[Published], networks: Sequence[str] | None = FITTED_NETWORKS) -> dict[str, Slices]:
    """Per architecture with rows, the slices minimising the squared log error of its rows (a global
    search within the bounds, seeded: the tuner's choices make the loss piecewise, with local minima).

    First the NVLink constants on one-host rows; then, those fixed, the network's two on the rows
    across hosts of `networks` (None: every row; by default InfiniBand and RoCE, other transports
    being scored, not fitted)."""
    from scipy.optimize import differential_evolution

    fitted = {}
    for arch in sorted({fabric_of(r.gpu).arch for r in figures if r.sized}):
        own = [r for r in figures if r.sized and fabric_of(r.gpu).arch == arch]
        inside = [r for r in own if r.nodes == 1]
        across = [r for r in own if r.nodes > 1 and (networks is None or r.network in networks)]
        slices = fabric_of(own[0].gpu).slices
        if inside:
            best = differential_evolution(
                _loss, BOUNDS, args=(Choices(inside), slices, NAMES), seed=0, tol=1e-8, polish=True
            )
            slices = dataclasses.replace(slices, **{k: round(float(v), 2) for k, v in zip(NAMES, best.x)})
        if across:
            best = differential_evolution(
                _loss, NETWORK_BOUNDS, args=(Choices(across), slices, NETWORK_NAMES), seed=0, tol=1e-8, polish=True
            )
            slices = dataclasses.replace(slices, **{k: round(float(v), 2) for k, v in zip(NETWORK_NAMES, best.x)})
        fitted[arch] = slices
    return fitted


def source_of(row: Published) -> str:
    """Where a row comes from, coarsely: its repository, or its issue thread or page."""
    return row.source.split("@")[0] if "@" in row.source else row.source


def held_out(figures: Sequence[Published]) -> pd.DataFrame:
    """Every sized row scored with constants fitted to the rows of the *other* sources (repositories,
    threads, pages): how the model does on measurements it was not fitted to. A transport no other
    source ran keeps its plugin's figures with InfiniBand's step cost and NIC share."""
    sized = [r for r in figures if r.sized]
    out = []
    for source in sorted({source_of(r) for r in sized}):
        others = [r for r in sized if source_of(r) != source]
        fitted = fit(others)
        own = [r for r in sized if source_of(r) == source]
        transports = {}
        for name in sorted({r.transport for r in own if r.nodes > 1} & set(FITTED)):
            if len(transport_rows(others, name)) >= len(TRANSPORT_NAMES):
                transports[name] = fit_transport(others, name, fitted)
            else:
                transports[name] = with_fitted(name, step_us=0.0, nic_share=IB_NIC_SHARE)
        fabrics = {
            r.gpu: dataclasses.replace(
                fabric_of(r.gpu), slices=fitted.get(fabric_of(r.gpu).arch, fabric_of(r.gpu).slices)
            )
            for r in own
        }
        out.append(score(own, fabrics, transports).assign(held_out=source))
    return pd.concat(out, ignore_index=True)


def transport_rows(figures: Sequence[Published], name: str) -> list[Published]:
    """The sized rows across hosts of transport `name` (bug reports are not in `figures` unless asked)."""
    return [r for r in figures if r.sized and r.nodes > 1 and r.transport == name]


def transport_errors(
    figures: Sequence[Published], over: Transport, slices: dict[str, Slices] | None = None
) -> np.ndarray:
    """Each row's error (predicted / published - 1) with its hosts joined by `over` (`slices`: the
    architectures' constants in place of the committed ones)."""
    return np.array([predict(r, _fabric(r, over, slices))[0] / r.busbw_gbs - 1 for r in figures])


def _fabric(row: Published, over: Transport, slices: dict[str, Slices] | None) -> Fabric:
    fabric = fabric_of(row.gpu, over)
    return dataclasses.replace(fabric, slices=slices[fabric.arch]) if slices and fabric.arch in slices else fabric


def fit_transport(figures: Sequence[Published], name: str, slices: dict[str, Slices] | None = None) -> Transport:
    """Transport `name` with the step cost and NIC share minimising the squared log error of its own rows
    of `figures` (the architectures' constants as committed, or `slices`). NCCL's tuner picks anew for
    every trial (the share moves the rates it picks by), so each trial predicts every row."""
    from scipy.optimize import differential_evolution

    own = transport_rows(figures, name)
    if len(own) < len(TRANSPORT_NAMES):
        raise ValueError(f"transport {name}: {len(own)} rows; the fit needs at least {len(TRANSPORT_NAMES)}")

    def loss(x: np.ndarray) -> float:
        trial = with_fitted(name, **dict(zip(TRANSPORT_NAMES, (float(v) for v in x))))
        return float(np.mean(np.square(np.log1p(transport_errors(own, trial, slices)))))

    best = differential_evolution(loss, TRANSPORT_BOUNDS, seed=0, tol=1e-6, polish=True)
    return with_fitted(name, step_us=round(float(best.x[0]), 1), nic_share=round(float(best.x[1]), 3))


def _print_transports() -> None:
    """Each fitted transport's constants, and its rows' in-sample errors treated as InfiniBand and with it."""
    figures = rows()
    for name in FITTED:
        own = transport_rows(figures, name)
        fitted = fit_transport(figures, name)
        before, after = transport_errors(own, transport("infiniband")), transport_errors(own, fitted)
        print(f"{name}: step_us={fitted.step_us} nic_share={fitted.nic_share} ({len(own)} rows)")
        print(
            f"  in-sample median |error|: as infiniband {np.median(np.abs(before)):.1%}, fitted "
            f"{np.median(np.abs(after)):.1%}; within 20%: {np.mean(np.abs(before) <= 0.2):.0%} -> "
            f"{np.mean(np.abs(after) <= 0.2):.0%}"
        )
        for row, b, a in zip(own, before, after):
            print(
                f"    {row.gpu} {row.collective} {row.nodes}x{row.gpus_per_node} {row.nbytes:.3g} B: "
                f"{b:+.1%} -> {a:+.1%}"
            )


class Choices:
    """What NCCL's tuner picks for each row, as arrays: its pick and everything but the latency's
    fitted constants are the same under any slices, so the fit evaluates all rows in one pass."""

    def __init__(self, figures: Sequence[Published]) -> None:
        picks = [choose(*_shape_and_fabric(r), r.algorithm) for r in figures]
        terms = [c.terms for c in picks]
        fields = [f.name for f in dataclasses.fields(Latency) if f.name != "slice"]
        self.terms = Latency("", **{name: np.array([getattr(t, name) for t in terms]) for name in fields})
        self.slice = np.array([SLICE_NAMES.index(t.slice) for t in terms])
        self.transfer = np.array([c.transfer_s for c in picks])
        self.bus_bytes = np.array([r.bus_factor() * r.nbytes for r in figures])
        self.published = np.array([r.busbw_gbs for r in figures])

    def busbw_gbs(self, slices: Slices) -> np.ndarray:
        """Each row's predicted bus bandwidth under `slices` (as `predict` gives it)."""
        kb = np.array([getattr(slices, name) for name in SLICE_NAMES])[self.slice]
        return self.bus_bytes / (self.terms.seconds(slices, kb) + self.transfer) / 1e9


def _shape_and_fabric(row: Published) -> tuple[Shape, Fabric]:
    fabric = fabric_of(row.gpu, row.transport)
    return row_shape(row, fabric, get_gpu(row.gpu).intra_host_gbps / 8), fabric


def _loss(x: np.ndarray, choices: Choices, slices: Slices, names: Sequence[str]) -> float:
    """Mean squared log error of the rows of `choices` with `slices` whose constants `names` are `x`."""
    trial = dataclasses.replace(slices, **dict(zip(names, x)))
    errors = [math.log(v) for v in choices.busbw_gbs(trial) / choices.published]
    return float(np.mean(np.square(errors)))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sim.nccl.fit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", help="your own nccl-tests results (CSV in the bundled table's columns)")
    parser.add_argument("--held-out", action="store_true", help="score each source fitted without it (minutes)")
    parser.add_argument("--transports", action="store_true", help="fit EFA's and TCPX's constants on their rows")
    args = parser.parse_args(argv)
    if args.transports:
        _print_transports()
        return 0
    if args.table:
        return _fit_own(args.table)
    if args.held_out:
        scored = held_out(rows()).assign(abs_error=lambda t: t["error"].abs())
        kind = scored["kind"].where(scored["kind"] == "intra_node", "inter_node:" + scored["network"])
        table = scored.assign(kind=kind).groupby(["kind", "collective"])["abs_error"].agg(["size", "median", "max"])
        print(table.to_string(float_format=lambda v: f"{v:.1%}"))
        return 0
    figures = rows()
    fitted = fit(figures)
    for arch, slices in fitted.items():
        print(f"{arch}: {slices}")
    fabrics = {
        r.gpu: dataclasses.replace(fabric_of(r.gpu), slices=fitted.get(fabric_of(r.gpu).arch, fabric_of(r.gpu).slices))
        for r in figures
    }
    scored = score(figures, fabrics)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(scored.drop(columns=["source"]).round(3).to_string(index=False))
    print(f"median |error| {scored['error'].abs().median():.1%}, worst {scored['error'].abs().max():.1%}")
    return 0


def _fit_own(path: str) -> int:
    """Fit one's own cluster's table and print the `simulation.nccl.constants` that reproduce it."""
    try:
        figures = rows(frame=read_table(path))
        fitted = fit(figures, networks=None)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for arch, slices in fitted.items():
        gpus = sorted({r.gpu for r in figures if fabric_of(r.gpu).arch == arch})
        mine = [r for r in figures if r.gpu in gpus]
        scored = score(mine, {g: dataclasses.replace(fabric_of(g), slices=slices) for g in gpus})
        errors = scored["error"].abs()
        print(f"# {', '.join(gpus)}: {len(mine)} rows, median |error| {errors.median():.1%}, worst {errors.max():.1%}")
        fitted_names = (NAMES if any(r.nodes == 1 for r in mine) else ()) + (
            NETWORK_NAMES if any(r.nodes > 1 for r in mine) else ()
        )
        print("simulation:\n  nccl:\n    constants:")
        for key, name in CONSTANT_KEYS.items():
            if name in fitted_names:  # the others would be the GPU's own: no rows to fit them to
                print(f"      {key}: {getattr(slices, name)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
