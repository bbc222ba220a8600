"""The published sharded-training rows of sim/catalog/published_fsdp.csv as syncsim configs, and their
published figures in tokens/s per GPU.

Every setting a row's source states is a column of the table (written before any run, its commit shows);
this module only turns the columns into a config: the row's cluster on one non-blocking switch (`star`),
the `fsdp` policy with the row's strategy, a decoder-only `workload.transformer` at the row's sequence
length, its local batch, precision, activation checkpointing and implementation. No constant here is
fitted to these rows: they are held out.

FSDP's unit is a gradient bucket in syncsim (policies/fsdp.py). The sources wrap one transformer block per
unit (torchtitan's `fully_shard` per block, fms-fsdp's LLaMABlock policy), or each of a decoder's linear
layers (the AWS GPT-3 runs), so `bucket_mb` is set to close one bucket per block or per linear.
"""

from __future__ import annotations

from dataclasses import asdict
from functools import cache
from importlib import resources
from typing import Any

import pandas as pd

from sim.catalog.zoo.llm import GPT3_175B, LLAMA3_8B, LLAMA3_70B, DecoderArchitecture, decoder_model
from sim.catalog.zoo.spec import ModelSpec
from sim.compute.buckets import BYTES_PER_VALUE, MB

# Llama 2 (Touvron et al. 2023, arXiv:2307.09288, Table 1 and section 2.2: RMSNorm, SwiGLU, rotary
# positions, grouped-query attention at 34B and 70B), with the MLP widths and the 32,000-token vocabulary
# of Meta's released config.json files and of fms-fsdp's LLaMAConfig (foundation-model-stack/fms-fsdp@
# 4ffb9bdfa30e957e339ccfbb617a589fd07c495e:fms_fsdp/utils/config_utils.py, whose 34b is the one this table's
# fms rows ran: 48 blocks, d 8192, 64 heads, 8 KV heads, MLP 22,016); no biases, an untied head.
_LLAMA2 = dict(
    vocab=32_000,
    seq_len=4096,
    max_positions=4096,
    mlp="swiglu",
    norm="rmsnorm",
    positions="rotary",
    tied_embeddings=False,
    bias=False,
)
ARCHITECTURES: dict[str, DecoderArchitecture] = {
    "llama3_8b": LLAMA3_8B,
    "llama3_70b": LLAMA3_70B,
    "gpt3_175b": GPT3_175B,
    "llama2_7b": DecoderArchitecture(layers=32, hidden=4096, heads=32, kv_heads=32, mlp_width=11008, **_LLAMA2),
    "llama2_13b": DecoderArchitecture(layers=40, hidden=5120, heads=40, kv_heads=40, mlp_width=13824, **_LLAMA2),
    "llama2_34b": DecoderArchitecture(layers=48, hidden=8192, heads=64, kv_heads=8, mlp_width=22016, **_LLAMA2),
    "llama2_70b": DecoderArchitecture(layers=80, hidden=8192, heads=64, kv_heads=8, mlp_width=28672, **_LLAMA2),
}
TOKENS_UNIT = "tokens/s/GPU"
TFLOPS_UNIT_PREFIX = "TFLOPS/GPU (Megatron-2 formula"
# Dense BF16/FP16 tensor-core peaks the sources divide by for MFU (torchtitan's get_peak_flops, the
# IBM blog: A100 312, H100 SXM 989 TFLOPS), the same figures as sim/catalog/gpus.py's.
SOURCE_PEAK_TFLOPS = {"A100": 312.0, "H100": 989.0}


@cache
def table() -> pd.DataFrame:
    """sim/catalog/published_fsdp.csv as written."""
    with resources.files("sim.catalog").joinpath("published_fsdp.csv").open() as f:
        return pd.read_csv(f, dtype={"sim_activation_checkpointing": "string"}, keep_default_na=False)


