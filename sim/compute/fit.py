"""Fit the default compute model's per-GPU constants to published throughputs and this project's
measured steps, and measure its error held out by model and by family (docs/compute_model.md).

The rows, published and measured, come from sim.compute.fit_rows. A training row is
matched to forward + backward, an inference row to forward alone (sim/compute/roofline.py); only
training rows are fitted, both kinds together. The fit minimises a robust (Cauchy) loss of the log
ratio of predicted to measured time, with every GPU's constants a shared set times per-GPU
factors pulled towards 1, and the shared set weakly towards a prior so that constants the rows
cannot see (TF32 on a GPU without it) stay finite. Held out by model: for each model, fit on the
other models' rows (of both kinds) and predict its own; held out by family, the same for each
family of models (FAMILIES: convnets, transformers), a kind of network the fit has not seen.

    python -m sim.compute.fit   # the held-out tables (by model, by family; measured, published) beside
                                # the FLOPs-only null, and the constants fitted on all rows
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np
import pandas as pd

from sim.catalog.gpus import FITTED_GPUS, SHARPNESS_MAX, WINOGRAD_MAX, KernelCosts, get_gpu, memory_variant
from sim.catalog.zoo import Layer, get_model
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS, layers_at_sequence_length
from sim.compute.fit_rows import Row, fitted_rows
from sim.compute.roofline import BACKWARD_FACTOR, OpTable, op_table, stack
from sim.markdown import markdown_table

NAMES = ("fp32", "tf32", "tensor", "memory", "launch_us", "winograd", "sharpness", "dispatch_us", "unaligned", "tile")
# where the pull goes: typical fractions of peak, ~10 us per kernel, Winograd F(2x2, 3x3)'s saving in
# multiplications (36 to 16; Lavin and Gray 2016), a roofline of moderate sharpness, ~20 us of CPU
# per eager kernel, unaligned products at half speed, tensor-core tiles 128 wide (CUTLASS's default)
PRIOR = KernelCosts(0.6, 0.5, 0.4, 0.7, 10.0, 2.25, 4.0, 20.0, 0.5, 128.0)
PRIOR_WEIGHT = 0.1  # per shared constant, against a row's weight of 1 (in log units)
# Cauchy loss, scale 0.25 (in log units): rows more than ~25% off weigh less, so that figures far
# from what the model can describe (the same network published 1.8x apart) do not drag the rest
# (loss and scale chosen by the held-out error, docs/compute_model.md)
LOSS, LOSS_SCALE = "cauchy", 0.25
# per GPU factor, per constant: a GPU's FP32 efficiency moves from the shared one as its rows demand;
# its tensor cores' and memory's fractions of peak stay close to the shared ones (cuBLAS's and
# cuDNN's tiled kernels and HBM controllers reach alike fractions across generations, so a GPU
# whose rows are all of one family does not bend them to it), as do its launch, Winograd,
# sharpness, dispatch, alignment and tile constants (few rows see them on one GPU); chosen by the
# error held out by family, docs/compute_model.md
# bounds: fractions of peak up to 1, Winograd's largest saving, sharpness from a sum to a maximum,
# a tile no wider than 1,024, and an eager dispatch of 3 to 60 us a kernel: measured host costs of
# one PyTorch op run from ~2 us (a bare tensor op from Python, pytorch/pytorch#41383) to ~8 us
# (an add issued back to back on an A100 host) and ~5-25 us through nn.Module and autograd, the
# upper bound leaving room for the ops a zoo kernel stands for (docs/compute_model.md)
GPU_WEIGHT = np.array([1.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0])
BOUNDS = (
    np.log([1e-3, 1e-3, 1e-3, 1e-2, 0.1, 1.0, 1.0, 3.0, 1e-2, 1.0]),
    np.log([1.0, 1.0, 1.0, 1.0, 500.0, WINOGRAD_MAX, SHARPNESS_MAX, 60.0, 1.0, 1024.0]),
)


def predict(row: Row, costs: KernelCosts) -> float:
    """The model's seconds for a row: forward (+ backward for training) of the zoo model."""
    return float(StackedRows([row]).seconds(costs)[0])


