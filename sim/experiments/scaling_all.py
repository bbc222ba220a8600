"""Every row of sim/catalog/published_scaling.csv the simulator can express, scored against its group's
base row, beside the null model "perfect linear scaling".

A group is one model, system, precision, batch per GPU, sequence length and framework. Its base is its
1-GPU row, or where it has none its smallest GPU count (the one-node 8-GPU row of a multi-node table);
every other row of the group is scored: published scaling = its throughput over the base's, predicted
= the simulated ratio with the compute pinned to the published base step (sim/experiments/scaling.py's
method, on the setup written down in sim/experiments/scaling_setups.py, including where a benchmark's
training code departs from plain DDP), null = N / N_base.

    python -m sim.experiments.scaling_all [--out scored.csv] [--unexpressible-out rows.csv] [--rows N]
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim.catalog.gpus import get_gpu
from sim.catalog.zoo import MODEL_NAMES, get_model
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS
from sim.compute.buckets import BYTES_PER_VALUE, MB
from sim.experiments.scaling import (
    GPUS,
    ITERATIONS,
    PROBE_EFFICIENCY,
    TOKENS_PER_SAMPLE,
    WARMUP,
    ScalingPair,
    loader_rate,
    pair_config,
    pairs,
    samples_per_s,
    steady_throughput,
    table,
)
from sim.experiments.scaling_setups import (
    BUCKET_MB,
    POLICY,
    accumulation_steps,
    cluster_section,
    hosts_and_gpus,
    optimizer_ms,
    system_setup,
    training_setup,
)

GROUP = ["model", "system", "precision", "batch_per_gpu", "seq_len", "framework"]
COMPUTE_MODEL_FRAMEWORK = "PyTorch"  # syncsim's compute model is PyTorch's eager DDP (docs/compute_model.md)
PIN_STEPS = 6  # fixed-point steps pinning the simulated base throughput to the published one
PIN_TOLERANCE = 1e-4
NULL_OFF = 0.05  # the subset where perfect linear scaling is off by more than this
WITHIN = 0.10


@dataclass(frozen=True)
class ScoredRow:
    """A published N-GPU row and its group's base row."""

    index: int  # position in published_scaling.csv (0 = the first row under the header)
    base_index: int
    model: str
    system: str
    precision: str
    batch: int
    seq_len: int | None
    framework: str
    source: str
    table: str
    nodes: int
    gpus: int
    samples_s: float
    base_nodes: int
    base_gpus: int
    base_samples_s: float

    @property
    def published(self) -> float:
        return self.samples_s / self.base_samples_s

    @property
    def null(self) -> float:
        """Perfect linear scaling's prediction."""
        return self.gpus / self.base_gpus

    def pair(self) -> ScalingPair:
        """As scaling.py's pair: `one` the base's throughput, `eight` this row's."""
        gpu = system_setup(self.system).gpu
        return ScalingPair(
            self.model,
            gpu,
            self.system,
            self.precision,
            self.batch,
            self.base_samples_s,
            self.samples_s,
            self.framework,
            self.source,
        )


def source_path(source: str) -> str:
    """The path inside the repository of a `source` cell (owner/name@commit:path)."""
    return source.split(":", 1)[-1]


def row_reason(row: pd.Series) -> str | None:
    """Why one published row cannot be expressed on its own (None: it can)."""
    model = str(row["model"])
    if model not in MODEL_NAMES:
        return f"no zoo model {model!r}"
    framework = str(row["framework"])
    if not framework.startswith(COMPUTE_MODEL_FRAMEWORK):
        return f"{framework.split(' (')[0]}: the compute model is PyTorch's eager DDP, not Horovod/XLA graphs"
    if not pd.isna(row["seq_len"]) and int(row["seq_len"]) != SEQUENCE_LENGTHS.get(model, int(row["seq_len"])):
        return f"sequence length {int(row['seq_len'])}, the zoo's {model} has {SEQUENCE_LENGTHS[model]}"
    try:
        hosts_and_gpus(str(row["system"]), int(row["nodes"]), int(row["gpus"]))
    except ValueError as error:
        return str(error)
    return None


