"""Published sharded-training throughput (sim/catalog/published_fsdp.csv) against the simulator's:
torchtitan's Llama 2/3 tables on A100s and H100s, fms-fsdp's Llama 2 tables, the AWS GPT-3 175B runs.

Each in-scope row is simulated as its setup says (published_fsdp_setups.py): the `fsdp` policy on the row's
GPUs and network, the model at the row's sequence length and local batch, the default compute model (no
`workload.efficiency`). Every row is held out: no constant of syncsim was fitted to any of them, and none
is fitted here. Beside the prediction, two null models:

- **compute only**: the same compute model with no communication at all (policy `no_sync`), perfect
  scaling from one GPU. Its error is the compute model's held-out error on these models.
- **alpha-beta, no overlap**: that compute time plus FSDP's collectives as plain rings, none of them
  overlapped with compute: per unit two all-gathers and a reduce-scatter (every row reshards after
  forward), each (g - 1)/g of the unit's bytes at the ring's bottleneck rate plus (g - 1) link
  latencies; HSDP adds the 1/g shard's all-reduce across hosts.

    python -m sim.experiments.published_fsdp [--out scored.csv] [--iterations N] [--setups]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import pandas as pd

from sim.api import simulate
from sim.catalog.gpus import get_gpu
from sim.compute.buckets import BYTES_PER_VALUE, MB
from sim.experiments.published_fsdp_setups import (
    fsdp_policy,
    in_scope,
    mfu_step_s,
    model,
    published_tokens_s,
    row_config,
    setup_markdown,
    unit_mb,
)
from sim.results.tables import steady_figures

ITERATIONS = 4  # an FSDP iteration repeats the last: nothing carries over but the queues' order
WARMUP = 1  # the first iteration's forward gathers start cold
GIB = 2.0**30
GBIT = 1e9 / 8  # bytes/s in one Gbit/s
LINK_LATENCY_S = 5e-6  # the config's default link_latency_us, which row_config keeps


def ring_bytes_per_s(row: pd.Series, across_hosts: bool) -> float:
    """A ring's bottleneck rate per rank: inside a host a GPU's NVLink (the catalog's per-direction
    figure); across hosts a host's NICs together, which every ring hop between two hosts shares."""
    if across_hosts:
        return float(row["nic_gbps"]) * int(row["nics_per_host"]) * GBIT
    return get_gpu(str(row["gpu"])).intra_host_gbps * GBIT


def alpha_beta_comm_s(row: pd.Series) -> float:
    """Seconds of FSDP communication per iteration with no overlap, by the ring formulas."""
    spec = model(row)
    nbytes = spec.params * BYTES_PER_VALUE[str(row["sim_gradient_precision"])]
    gpus, per_host = int(row["gpus"]), int(row["gpus_per_host"])
    hosts = gpus // per_host
    hybrid = row["sim_strategy"] == "hybrid"
    g = per_host if hybrid else gpus
    rate = ring_bytes_per_s(row, across_hosts=not hybrid and hosts > 1)
    units = max(1, round(nbytes / (unit_mb(row) * MB)))
    collectives = 3  # all-gather for forward, again for backward, reduce-scatter
    seconds = collectives * ((g - 1) / g * nbytes / rate + (g - 1) * LINK_LATENCY_S * units)
    if hybrid and hosts > 1:  # the shard's all-reduce across the hosts: 2 (r - 1)/r of it
        seconds += 2 * (hosts - 1) / hosts * (nbytes / g) / ring_bytes_per_s(row, across_hosts=True)
    return seconds


def simulate_row(row: pd.Series, iterations: int = ITERATIONS) -> dict[str, Any]:
    """Predicted and null tokens/s per GPU of one row, and the compute-only iteration time."""
    config = row_config(row, [fsdp_policy(row), {"name": "no_sync"}], iterations)
    result = simulate(config)
    figures = steady_figures(result.iterations, WARMUP)
    gpus, seq = int(row["gpus"]), int(row["seq_len"])
    tokens = int(row["local_batch"]) * seq  # one GPU's tokens an iteration
    per_gpu = {policy: figures[policy]["throughput_samples_s"] / gpus * seq for policy in ("fsdp", "no_sync")}
    compute_s = figures["no_sync"]["mean_iteration_s"]
    return {
        "predicted": per_gpu["fsdp"],
        "compute_only": per_gpu["no_sync"],
        "alpha_beta": tokens / (compute_s + alpha_beta_comm_s(row)),
        "compute_s": compute_s,
        "iteration_s": figures["fsdp"]["mean_iteration_s"],
        "memory_gib": peak_gib(result.memory, "fsdp"),
    }


def peak_gib(memory: pd.DataFrame, policy: str) -> float:
    """The memory model's peak per GPU of `policy` (sim/memory: allocated bytes, at the start of backward)."""
    rows = memory[memory["policy"] == policy] if len(memory) else memory
    return float(rows["peak_bytes"].iloc[0]) / GIB if len(rows) else float("nan")


ZERO_STATE_BYTES_PER_PARAM = 16  # ZeRO (Rajbhandari et al. 2020, arXiv:1910.02054, section 3.1): 2 + 2 + 12 bytes


def zero_state_gib(row: pd.Series) -> float:
    """The memory null: ZeRO's model states under mixed-precision Adam, 16 bytes a parameter, sharded over
    every GPU (its stage 3), with no activations and no buffers."""
    return ZERO_STATE_BYTES_PER_PARAM * model(row).params / int(row["gpus"]) / GIB