class StackedRows:
    """Rows of one GPU as the distinct tables they time, grouped by how they are timed and each
    group's tables stacked, so that predicting them under one set of constants takes a few array
    passes instead of one per row."""

    def __init__(self, rows: Sequence[Row]) -> None:
        keys = [
            (r.model, r.batch, r.precision, r.seq_len, r.reference, r.training, r.implementation, r.memory_gb)
            for r in rows
        ]
        distinct = {key: row for key, row in zip(keys, rows, strict=True)}
        slot = {key: i for i, key in enumerate(distinct)}
        self.rows = np.array([slot[key] for key in keys], dtype=np.int64)  # each row's distinct table
        groups: dict[tuple[bool, str], list[int]] = {}
        for i, row in enumerate(distinct.values()):
            groups.setdefault((row.training, row.implementation), []).append(i)
        tables = list(distinct.values())
        self.size = len(tables)
        self.groups = [
            (np.array(indices), training, implementation, stack([_row_table(tables[i]) for i in indices]))
            for (training, implementation), indices in groups.items()
        ]

    def seconds(self, costs: KernelCosts) -> np.ndarray:
        """Each row's predicted seconds under `costs`."""
        out = np.empty(self.size)
        for indices, training, implementation, table in self.groups:
            if training:
                out[indices] = table.seconds(costs, implementation).sum(axis=-1)
            else:
                out[indices] = np.where(table.backward, 0.0, table.gpu_seconds(costs, implementation)).sum(axis=-1)
        return out[self.rows]


def _row_table(row: Row) -> OpTable:
    return _table(row.gpu, row.model, row.batch, row.precision, row.seq_len, row.reference, row.memory_gb)


@cache
def _table(
    gpu: str, model: str, batch: int, precision: str, seq_len: int, reference: bool, memory_gb: int = 0
) -> OpTable:
    return op_table(memory_variant(gpu, memory_gb), _layers(model, seq_len, reference), batch, precision)


def _layers(model: str, seq_len: int, reference: bool = False) -> tuple[Layer, ...]:
    if model not in SEQUENCE_LENGTHS:
        return get_model(model).layers
    return layers_at_sequence_length(model, seq_len or SEQUENCE_LENGTHS[model], reference=reference)


def _costs(x: np.ndarray, source: str = "") -> KernelCosts:
    values = np.clip(np.exp(x), np.exp(BOUNDS[0]), np.exp(BOUNDS[1]))
    return KernelCosts(*(float(v) for v in values), source=source)


def fit(rows: Sequence[Row], gpus: Sequence[str] = FITTED_GPUS) -> dict[str, KernelCosts]:
    """Per GPU in `gpus`, constants minimising the (robust) log error over `rows`: one shared set
    (pulled weakly to PRIOR) times a per-GPU factor for each constant (pulled to 1), so that a GPU
    with few rows borrows from the others and a GPU with none gets the shared set."""
    from scipy.optimize import least_squares

    prior = np.log([getattr(PRIOR, name) for name in NAMES])
    k = len(NAMES)
    by_gpu = {gpu: [r for r in rows if r.gpu == gpu] for gpu in gpus}
    stacked = [(StackedRows(by_gpu[gpu]), np.array([r.seconds for r in by_gpu[gpu]])) for gpu in gpus if by_gpu[gpu]]
    fitted = [g for g, gpu in enumerate(gpus) if by_gpu[gpu]]

    def constants(x: np.ndarray, gpu: int) -> np.ndarray:
        return x[:k] + x[k * (gpu + 1) : k * (gpu + 2)]

    def residuals(x: np.ndarray) -> np.ndarray:
        errors = [
            np.log(tables.seconds(_costs(constants(x, g))) / seconds)
            for g, (tables, seconds) in zip(fitted, stacked, strict=True)
        ]
        pulls = [PRIOR_WEIGHT * (x[:k] - prior), np.tile(GPU_WEIGHT, len(gpus)) * x[k:]]
        return np.concatenate([*errors, *pulls])

    # the rows of each GPU's errors (GPUs without rows have none), then the pulls, one per constant
    ends = np.cumsum([0] + [len(by_gpu[gpu]) for gpu in gpus])
    pulls_at = ends[-1] + k * (1 + np.arange(len(gpus)))  # each GPU's first pull
    owned = [np.append(np.arange(ends[g], ends[g + 1]), pulls_at[g] + np.arange(k)) for g in range(len(gpus))]
    start = np.concatenate([prior, np.zeros(k * len(gpus))])
    low = np.concatenate([BOUNDS[0], np.full(k * len(gpus), -np.inf)])
    high = np.concatenate([BOUNDS[1], np.full(k * len(gpus), np.inf)])
    last: dict[bytes, np.ndarray] = {}

    def memo(x: np.ndarray) -> np.ndarray:
        key = x.tobytes()
        if key not in last:
            last.clear()
            last[key] = residuals(x)
        return last[key]

    def jacobian(x: np.ndarray) -> np.ndarray:
        return _block_jacobian(residuals, x, memo(x), k, owned, (low, high))

    result = least_squares(
        memo, start, jac=jacobian, bounds=(low, high), xtol=1e-8, ftol=1e-8, loss=LOSS, f_scale=LOSS_SCALE
    )
    return {gpu: _costs(np.round(constants(result.x, g), 4), _counted(by_gpu[gpu])) for g, gpu in enumerate(gpus)}


