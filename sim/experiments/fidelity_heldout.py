"""The held-out nccl-tests figures (sim/catalog/published_collectives_heldout.csv): multi-host runs the
NCCL constants were never fitted to, each simulated as `syncsim fidelity` simulates the fitted table,
beside a null model (a two-parameter alpha-beta line fitted to the fitted table's multi-host rows).

    python -m sim.experiments.fidelity_heldout          # per source and overall
    python -m sim.experiments.fidelity_heldout --rows   # and every row

Errors are simulated / published - 1 of the bus bandwidth. The null model answers "does the NCCL model
know anything a straight line through the fitted rows does not?": per row, time = a + n/B with n the
message size in bytes, a and B fitted by least squares on time (non-negative, so a small message never
gets a negative time), busbw = bus factor x n / time.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim.experiments.fidelity import scored
from sim.nccl.fit import source_of
from sim.nccl.published import Published, rows

WITHIN = 0.2  # the share of rows whose |error| is at most this is reported
FITTED_NETWORKS = ("infiniband", "roce")  # the transports the NCCL model's network constants are fitted on
LARGE = 64 * 2**20  # from this size a collective is mostly bandwidth: the headline's third line


@dataclass(frozen=True)
class AlphaBeta:
    """time = alpha_s + n / bytes_per_s, the null model."""

    alpha_s: float
    bytes_per_s: float

    def seconds(self, nbytes: float) -> float:
        return self.alpha_s + nbytes / self.bytes_per_s

    def busbw_gbs(self, row: Published) -> float:
        """`row`'s bus bandwidth under this line (GB/s)."""
        return row.bus_factor() * row.nbytes / self.seconds(row.nbytes) / 1e9


def published_seconds(row: Published) -> float:
    """The time nccl-tests measured for `row`, from its bus bandwidth: busbw = factor x n / time."""
    return row.bus_factor() * row.nbytes / (row.busbw_gbs * 1e9)


def fit_alpha_beta(figures: Sequence[Published]) -> AlphaBeta:
    """Least squares of the published times on (1, n), both coefficients kept non-negative."""
    from scipy.optimize import nnls

    if len(figures) < 2:
        raise ValueError(f"figures: {len(figures)} rows; the alpha-beta fit needs at least 2")
    design = np.array([[1.0, r.nbytes] for r in figures])
    times = np.array([published_seconds(r) for r in figures])
    # scale the columns so the solver sees numbers of one magnitude; the fit is the same
    scale = np.abs(design).max(axis=0)
    (alpha, per_byte), _ = nnls(design / scale, times)
    alpha, per_byte = alpha / scale[0], per_byte / scale[1]
    if per_byte <= 0:
        raise ValueError("figures: time does not grow with size; no bandwidth to fit")
    return AlphaBeta(float(alpha), float(1 / per_byte))


def null_model() -> AlphaBeta:
    """The null model fitted to the fitted table's sized multi-host rows (bug reports left out)."""
    return fit_alpha_beta([r for r in rows() if r.nodes > 1 and r.sized])


def heldout_table(figures: Sequence[Published] | None = None, null: AlphaBeta | None = None) -> pd.DataFrame:
    """One line per held-out figure (default: every row of the held-out table, bug reports included):
    the figure, the simulator's and the null model's bus bandwidth, and their errors."""
    figures = rows(include_bug_reports=True, heldout=True) if figures is None else figures
    null = null_model() if null is None else null
    out = []
    for row in figures:
        null_gbs = null.busbw_gbs(row)
        null_figures = {"null_gbs": round(null_gbs, 1), "null_error": null_gbs / row.busbw_gbs - 1}
        out.append({"source": source_of(row)} | scored(row) | {"nbytes": row.nbytes} | null_figures)
    return pd.DataFrame(out)


def summary(table: pd.DataFrame, by: str = "source") -> pd.DataFrame:
    """Per source (or per `by`, another column: network) and overall (bug reports left out): rows,
    median |error| and the share within `WITHIN`, for the simulator and for the null model."""
    scored = table[~table["bug_report"]]
    groups = [(str(key), part) for key, part in scored.groupby(by)] + [("overall", scored)]
    return _figures(groups).rename_axis(by)


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """`summary`'s figures for every scored row, for the transports the model is fitted on (InfiniBand
    and RoCE), and for messages of at least LARGE bytes."""
    scored = table[~table["bug_report"]]
    parts = {
        "overall": scored,
        "infiniband+roce": scored[scored["network"].isin(FITTED_NETWORKS)],
        ">= 64 MiB": scored[scored["nbytes"] >= LARGE],
    }
    return _figures(list(parts.items()))


def _figures(groups: Sequence[tuple[str, pd.DataFrame]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "source": name,
                "rows": len(part),
                "median": part["error"].abs().median(),
                "within": (part["error"].abs() <= WITHIN).mean(),
                "null_median": part["null_error"].abs().median(),
                "null_within": (part["null_error"].abs() <= WITHIN).mean(),
            }
            for name, part in groups
        ]
    ).set_index("source")


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sim.experiments.fidelity_heldout", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", action="store_true", help="print every row too")
    args = parser.parse_args(argv)
    null = null_model()
    table = heldout_table(null=null)
    percent = {"median": "{:.1%}", "within": "{:.0%}", "null_median": "{:.1%}", "null_within": "{:.0%}"}
    with pd.option_context("display.width", 200, "display.max_rows", 500, "display.max_colwidth", 60):
        if args.rows:
            print(table.round(3).to_string(index=False), end="\n\n")
        print(summary(table).to_string(formatters={k: v.format for k, v in percent.items()}), end="\n\n")
        print(summary(table, "network").to_string(formatters={k: v.format for k, v in percent.items()}), end="\n\n")
        print(headline(table).to_string(formatters={k: v.format for k, v in percent.items()}))
    bugs = int(table["bug_report"].sum())
    print(
        f"null model: time = {null.alpha_s * 1e6:.1f} us + n / {null.bytes_per_s / 1e9:.2f} GB/s "
        f"(fitted to the fitted table's multi-host rows); within = |error| <= {WITHIN:.0%}; "
        f"{bugs} rows from bug reports left out of the summary"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