def classify(rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every row with its `role` (scored, base, not expressible), `base_index` and `reason`."""
    rows = (table() if rows is None else rows).reset_index(drop=True)
    out = rows.assign(role="not expressible", base_index=pd.NA, reason=[row_reason(r) for _, r in rows.iterrows()])
    expressible = out[out["reason"].isna()]
    for _, group in expressible.groupby(GROUP, dropna=False, sort=False):
        ones = group[group["gpus"] == 1]
        base = int((ones if len(ones) else group[group["gpus"] == group["gpus"].min()]).index[0])
        base_gpus = int(out.at[base, "gpus"])
        for index in group.index:
            if index == base:
                lone = len(group) == 1
                out.loc[index, ["role", "reason"]] = (
                    ("not expressible", "its group has no other GPU count to score against") if lone else ("base", None)
                )
            elif int(out.at[index, "gpus"]) == base_gpus:
                out.loc[index, "reason"] = f"repeats its group's base GPU count {base_gpus} (row {base})"
            else:
                out.loc[index, ["role", "base_index"]] = ("scored", base)
    return out


def scored_rows(rows: pd.DataFrame | None = None) -> list[ScoredRow]:
    """The rows to score, each with its base, in the table's order."""
    out = classify(rows)
    rate = samples_per_s(out)  # tokens/s rows in zoo samples/s
    scored = []
    for index, row in out[out["role"] == "scored"].iterrows():
        base = out.loc[int(row["base_index"])]
        seq = None if pd.isna(row["seq_len"]) else int(row["seq_len"])
        scored.append(
            ScoredRow(
                int(index),  # type: ignore[arg-type]
                int(row["base_index"]),
                str(row["model"]),
                str(row["system"]),
                str(row["precision"]),
                int(row["batch_per_gpu"]),
                seq,
                str(row["framework"]),
                str(row["source"]),
                str(row["table"]),
                int(row["nodes"]),
                int(row["gpus"]),
                float(rate[index]),
                int(base["nodes"]),
                int(base["gpus"]),
                float(rate[int(row["base_index"])]),
            )
        )
    return scored


def not_expressible(rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows that are neither scored nor a base, each with its reason."""
    out = classify(rows)
    out = out[out["role"] == "not expressible"]
    columns = ["model", "system", "nodes", "gpus", "precision", "batch_per_gpu", "seq_len", "framework"]
    return out[columns + ["reason"]].assign(source=out["source"].map(source_path))


def simulated_batch(row: ScoredRow) -> int:
    """Zoo samples per GPU per micro-batch: the published batch, or where the source's training setup gives
    its samples' mean tokens (a GNMT sentence pair) the zoo samples that carry as many tokens, so a
    simulated micro-batch lasts what the real one did at the published tokens/s."""
    tokens = training_setup(source_path(row.source)).sample_tokens
    if tokens is None:
        return row.batch
    return max(1, round(row.batch * tokens / TOKENS_PER_SAMPLE[row.model]))


def training_section(row: ScoredRow, gpus: int) -> dict[str, Any]:
    """The workload keys of `row`'s training setup on `gpus` GPUs (scaling_setups.TRAINING): bucket size,
    overlap with backward, micro-batches per optimizer step and that step's time."""
    train = training_setup(source_path(row.source))
    bucket_mb = BUCKET_MB
    if train.bucket_values is not None:  # apex DDP counts its buckets in values of the gradients' type
        wire = "fp16" if row.precision in ("fp16", "bf16") else "fp32"
        bucket_mb = train.bucket_values * BYTES_PER_VALUE[wire] / MB
    update_ms = 0.0
    if train.update_bytes_per_param:
        memory = get_gpu(system_setup(row.system).gpu).costs.memory  # the compute model's fitted share of it
        update_ms = optimizer_ms(train, get_model(row.model).params, row.system, memory)
    steps = accumulation_steps(train, row.batch, gpus)
    if WARMUP % steps or (ITERATIONS - WARMUP) % steps:  # the throughput must span whole optimizer steps
        raise ValueError(
            f"accumulation over {steps} micro-batches: {WARMUP} and {ITERATIONS} iterations are not multiples"
        )
    return {
        "bucket_mb": bucket_mb,
        "overlap_backward": train.overlap_backward,
        "accumulation_steps": steps,
        "optimizer_ms": update_ms,
    }


def setup(row: ScoredRow, gpus: int | None = None, nodes: int | None = None) -> dict[str, Any]:
    """The simulated setup of `row` (or of its base with the base's `gpus` and `nodes`), flat."""
    gpus = row.gpus if gpus is None else gpus
    cluster = cluster_section(row.system, row.nodes if nodes is None else nodes, gpus)
    return {**cluster, "policy": POLICY, **training_section(row, gpus), "precision": row.precision}


def setup_table(rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """The setup of every scored row and its base, one line per scored row."""
    out = []
    for row in scored_rows(rows):
        base = setup(row, row.base_gpus, row.base_nodes)
        out.append(
            {
                "row": row.index,
                **setup(row),
                "base_hosts": base["hosts"],
                "base_gpus_per_host": base["gpus_per_host"],
                "base_accumulation_steps": base["accumulation_steps"],
            }
        )
    return pd.DataFrame(out)


def row_config(
    row: ScoredRow, gpus: int, nodes: int, efficiency: float, input_samples_s: float | None, network_model: str
) -> dict[str, Any]:
    """The config of `row`'s model on `gpus` GPUs over `nodes` hosts of its system."""
    config = pair_config(row.pair(), gpus, network_model, efficiency, input_samples_s)
    config["cluster"] = cluster_section(row.system, nodes, gpus)
    config["workload"].update(training_section(row, gpus), batch_size=simulated_batch(row))
    config["policies"] = [{"name": POLICY}]
    return config


def pinned_efficiency(row: ScoredRow, network_model: str = "nccl") -> float:
    """The FLOP efficiency at which the base setup's simulated throughput is the published base's (loaders
    left out, as in scaling.py): a fixed point, since exposed communication does not scale with it."""
    efficiency = PROBE_EFFICIENCY
    for _ in range(PIN_STEPS):
        config = row_config(row, row.base_gpus, row.base_nodes, efficiency, None, network_model)
        step = row.base_samples_s / steady_throughput(config)
        efficiency *= step
        if abs(step - 1) < PIN_TOLERANCE:
            break
    return efficiency


def simulated_scaling(row: ScoredRow, network_model: str = "nccl", efficiency: float | None = None) -> float:
    """Simulated N-GPU over base throughput, with the compute pinned to the published base step and the
    host's loaders limited as in scaling.py (ResNet-50's DataLoader workers)."""
    efficiency = pinned_efficiency(row, network_model) if efficiency is None else efficiency
    loader = loader_rate(row.pair(), pairs())
    base = steady_throughput(row_config(row, row.base_gpus, row.base_nodes, efficiency, loader, network_model))
    scaled = steady_throughput(row_config(row, row.gpus, row.nodes, efficiency, loader, network_model))
    return scaled / base


def score(rows: Sequence[ScoredRow], network_model: str = "nccl") -> pd.DataFrame:
    """Each row's published, simulated and null scaling and both errors (predicted / published - 1)."""
    efficiencies: dict[int, float] = {}  # one pinning per base, in memory only
    out = []
    for row in rows:
        if row.base_index not in efficiencies:
            efficiencies[row.base_index] = pinned_efficiency(row, network_model)
        simulated = simulated_scaling(row, network_model, efficiencies[row.base_index])
        out.append(
            {
                "row": row.index,
                "base_row": row.base_index,
                "model": row.model,
                "system": row.system,
                "precision": row.precision,
                "batch": row.batch,
                "seq_len": row.seq_len if row.seq_len is not None else pd.NA,
                "nodes": row.nodes,
                "gpus": row.gpus,
                "base_gpus": row.base_gpus,
                "published": round(row.published, 3),
                "simulated": round(simulated, 3),
                "error": simulated / row.published - 1,
                "null": round(row.null, 3),
                "null_error": null_error(row),
                "source": source_path(row.source),
            }
        )
    return pd.DataFrame(out).astype({"seq_len": "Int64"}) if out else pd.DataFrame(out)


def one_host_pairs(network_model: str = "nccl") -> pd.DataFrame:
    """`score` of the rows that go from 1 to 8 GPUs on one host (scaling.py's pairs), each with its
    source's training setup and its host's loaders: what `syncsim fidelity` prints."""
    rows = [r for r in scored_rows() if (r.base_nodes, r.base_gpus, r.nodes, r.gpus) == (1, 1, 1, GPUS)]
    every = pairs()
    scored = score(rows, network_model)
    loaders = [loader_rate(r.pair(), every) for r in rows]
    return scored.assign(loader_samples_s=[round(v) if v is not None else pd.NA for v in loaders])


def null_error(row: ScoredRow) -> float:
    """Perfect linear scaling's error on `row`: (N / N_base) / published scaling - 1."""
    return row.null / row.published - 1


def summary(scored: pd.DataFrame) -> pd.DataFrame:
    """Per source and overall: rows, syncsim's and the null model's median |error| and share within 10%."""

    def figures(part: pd.DataFrame) -> dict[str, Any]:
        ours, null = part["error"].abs(), part["null_error"].abs()
        return {
            "rows": len(part),
            "syncsim median |err|": ours.median(),
            "syncsim within 10%": (ours <= WITHIN).mean(),
            "syncsim worst": ours.max(),
            "null median |err|": null.median(),
            "null within 10%": (null <= WITHIN).mean(),
        }

    lines = {source: figures(part) for source, part in scored.groupby("source", sort=True)}
    lines["all"] = figures(scored)
    return pd.DataFrame.from_dict(lines, orient="index")


def report(scored: pd.DataFrame, unexpressible: pd.DataFrame) -> str:
    """The printed tables: every scored row, the summaries (all rows; where the null is off by > 5%),
    and the unexpressible rows counted by reason."""
    percent = {c: (lambda v: f"{v:+.1%}") for c in ("error", "null_error")}
    shown = scored.drop(columns=["source"]).to_string(index=False, formatters=percent)  # type: ignore[arg-type]
    ratio = lambda v: f"{v:.1%}" if v <= 1.0 else f"{v:.0%}"  # noqa: E731
    off = scored[scored["null_error"].abs() > NULL_OFF]
    reasons = unexpressible.groupby(["reason", "source"]).size().rename("rows").reset_index()
    parts = [
        shown,
        "\nBy source, every scored row:",
        summary(scored).to_string(float_format=ratio),
        f"\nWhere perfect linear scaling is off by more than {NULL_OFF:.0%}:",
        summary(off).to_string(float_format=ratio) if len(off) else "(no such row)",
        f"\nNot expressible ({len(unexpressible)} rows):",
        reasons.to_string(index=False),
    ]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    from sim.files import atomic_write

    parser = argparse.ArgumentParser(prog="python -m sim.experiments.scaling_all", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the scored rows to this CSV file")
    parser.add_argument("--unexpressible-out", help="write the rows not expressible, with reasons, to this CSV file")
    parser.add_argument("--rows", type=int, help="score only the first ROWS scorable rows (a quick check)")
    args = parser.parse_args(argv)
    if args.rows is not None and args.rows < 1:
        parser.error(f"--rows must be at least 1, got {args.rows}")
    rows = scored_rows()
    scored = score(rows if args.rows is None else rows[: args.rows])
    unexpressible = not_expressible()
    for flag, path, text in (
        ("--out", args.out, scored.to_csv(index=False)),
        ("--unexpressible-out", args.unexpressible_out, unexpressible.to_csv(index_label="row")),
    ):
        if path:
            try:
                atomic_write(path, text)
            except OSError as error:
                print(f"error: {flag} {path}: {error.strerror or error}", file=sys.stderr)
                return 2
    with pd.option_context("display.width", 250, "display.max_rows", None, "display.max_colwidth", 90):
        print(report(scored, unexpressible))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
