"""memory.csv: each policy's predicted peak memory per GPU, by term (sim/memory, docs/memory.md)."""

from __future__ import annotations

import pandas as pd

from sim.catalog.gpus import GpuSpec
from sim.engine.run import PolicyRun
from sim.memory import capacity_bytes, largest_micro_batch

MEMORY_COLUMNS = (
    "policy",
    "gpu",
    "capacity_bytes",
    "parameters_bytes",
    "gradients_bytes",
    "optimizer_bytes",
    "activations_bytes",
    "buffers_bytes",
    "peak_bytes",
    "fits",
    "largest_micro_batch",
    "activations_known",
    "activations_source",
)


def memory_frame(runs: list[PolicyRun], gpu: GpuSpec, batch_size: int) -> pd.DataFrame:
    """A row per run that has a prediction."""
    capacity = capacity_bytes(gpu)
    rows = []
    for run in runs:
        terms = run.memory
        if terms is None:
            continue
        largest = largest_micro_batch(terms, batch_size, capacity)
        row: dict[str, object] = {"policy": run.label, "gpu": gpu.name, "capacity_bytes": capacity}
        row.update({f"{name}_bytes": value for name, value in terms.terms().items()})
        row.update(
            peak_bytes=terms.total,
            fits=terms.total <= capacity,
            largest_micro_batch=float("nan") if largest is None else float(largest),
            activations_known=terms.activations_known,
            activations_source=terms.activations_source,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=list(MEMORY_COLUMNS))
