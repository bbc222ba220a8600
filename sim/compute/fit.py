"""Fit the default compute model's per-GPU constants to published throughputs, and measure its error
held out by model (docs/compute_model.md).

The figures are sim/catalog/zoo/published_throughput.csv: one row per published training or inference
throughput of a zoo model on one GPU type at one batch size and precision, with its citation. A
training row is matched to forward + backward, an inference row to forward alone (sim/compute/roofline.py).
Only training rows are fitted. The fit minimises a robust (Cauchy) loss of the log ratio of
predicted to measured time, with every GPU's constants a shared set times per-GPU factors pulled
towards 1, and the shared set weakly towards a prior so that constants the rows cannot see (TF32 on
a GPU without it) stay finite. Held out by model: for each model, fit on the other models' rows
and predict its own.

    python -m sim.compute.fit            # the held-out error table, and the constants fitted on all rows
    python -m sim.compute.fit --measured # the shipped constants against this project's measured steps

The measured steps (sim/catalog/zoo/measured_steps.csv) are this project's own: eager PyTorch steps
of the zoo's torch.nn modules, what `syncsim real` runs. They are not fitted (yet); the shipped
constants, fitted to published figures only, are scored against them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from sim.catalog.gpus import FITTED_GPUS, WINOGRAD_MAX, KernelCosts, get_gpu
from sim.catalog.zoo import Layer, get_model
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS, layers_at_sequence_length
from sim.compute.roofline import BACKWARD_FACTOR, OpTable, op_table

NAMES = ("fp32", "tf32", "tensor", "memory", "launch_us", "winograd")
# where the pull goes: typical fractions of peak, ~10 us per kernel, Winograd's 2.25x halfway taken
PRIOR = KernelCosts(0.6, 0.5, 0.4, 0.7, 10.0, 1.5)
PRIOR_WEIGHT = 0.1  # per shared constant, against a row's weight of 1 (in log units)
# Cauchy loss, scale 0.2 (in log units): rows more than ~20% off weigh less, so that figures of
# tuned implementations far from eager PyTorch do not drag the rest (chosen over squared and
# soft-L1 losses by the held-out error, docs/compute_model.md)
LOSS, LOSS_SCALE = "cauchy", 0.2
GPU_WEIGHT = 1.0  # per GPU factor: a GPU's constants move from the shared ones only as its rows demand
BOUNDS = (np.log([1e-3, 1e-3, 1e-3, 1e-2, 0.1, 1.0]), np.log([1.0, 1.0, 1.0, 1.0, 500.0, WINOGRAD_MAX]))
IMAGE_SIZES = {"resnet50": 224, "vgg16": 224, "wrn26_10": 32, "resnet32": 32}


@dataclass(frozen=True)
class Row:
    """One published figure, as a time per iteration (training) or per forward pass (inference)."""

    model: str
    gpu: str
    precision: str
    batch: int
    training: bool
    seconds: float
    source: str
    seq_len: int = 0  # a transformer's sequence length (0: the zoo's)


def published() -> pd.DataFrame:
    """The bundled table of published throughputs, as written."""
    with resources.files("sim.catalog.zoo").joinpath("published_throughput.csv").open() as f:
        return pd.read_csv(f, comment="#")


def usable(table: pd.DataFrame) -> list[Row]:
    """The rows that time a zoo model on one GPU of sim.catalog.gpus (at the zoo's image size; a transformer
    at any sequence length), turned into seconds per step of that GPU."""
    rows = []
    for r in table.itertuples(index=False):
        model = r.model if isinstance(r.model, str) else ""
        if not model or not _matches(model, r) or r.gpu not in FITTED_GPUS or _pcie(r) or _pretraining(r):
            continue
        if pd.isna(r.batch_per_gpu) or (not pd.isna(r.gpus) and int(r.gpus) != 1):
            continue  # per-GPU batch unknown, or several GPUs (their time includes communication)
        batch = int(r.batch_per_gpu)
        if not pd.isna(r.samples_per_s):
            seconds = batch / float(r.samples_per_s)
        elif not pd.isna(r.latency_ms):
            seconds = float(r.latency_ms) / 1e3
        else:
            continue
        seq_len = int(r.seq_len) if model in SEQUENCE_LENGTHS and not pd.isna(r.seq_len) else 0
        precision = _precision(r)
        rows.append(Row(model, r.gpu, precision, batch, r.phase == "training", seconds, str(r.source), seq_len))
    return rows


def measured() -> pd.DataFrame:
    """The bundled table of this project's measured training steps, as written."""
    with resources.files("sim.catalog.zoo").joinpath("measured_steps.csv").open() as f:
        return pd.read_csv(f, comment="#")


def measured_rows() -> list[Row]:
    """The measured steps as rows (forward + backward of one step, eager PyTorch)."""
    return [
        Row(r.model, r.gpu, r.precision, int(r.batch_per_gpu), True, float(r.step_s), f"{r.source}, {r.measured}")
        for r in measured().itertuples(index=False)
    ]


def shipped(rows: Sequence[Row]) -> pd.DataFrame:
    """Every row predicted with the shipped constants of its GPU (sim.catalog.gpus)."""
    return pd.DataFrame([_outcome(r, predict(r, get_gpu(r.gpu).costs)) for r in rows])


def _matches(model: str, r: Any) -> bool:
    size = r.image_size
    return not (model in IMAGE_SIZES and not pd.isna(size) and int(size) != IMAGE_SIZES[model])


