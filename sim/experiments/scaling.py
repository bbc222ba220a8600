"""Published 1-to-8-GPU data-parallel training scaling (sim/catalog/published_scaling.csv) against the
simulator's: `syncsim fidelity`, docs/fidelity.md.

A pair is one model, system, precision and batch per GPU published at 1 and at 8 GPUs on one DGX
host. The simulator runs the zoo model on one host of 1 and of 8 such GPUs with DDP's ring all-reduce
(policy `ring`, 25 MB buckets) under the NCCL model and divides the steady throughputs. What is checked
is what 8 GPUs add to one: the compute is set to the published 1-GPU step (a FLOP efficiency solved for
it; how fast a GPU computes is the compute model's question, docs/compute_model.md), so the pair tests
the collectives, their overlap with backward and the host's input pipeline.

The input pipeline: NVIDIA's PyTorch ConvNets benchmarks read ImageNet JPEGs through PyTorch's
DataLoader (`data_backend: pytorch`) with a fixed number of worker processes per GPU (`workers` per
platform in their configs.yml). Their 8-GPU mixed-precision rows move the same ~130 images/s per
worker process on a DGX-1 (64 workers) and a DGX A100 (128): the host's CPUs are the limit. A pair's host
gets `workers x 8 x` the rate per worker that the *other* systems' 8-GPU rows reached (their
largest), so no pair is predicted from its own 8-GPU figure.

Only PyTorch rows of zoo models at the zoo's sequence length are paired: syncsim's compute model is
PyTorch's (eager, DDP); TensorFlow rows (Horovod, XLA) scale by other mechanics.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd

from sim.api import simulate
from sim.catalog.zoo import MODEL_NAMES
from sim.catalog.zoo.gnmt import GNMT_SEQ_LEN
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS
from sim.results.tables import steady_figures

GPUS = 8
ITERATIONS = 24
WARMUP = 8  # iterations left out of the throughput: the loaders start empty, the queues settle
SYSTEM_GPUS = {"DGX A100": "A100", "DGX-1": "V100", "DGX-2": "V100", "DGX H100": "H100"}
# DataLoader worker processes per GPU of NVIDIA's PyTorch ConvNets benchmarks, per platform
# (NVIDIA/DeepLearningExamples@097c7ff917b7c56246590b1246a8f5bd8957c534:
# PyTorch/Classification/ConvNets/configs.yml L13-L18; `data_backend: pytorch` L54)
LOADER_WORKERS = {"DGX-1": 8, "DGX-2": 8, "DGX A100": 16}
LOADED_MODELS = ("resnet50",)  # models whose rows read and decode images on the host's CPUs
PROBE_EFFICIENCY = 0.5
# The tokens a published tokens/s figure counts per zoo sample, which turn it into samples/s (the
# simulator's unit; a ratio of two rows needs none, pinning the compute to a base row does):
# Transformer-XL counts its targets, a segment's tgt_len per sequence (NVIDIA/DeepLearningExamples@
# 729963dd47e7c8bd462ad10bfac7a7b0b604e6dd:PyTorch/LanguageModeling/Transformer-XL/pytorch/train.py
# L526, L599); GNMT the source tokens plus the target's less one (the decoder's input), the zoo's
# pair being 50 a side (PyTorch/Translation/GNMT/seq2seq/train/trainer.py L172-L173, L252).
TOKENS_PER_SAMPLE = {
    "transformer_xl": SEQUENCE_LENGTHS["transformer_xl"],
    "transformer_xl_large": SEQUENCE_LENGTHS["transformer_xl_large"],
    "gnmt": 2 * GNMT_SEQ_LEN - 1,
}


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


def samples_per_s(rows: pd.DataFrame) -> pd.Series:
    """The rows' throughputs in zoo samples/s: as published, but tokens/s (the note says so) over
    TOKENS_PER_SAMPLE of the row's model."""
    tokens = rows["note"].fillna("").str.startswith("tokens/s")
    unknown = set(rows.loc[tokens, "model"]) - set(TOKENS_PER_SAMPLE)
    if unknown:
        raise ValueError(f"tokens/s rows of {', '.join(sorted(unknown))}: no tokens per sample known")
    per_sample = rows["model"].map(TOKENS_PER_SAMPLE).where(tokens, 1.0)
    return rows["samples_per_s"] / per_sample


def pairs() -> list[ScalingPair]:
    """The published 1- and 8-GPU rows that pair up (PyTorch, zoo models at the zoo's sequence length)."""
    rows = table()
    rows = rows[(rows["nodes"] == 1) & rows["framework"].str.startswith("PyTorch") & rows["model"].isin(MODEL_NAMES)]
    rows = rows.assign(samples_per_s=samples_per_s(rows))
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


def _system(pair: ScalingPair) -> str:
    return next(prefix for prefix in SYSTEM_GPUS if pair.system.startswith(prefix))


def loader_rate(pair: ScalingPair, others: list[ScalingPair]) -> float | None:
    """Samples/s `pair`'s host prepares with 8 GPUs: its DataLoader workers times the largest rate per
    worker that the 8-GPU rows of `others` on *other* systems reached (None: the model reads no images
    on the host, or no other system published one)."""
    if pair.model not in LOADED_MODELS or _system(pair) not in LOADER_WORKERS:
        return None
    rates = [
        other.eight / (LOADER_WORKERS[_system(other)] * GPUS)
        for other in others
        if other.model == pair.model and _system(other) != _system(pair) and _system(other) in LOADER_WORKERS
    ]
    return LOADER_WORKERS[_system(pair)] * GPUS * max(rates) if rates else None


def pair_config(
    pair: ScalingPair,
    gpus: int,
    network_model: str = "nccl",
    efficiency: float = PROBE_EFFICIENCY,
    input_samples_s: float | None = None,
) -> dict[str, Any]:
    """One DGX-like host of `gpus` GPUs training `pair`'s model with DDP's ring all-reduce."""
    workload = {"model": pair.model, "batch_size": pair.batch, "precision": pair.precision, "efficiency": efficiency}
    return {
        "name": "scaling",
        "iterations": ITERATIONS,
        "cluster": {"topology": "star", "hosts": 1, "gpus_per_host": gpus, "gpu": pair.gpu},
        "workload": {**workload, "input_samples_s": input_samples_s},
        "policies": [{"name": "ring"}],
        "simulation": {"network_model": network_model, "trace": False},
    }


def steady_throughput(config: dict[str, Any]) -> float:
    """Samples/s of `config`'s one policy over iterations WARMUP onwards."""
    (policy,) = config["policies"]
    result = simulate(config)
    return steady_figures(result.iterations, WARMUP)[policy.get("label", policy["name"])]["throughput_samples_s"]


def simulated_scaling(pair: ScalingPair, input_samples_s: float | None = None, network_model: str = "nccl") -> float:
    """8-GPU over 1-GPU steady throughput, simulated with the published 1-GPU step time."""
    probe = steady_throughput(pair_config(pair, 1, network_model))
    efficiency = PROBE_EFFICIENCY * pair.one / probe  # compute time is FLOPs / efficiency: the published step
    throughput = [
        steady_throughput(pair_config(pair, g, network_model, efficiency, input_samples_s)) for g in (1, GPUS)
    ]
    return throughput[1] / throughput[0]