def _block_jacobian(
    fun: Callable[[np.ndarray], np.ndarray],
    x: np.ndarray,
    f0: np.ndarray,
    k: int,
    owned: Sequence[np.ndarray],
    bounds: tuple[np.ndarray, np.ndarray],
) -> np.ndarray:
    """Forward differences of `fun` at `x` (scipy's 2-point steps) for the fit's layout: `k` shared
    constants that move every residual, then `k` per GPU that move only the residuals `owned` by
    that GPU. The i-th constant of every GPU moves at once, so a Jacobian takes 2k evaluations
    instead of k * (GPUs + 1), with the same columns."""
    step = np.sqrt(np.finfo(float).eps) * np.where(x >= 0, 1.0, -1.0) * np.maximum(1.0, np.abs(x))
    outside = (x + step < bounds[0]) | (x + step > bounds[1])
    step = np.where(outside, -step, step)
    jac = np.zeros((len(f0), len(x)))
    for i in range(k):
        moved = x.copy()
        moved[i] += step[i]
        jac[:, i] = (fun(moved) - f0) / (moved[i] - x[i])
    for i in range(k):
        columns = k * (1 + np.arange(len(owned))) + i
        moved = x.copy()
        moved[columns] += step[columns]
        change = fun(moved) - f0
        for rows, column in zip(owned, columns, strict=True):
            jac[rows, column] = change[rows] / (moved[column] - x[column])
    return jac


def _counted(rows: Sequence[Row]) -> str:
    published = sum(r.kind == "published" for r in rows)
    return f"{published} published + {len(rows) - published} measured rows"


# Each zoo model's family: one architecture and its resized kin (ResNets of any depth, BERT of any
# size, Transformer-XL base and large). Held out by family, a family's rows are predicted by
# constants fitted to the other families' rows only: a network the fit has not seen, not a sibling of
# one. SSD300's backbone is ResNet-50's first three stages, so the ResNets stay in its fit; the
# detector's extra blocks, heads, loss and 300x300 maps are what is held out.
FAMILIES: dict[str, str] = {
    "resnet50": "resnet",
    "wrn26_10": "resnet",
    "resnet32": "resnet",
    "vgg16": "vgg",
    "ssd300": "ssd",
    "bert_base": "bert",
    "bert_large": "bert",
    "gpt2": "gpt",
    "transformer_xl": "transformer_xl",
    "transformer_xl_large": "transformer_xl",
    "gnmt": "gnmt",
    "deepfm": "deepfm",
    # no measured or published rows yet: families for when they come
    "llama3_8b": "llama",
    "llama3_70b": "llama",
    "gpt3_175b": "gpt",
}


def family(model: str) -> str:
    """The family of zoo model `model` (FAMILIES)."""
    if model not in FAMILIES:
        raise ValueError(f"model {model!r} has no family; families are given for: {', '.join(FAMILIES)}")
    return FAMILIES[model]