def full_recompute_memory_gib(row: pd.Series) -> float:
    """The memory model's peak for `row` with every block recomputed: where the published run recomputed
    selectively, this is the least any checkpointing of its blocks could hold."""
    full = row.copy()
    full["sim_activation_checkpointing"] = "true"
    return peak_gib(simulate(row_config(full, [fsdp_policy(full)], 2)).memory, "fsdp")


def scored(rows: pd.DataFrame | None = None, iterations: int = ITERATIONS) -> pd.DataFrame:
    """One line per in-scope row: published and predicted tokens/s per GPU, the nulls, their errors."""
    out = []
    for _, row in in_scope(rows).iterrows():
        published = published_tokens_s(row)
        sim = simulate_row(row, iterations)
        mfu_s = mfu_step_s(row)
        published_gib = float(row["published_memory_gib"]) if str(row["published_memory_gib"]) else None
        out.append(
            {
                "id": row["id"],
                "gpus": int(row["gpus"]),
                "gpu": row["gpu"],
                "published": published,
                "predicted": sim["predicted"],
                "error": sim["predicted"] / published - 1,
                "compute_only": sim["compute_only"],
                "compute_only_error": sim["compute_only"] / published - 1,
                "alpha_beta": sim["alpha_beta"],
                "alpha_beta_error": sim["alpha_beta"] / published - 1,
                # the compute model against the iteration the published MFU implies (time ratio - 1)
                "compute_vs_mfu_step": None if mfu_s is None else sim["compute_s"] / mfu_s - 1,
                "held_out": row["held_out"],
                "published_memory_gib": published_gib,
                "predicted_memory_gib": sim["memory_gib"],
                "memory_error": sim["memory_gib"] / published_gib - 1 if published_gib else float("nan"),
                "zero_state_gib": zero_state_gib(row),
                "zero_state_error": zero_state_gib(row) / published_gib - 1 if published_gib else float("nan"),
                "memory_full_ac_gib": full_recompute_memory_gib(row)
                if published_gib and str(row["ac"]).startswith("selective")
                else float("nan"),
            }
        )
    return pd.DataFrame(out)


def summary(table: pd.DataFrame) -> str:
    """Median and worst |error| of the prediction and of each null."""
    lines = []
    for column, name in (
        ("error", "syncsim fsdp"),
        ("compute_only_error", "null: compute only (no communication)"),
        ("alpha_beta_error", "null: alpha-beta rings, no overlap"),
    ):
        errors = table[column].abs()
        by_gpu = ", ".join(f"{gpu} {e.median():.1%}" for gpu, e in errors.groupby(table["gpu"], sort=True))
        lines.append(f"{name}: median |error| {errors.median():.1%} ({by_gpu}), worst {errors.max():.1%}")
    for column, name in (("memory_error", "peak memory"), ("zero_state_error", "null: ZeRO's 16 B/param states")):
        memory = table[column].dropna().abs()
        if len(memory):
            worst = memory.max()
            lines.append(f"{name} ({len(memory)} rows): median |error| {memory.median():.1%}, worst {worst:.1%}")
    mfu = table["compute_vs_mfu_step"].dropna().abs()
    lines.append(f"compute model vs MFU-derived iteration ({len(mfu)} rows): median |error| {mfu.median():.1%}")
    lines.append(f"{len(table)} rows, all held out (no constant fitted to them)")
    return "\n".join(lines)


THROUGHPUT_COLUMNS = ("id", "gpus", "gpu", "published", "predicted", "error", "compute_only", "compute_only_error")
THROUGHPUT_COLUMNS += ("alpha_beta", "alpha_beta_error", "compute_vs_mfu_step")
MEMORY_COLUMNS = ("id", "published_memory_gib", "predicted_memory_gib", "memory_error", "memory_full_ac_gib")
MEMORY_COLUMNS += ("zero_state_gib", "zero_state_error")


def shown(table: pd.DataFrame, columns: Sequence[str]) -> str:
    """`columns` of `table` as text: tokens/s whole, GiB to a tenth, errors as signed percentages."""
    out = table[list(columns)].copy()
    for column in out.columns:
        if column.endswith("error") or column == "compute_vs_mfu_step":
            out[column] = out[column].map(lambda v: "" if pd.isna(v) else f"{v:+.1%}")
        elif column.endswith("_gib"):
            out[column] = out[column].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
        elif out[column].dtype.kind == "f":
            out[column] = out[column].round().astype(int)
    return out.to_string(index=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the scored rows to this CSV")
    parser.add_argument("--iterations", type=int, default=ITERATIONS, help="simulated iterations per row")
    parser.add_argument("--setups", action="store_true", help="print every row's setup as a markdown table and stop")
    args = parser.parse_args(argv)
    if args.setups:
        print(setup_markdown())
        return 0
    if args.iterations <= WARMUP:
        print(f"--iterations: {args.iterations}; allowed: more than {WARMUP}", file=sys.stderr)
        return 2
    table = scored(iterations=args.iterations)
    print(shown(table, THROUGHPUT_COLUMNS))
    print()
    print(shown(table[table["published_memory_gib"].notna()], MEMORY_COLUMNS))
    print(summary(table))
    if args.out:
        table.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