def _pcie(r: Any) -> bool:
    """An A100 or H100 PCIe card: lower clocks and power than the SXM modules sim.catalog.gpus describes."""
    return r.gpu in ("A100", "H100") and "PCIe" in str(r.note)


def _pretraining(r: Any) -> bool:
    """BERT pre-training: its masked-LM and next-sentence heads are not in the zoo's BERT (and
    NVIDIA's pre-training scripts skip the padding), so the network differs from the zoo's."""
    return "pre-training" in str(r.table).lower()


def _precision(r: Any) -> str:
    """NVIDIA's NGC PyTorch containers turn on TF32 matrix products (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE),
    so their "FP32" on a GPU with TF32 is the `tf32` precision."""
    framework = str(r.framework)
    ngc_pytorch = "PyTorch" in framework and "NGC" in framework
    tf32 = r.precision == "fp32" and ngc_pytorch and get_gpu(r.gpu).tf32_tflops > 0
    return "tf32" if tf32 else str(r.precision)


def predict(row: Row, costs: KernelCosts) -> float:
    """The model's seconds for a row: forward (+ backward for training) of the zoo model."""
    table = _table(row.gpu, row.model, row.batch, row.precision, row.seq_len)
    times = table.seconds(costs)
    return float(times.sum() if row.training else times[~table.backward].sum())


@cache
def _table(gpu: str, model: str, batch: int, precision: str, seq_len: int) -> OpTable:
    return op_table(get_gpu(gpu), _layers(model, seq_len), batch, precision)


def _layers(model: str, seq_len: int) -> tuple[Layer, ...]:
    return layers_at_sequence_length(model, seq_len) if seq_len else get_model(model).layers


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

    def constants(x: np.ndarray, gpu: int) -> np.ndarray:
        return x[:k] + x[k * (gpu + 1) : k * (gpu + 2)]

    def residuals(x: np.ndarray) -> np.ndarray:
        errors = []
        for g, gpu in enumerate(gpus):
            costs = _costs(constants(x, g))
            errors += [math.log(predict(row, costs) / row.seconds) for row in by_gpu[gpu]]
        pulls = [PRIOR_WEIGHT * (x[:k] - prior), GPU_WEIGHT * x[k:]]
        return np.concatenate([np.asarray(errors), *pulls])

    start = np.concatenate([prior, np.zeros(k * len(gpus))])
    low = np.concatenate([BOUNDS[0], np.full(k * len(gpus), -np.inf)])
    high = np.concatenate([BOUNDS[1], np.full(k * len(gpus), np.inf)])
    result = least_squares(residuals, start, bounds=(low, high), xtol=1e-8, ftol=1e-8, loss=LOSS, f_scale=LOSS_SCALE)
    return {
        gpu: _costs(np.round(constants(result.x, g), 4), f"{len(by_gpu[gpu])} published rows")
        for g, gpu in enumerate(gpus)
    }


def training_rows() -> list[Row]:
    """The bundled training figures the constants are fitted to (what the simulator predicts:
    forward + backward of one iteration)."""
    return [r for r in usable(published()) if r.training]


def held_out(rows: Sequence[Row]) -> pd.DataFrame:
    """Every row predicted with the constants fitted to the rows of the *other* models."""
    out = []
    for model in sorted({r.model for r in rows}):
        costs = fit([r for r in rows if r.model != model])
        out += [_outcome(r, predict(r, costs[r.gpu])) for r in rows if r.model == model]
    return pd.DataFrame(out)


def flops_only_held_out(rows: Sequence[Row]) -> pd.DataFrame:
    """The model this one replaced, scored the same way: FLOPs at one efficiency per GPU and
    precision (the geometric mean over the other models' rows, else over the GPU's, else all)."""
    ideal = {r: _flops(r) / get_gpu(r.gpu).peak_flops(r.precision) for r in rows}
    out = []
    for model in sorted({r.model for r in rows}):
        others = [r for r in rows if r.model != model]
        for r in (r for r in rows if r.model == model):
            pool = [o for o in others if (o.gpu, o.precision) == (r.gpu, r.precision)]
            pool = pool or [o for o in others if o.gpu == r.gpu] or others
            efficiency = math.exp(np.mean([math.log(ideal[o] / o.seconds) for o in pool]))
            out.append(_outcome(r, ideal[r] / efficiency))
    return pd.DataFrame(out)


def _flops(row: Row) -> float:
    forward = sum(layer.forward_flops for layer in _layers(row.model, row.seq_len)) * row.batch
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

    def cell(value: Any) -> str:
        return f"{value:+.0%}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines)


def _errors(name: str, scored: pd.DataFrame, rows: str) -> str:
    errors = scored["error"].abs()
    return f"{name}: {len(scored)} {rows}, median |error| {errors.median():.1%}, max {errors.max():.1%}"


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sim.compute.fit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--measured", action="store_true", help="score the shipped constants on the measured steps")
    if parser.parse_args(argv).measured:
        scored = shipped(measured_rows())
        print(markdown(summary(scored)))
        print(_errors("shipped constants", scored, "measured rows"))
        return
    rows = training_rows()
    table = held_out(rows)
    print(markdown(summary(table)))
    for name, scored in (("roofline", table), ("FLOPs only", flops_only_held_out(rows))):
        print(_errors(name, scored, "rows held out by model"))
    for gpu, costs in fit(rows).items():
        values = ", ".join(f"{getattr(costs, name):.3g}" for name in NAMES)
        print(f'"{gpu}": KernelCosts({values}, source="{costs.source}"),')


if __name__ == "__main__":
    main()