def held_out(rows: Sequence[Row], group: Callable[[str], str] = str) -> pd.DataFrame:
    """Every row predicted with the constants fitted to the rows of the *other* models (or, with
    `group`, of the models of other groups: `held_out_by_family`)."""
    out = []
    for held in sorted({group(r.model) for r in rows}):
        costs = fit([r for r in rows if group(r.model) != held])
        out += [_outcome(r, predict(r, costs[r.gpu])) for r in rows if group(r.model) == held]
    return pd.DataFrame(out)


def held_out_by_family(rows: Sequence[Row]) -> pd.DataFrame:
    """Every row predicted with the constants fitted to the rows of the other families (FAMILIES)."""
    return held_out(rows, family)


def flops_only_held_out(rows: Sequence[Row], group: Callable[[str], str] = str) -> pd.DataFrame:
    """The model this one replaced, scored the same way: FLOPs at one efficiency per GPU and
    precision (the geometric mean over the other models' rows, else over the GPU's, else all;
    with `group`, over the other groups' rows, e.g. `family`)."""
    ideal = {r: _flops(r) / get_gpu(r.gpu).peak_flops(r.precision) for r in rows}
    out = []
    for held in sorted({group(r.model) for r in rows}):
        others = [r for r in rows if group(r.model) != held]
        for r in (r for r in rows if group(r.model) == held):
            pool = [o for o in others if (o.gpu, o.precision) == (r.gpu, r.precision)]
            pool = pool or [o for o in others if o.gpu == r.gpu] or others
            efficiency = math.exp(np.mean([math.log(ideal[o] / o.seconds) for o in pool]))
            out.append(_outcome(r, ideal[r] / efficiency))
    return pd.DataFrame(out)


def _flops(row: Row) -> float:
    forward = sum(layer.forward_flops for layer in _layers(row.model, row.seq_len, row.reference)) * row.batch
    return forward * (1.0 + BACKWARD_FACTOR if row.training else 1.0)


def _outcome(row: Row, predicted: float) -> dict[str, Any]:
    return {
        "model": row.model,
        "gpu": row.gpu,
        "precision": row.precision,
        "batch": row.batch,
        "measured_ms": row.seconds * 1e3,
        "predicted_ms": predicted * 1e3,
        "error": predicted / row.seconds - 1.0,
        "source": row.source,
        "kind": row.kind,
    }


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model, GPU and precision: rows, batch sizes, median error and the worst |error|."""
    grouped = table.assign(abs_error=table["error"].abs()).groupby(["model", "gpu", "precision"])
    return grouped.agg(
        rows=("error", "size"),
        batches=("batch", lambda b: ", ".join(str(v) for v in sorted(set(b)))),
        median_error=("error", "median"),
        worst=("abs_error", "max"),
    ).reset_index()


def markdown(table: pd.DataFrame) -> str:
    """`table` as a Markdown table, fractions as signed percentages (docs/compute_model.md)."""

    return markdown_table(table, lambda value: f"{value:+.0%}" if isinstance(value, float) else str(value))


def _errors(name: str, scored: pd.DataFrame, rows: str) -> str:
    errors = scored["error"].abs()
    return f"{name}: {len(scored)} {rows}, median |error| {errors.median():.1%}, max {errors.max():.1%}"


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sim.compute.fit", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    rows = fitted_rows()
    for held, group in (("model", str), ("family", family)):
        table, null = held_out(rows, group), flops_only_held_out(rows, group)
        for kind in ("measured", "published"):
            scored = table[table["kind"] == kind]
            print(f"\n{kind} rows, held out by {held}:\n")
            print(markdown(summary(scored)))
            print(_errors("roofline", scored, f"rows held out by {held}"))
            print(_errors("FLOPs only", null[null["kind"] == kind], f"rows held out by {held}"))
    print()
    for gpu, costs in fit(rows).items():
        values = ", ".join(f"{getattr(costs, name):.3g}" for name in NAMES)
        print(f'"{gpu}": KernelCosts({values}, source="{costs.source}"),')
    print("bounds: " + ", ".join(f"{n} [{lo:.3g}, {hi:.3g}]" for n, lo, hi in zip(NAMES, *np.exp(BOUNDS), strict=True)))


if __name__ == "__main__":
    main()