def in_scope(rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows the runner scores (in_scope yes), in the table's order."""
    rows = table() if rows is None else rows
    return rows[rows["in_scope"] == "yes"].reset_index(drop=True)


def architecture(row: pd.Series) -> DecoderArchitecture:
    """The row's model at the row's sequence length."""
    key = str(row["arch"])
    if key not in ARCHITECTURES:
        raise ValueError(f"arch: {key!r}; allowed: {', '.join(ARCHITECTURES)}")
    arch = ARCHITECTURES[key]
    seq = int(row["seq_len"])
    return DecoderArchitecture(**{**asdict(arch), "seq_len": seq, "max_positions": max(seq, arch.max_positions)})


def model(row: pd.Series) -> ModelSpec:
    return decoder_model(str(row["arch"]), architecture(row), source=str(row["source"]))


def transformer_section(arch: DecoderArchitecture) -> dict[str, Any]:
    """`workload.transformer` giving `arch` by its numbers."""
    return asdict(arch)


def unit_mb(row: pd.Series) -> float:
    """`bucket_mb` that closes one bucket per FSDP unit: per block, the block less its first norm (which
    then joins the next bucket, a few kilobytes); per linear, the smallest projection of a block."""
    spec, wire = model(row), BYTES_PER_VALUE[str(row["sim_gradient_precision"])]
    block = [layer for layer in spec.layers if layer.name.startswith("model.layers.0.")]
    if row["sim_unit"] == "block":
        return (sum(layer.params for layer in block) - block[0].params) * wire / MB
    if row["sim_unit"] == "linear":
        return min(layer.params for layer in block if layer.name.endswith("_proj")) * wire / MB
    raise ValueError(f"sim_unit: {row['sim_unit']!r}; allowed: block, linear")


def fsdp_policy(row: pd.Series) -> dict[str, Any]:
    strategy = str(row["sim_strategy"])
    if strategy == "hybrid":
        return {"name": "fsdp", "strategy": "hybrid", "shard_group": "host"}
    return {"name": "fsdp", "strategy": strategy}


def row_config(row: pd.Series, policies: list[dict[str, Any]], iterations: int) -> dict[str, Any]:
    """The syncsim config of one published row under `policies`."""
    checkpointing = str(row["sim_activation_checkpointing"]).lower()
    if checkpointing not in ("true", "false", "selective"):
        raise ValueError(f"sim_activation_checkpointing: {checkpointing!r}; allowed: true, false, selective")
    return {
        "name": str(row["id"]),
        "seed": 0,
        "iterations": iterations,
        "cluster": {
            "topology": "star",
            "hosts": int(row["hosts"]),
            "gpus_per_host": int(row["gpus_per_host"]),
            "gpu": str(row["gpu"]),
            "nic_gbps": float(row["nic_gbps"]),
            "nics_per_host": int(row["nics_per_host"]),
        },
        "workload": {
            "model": "transformer",
            "transformer": transformer_section(architecture(row)),
            "batch_size": int(row["local_batch"]),
            "precision": str(row["precision"]),
            "gradient_precision": str(row["sim_gradient_precision"]),
            "implementation": str(row["sim_implementation"]),
            "activation_checkpointing": "selective" if checkpointing == "selective" else checkpointing == "true",
            "bucket_mb": unit_mb(row),
            "optimizer_state": str(row["sim_optimizer_state"]),
        },
        "policies": policies,
        # the memory model's peak is a column of its own (published_fsdp.py); a row it says cannot fit still runs
        "simulation": {"trace": False, "check_memory": False},
    }


def megatron_flops(arch: DecoderArchitecture, batch: int) -> float:
    """FLOPs of one iteration of `batch` sequences by the Megatron-2 formula (Narayanan et al. 2021,
    arXiv:2104.04473, section 5.1: 96 B s l h^2 (1 + s/6h + V/16lh), which counts full recomputation),
    the formula the AWS post divides by its iteration time."""
    s, blocks, h, v = arch.seq_len, arch.layers, arch.hidden, arch.vocab
    return 96.0 * batch * s * blocks * h * h * (1 + s / (6 * h) + v / (16 * blocks * h))


def published_tokens_s(row: pd.Series) -> float:
    """The row's published throughput in tokens/s per GPU: as printed, or a TFLOPS/GPU figure turned into
    tokens by the FLOPs its formula counts per iteration (local batch x sequence length tokens)."""
    unit, value = str(row["published_unit"]), float(row["published_value"])
    if unit == TOKENS_UNIT:
        return value
    if unit.startswith(TFLOPS_UNIT_PREFIX):
        arch, batch = architecture(row), int(row["local_batch"])
        iteration_s = megatron_flops(arch, batch) / (value * 1e12)
        return batch * arch.seq_len / iteration_s
    raise ValueError(f"published_unit: {unit!r}; allowed: {TOKENS_UNIT}, {TFLOPS_UNIT_PREFIX} ...)")


def model_flops_per_token(row: pd.Series) -> float:
    """FLOPs per token as torchtitan's get_num_flop_per_token and the IBM blog (PaLM's MFU) count them:
    6 N + 12 l h q t, N every parameter, q the head width, t the sequence length (no recompute)."""
    arch = architecture(row)
    return 6.0 * model(row).params + 12.0 * arch.layers * arch.heads * arch.head_dim * arch.seq_len


def mfu_step_s(row: pd.Series) -> float | None:
    """The iteration time the row's published MFU implies (None where it gives none): its tokens per
    GPU and iteration at that fraction of the source's peak, by the source's FLOP count."""
    if row["published_mfu"] in ("", None) or pd.isna(row["published_mfu"]):
        return None
    mfu, peak = float(row["published_mfu"]), SOURCE_PEAK_TFLOPS[str(row["gpu"])] * 1e12
    arch, batch = architecture(row), int(row["local_batch"])
    if str(row["published_unit"]).startswith(TFLOPS_UNIT_PREFIX):
        return megatron_flops(arch, batch) / (mfu * peak)
    return batch * arch.seq_len * model_flops_per_token(row) / (mfu * peak)


def setup_markdown(rows: pd.DataFrame | None = None) -> str:
    """Every row's setup as published and as translated, one markdown table line each (docs/fsdp_fidelity.md)."""
    rows = table() if rows is None else rows
    lines = [
        "| id | scored | model | GPUs (hosts x GPUs) | network per host | seq x local batch | AC: published -> syncsim "
        "| compile -> implementation | published |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, r in rows.iterrows():
        nic = f"{r['nics_per_host']} x {r['nic_gbps']:g} Gb/s" + ("" if r["network_stated"] == "yes" else " (assumed)")
        translated = {"true": "full", "false": "none", "selective": "selective", "": "-"}
        sim_ac = translated[str(r["sim_activation_checkpointing"])]
        implementation = r["sim_implementation"] or "-"
        memory = f", {r['published_memory_gib']} GiB" if str(r["published_memory_gib"]) else ""
        unit = str(r["published_unit"]).split(" (")[0]
        lines.append(
            f"| {r['id']} | {r['in_scope']} | {r['model']} | {r['gpus']} ({r['hosts']} x {r['gpus_per_host']} "
            f"{r['gpu_as_published']}) | {nic} | {r['seq_len']} x {r['local_batch']} | {r['ac']} -> {sim_ac} "
            f"| {r['compile']} -> {implementation} | {r['published_value']:g} {unit}{memory} |"
        )
    return "\n".join(lines)
