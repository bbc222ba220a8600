"""Published 1-to-8-GPU data-parallel training scaling (sim/catalog/published_scaling.csv) against the
simulator's: `syncsim fidelity --training`, docs/fidelity.md.

A pair is one model, system, precision and batch per GPU published at 1 and at 8 GPUs on one DGX
host. The simulator runs the zoo model on one host of 1 and of 8 such GPUs with DDP's ring all-reduce
(policy `ring`, 25 MB buckets) under the NCCL model and divides the throughputs. Only PyTorch rows of
zoo models at the zoo's sequence length are paired: syncsim's compute model is PyTorch's (eager, DDP);
TensorFlow rows (Horovod, XLA) scale by other mechanics.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd

from sim.api import simulate
from sim.catalog.zoo import MODEL_NAMES
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS

GPUS = 8
ITERATIONS = 6  # steady from the second iteration on; the summary's throughput spans them all
SYSTEM_GPUS = {"DGX A100": "A100", "DGX-1": "V100", "DGX-2": "V100", "DGX H100": "H100"}


@dataclass(frozen=True)
class ScalingPair:
    """One published 1-GPU and 8-GPU throughput of the same training setup."""

    model: str
    gpu: str
    system: str
    precision: str
    batch: int
    one: float  # samples/s on 1 GPU
    eight: float  # samples/s on 8 GPUs
    framework: str
    source: str

    @property
    def scaling(self) -> float:
        return self.eight / self.one


@cache
def table() -> pd.DataFrame:
    """The bundled table, as published."""
    with resources.files("sim.catalog").joinpath("published_scaling.csv").open() as f:
        return pd.read_csv(f)


def pairs() -> list[ScalingPair]:
    """The published 1- and 8-GPU rows that pair up (PyTorch, zoo models at the zoo's sequence length)."""
    rows = table()
    rows = rows[(rows["nodes"] == 1) & rows["framework"].str.startswith("PyTorch") & rows["model"].isin(MODEL_NAMES)]
    keys = ["model", "system", "precision", "batch_per_gpu", "seq_len", "framework"]
    out = []
    for key, group in rows.groupby(keys, dropna=False, sort=True):
        model, system, precision, batch, seq_len, framework = key
        if not pd.isna(seq_len) and seq_len != SEQUENCE_LENGTHS.get(model, seq_len):
            continue
        by_gpus = group.drop_duplicates("gpus").set_index("gpus")["samples_per_s"]  # a table repeated: its first
        if 1 in by_gpus.index and GPUS in by_gpus.index:
            gpu = next(g for prefix, g in SYSTEM_GPUS.items() if system.startswith(prefix))
            source = str(group["source"].iloc[0])
            out.append(
                ScalingPair(
                    model,
                    gpu,
                    system,
                    precision,
                    int(batch),
                    float(by_gpus[1]),
                    float(by_gpus[GPUS]),
                    framework,
                    source,
                )
            )
    return out


def pair_config(pair: ScalingPair, gpus: int, network_model: str = "nccl") -> dict[str, Any]:
    """One DGX-like host of `gpus` GPUs training `pair`'s model with DDP's ring all-reduce."""
    return {
        "name": "scaling",
        "iterations": ITERATIONS,
        "cluster": {"topology": "star", "hosts": 1, "gpus_per_host": gpus, "gpu": pair.gpu},
        "workload": {"model": pair.model, "batch_size": pair.batch, "precision": pair.precision},
        "policies": [{"name": "ring"}],
        "simulation": {"network_model": network_model, "trace": False},
    }


def simulated_scaling(pair: ScalingPair, network_model: str = "nccl") -> float:
    """8-GPU over 1-GPU throughput, simulated."""
    throughput = [
        float(simulate(pair_config(pair, g, network_model)).summary["throughput_samples_s"].iloc[0]) for g in (1, GPUS)
    ]
    return throughput[1] / throughput[0]


def scaling_table(network_model: str = "nccl") -> pd.DataFrame:
    """Every pair with its published and simulated scaling and the error (simulated / published - 1)."""
    out = []
    for pair in pairs():
        simulated = simulated_scaling(pair, network_model)
        out.append(
            {
                "model": pair.model,
                "system": pair.system,
                "precision": pair.precision,
                "batch": pair.batch,
                "published": round(pair.scaling, 3),
                "simulated": round(simulated, 3),
                "error": simulated / pair.scaling - 1,
                "framework": pair.framework,
                "source": pair.source,
            }
        )
    return pd.DataFrame(out)
