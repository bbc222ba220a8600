"""`syncsim validate CONFIG`: calibrate, then run every policy real and simulated, and compare.

Steps: (1) measure the cluster and write `calibrated.yaml` (the config with fitted links, latency,
compute time and the model's real gradient size); (2) run that config on the real backend; (3)
simulate it; (4) compare, policy by policy, the mean iteration time (throughput for policies with
a shared budget, ASP and SSP, whose iterations are not in lockstep), after dropping `warmup`
iterations on both sides (connection set-up and allocator warm-up have no simulated counterpart).
By default the cluster is an emulated one built from the config (`syncsim emulate`, root needed).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from policies.registry import create
from real.launch import launch
from sim.api import simulate
from sim.config import load_config
from sim.errors import SyncsimError

TOLERANCE = 0.10  # mean iteration time, synchronous policies
TOLERANCE_SHARED = 0.15  # throughput, shared-budget (asynchronous) policies


class ValidationError(SyncsimError):
    """A step of the validation could not run (the message says which)."""


@dataclass
class Validation:
    table: pd.DataFrame  # one row per policy
    out: Path

    @property
    def passed(self) -> bool:
        return bool(self.table["within"].all())


def validate(
    config_path: Path,
    out: Path,
    tag: Optional[str] = None,
    timeout_s: float = 120.0,
    warmup: int = 3,
    queue: str = "fair",
) -> Validation:
    """`queue`: the links' discipline when the emulation is built here (`tag` None)."""
    out.mkdir(parents=True, exist_ok=True)
    calibrated = out / "calibrated.yaml"
    with _emulation(config_path, tag, queue) as running:
        outcome = launch(config_path, calibrated, timeout_s=timeout_s, emulation=running, calibrate=True)
        if not outcome.ok:
            raise ValidationError(f"calibration failed: {outcome.failed}")
        outcome = launch(calibrated, out / "real", timeout_s=timeout_s, emulation=running)
        if not outcome.ok:
            raise ValidationError(f"the real run failed: {outcome.failed}; partial results in {out / 'real'}")
    simulate(calibrated).write(out / "sim", plot=False)
    table = compare(calibrated, out / "sim", out / "real", warmup)
    table.to_csv(out / "validation.csv", index=False)
    (out / "validation.md").write_text(markdown(table))
    plot(table, out / "validation.png")
    return Validation(table, out)


@contextlib.contextmanager
def _emulation(config_path: Path, tag: Optional[str], queue: str) -> Iterator[Optional[str]]:
    """An existing emulation (`tag`), or one built from the config and torn down afterwards."""
    if tag is not None:
        yield tag
        return
    from real.emulate import emulated_cluster

    with emulated_cluster(load_config(config_path), queue=queue) as emu:
        yield emu.tag


def compare(config_path: Path, sim_dir: Path, real_dir: Path, warmup: int) -> pd.DataFrame:
    config = load_config(config_path)
    shared = {e.display: create(e.name, e.settings).shared_budget for e in config.policies}
    sim, real = _steady(sim_dir, warmup), _steady(real_dir, warmup)
    rows = []
    for policy, is_shared in shared.items():
        s, r = sim.get(policy), real.get(policy)
        if s is None or r is None:
            continue
        metric = "throughput_samples_s" if is_shared else "mean_iteration_s"
        error = s[metric] / r[metric] - 1
        tolerance = TOLERANCE_SHARED if is_shared else TOLERANCE
        rows.append(
            {
                "policy": policy,
                "compared": "throughput" if is_shared else "iteration time",
                "predicted_iteration_ms": s["mean_iteration_s"] * 1e3,
                "measured_iteration_ms": r["mean_iteration_s"] * 1e3,
                "predicted_samples_s": s["throughput_samples_s"],
                "measured_samples_s": r["throughput_samples_s"],
                "error": error,
                "tolerance": tolerance,
                "within": abs(error) <= tolerance,
            }
        )
    return pd.DataFrame(rows)


def _steady(folder: Path, warmup: int) -> dict[str, dict[str, float]]:
    """Per policy: mean iteration time and throughput over iterations >= warmup."""
    rows = pd.read_csv(folder / "iterations.csv")
    rows = rows[rows["iteration"] >= warmup]
    out = {}
    for policy, df in rows.groupby("policy", sort=False):
        span = df["end_s"].max() - df["start_s"].min()
        out[str(policy)] = {
            "mean_iteration_s": float(df["iteration_s"].mean()),
            "throughput_samples_s": float(df["samples"].sum() / span) if span > 0 else float("nan"),
        }
    return out


def markdown(table: pd.DataFrame) -> str:
    lines = [
        "| policy | compared | predicted (ms / iter) | measured (ms / iter) | predicted samples/s | "
        "measured samples/s | error | within |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in table.itertuples():
        lines.append(
            f"| {row.policy} | {row.compared} | {row.predicted_iteration_ms:.1f} | {row.measured_iteration_ms:.1f} | "
            f"{row.predicted_samples_s:,.0f} | {row.measured_samples_s:,.0f} | {row.error:+.1%} | "
            f"{'yes' if row.within else 'no'} (±{row.tolerance:.0%}) |"
        )
    return "\n".join(lines) + "\n"


def plot(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    x = range(len(table))
    ax.bar([i - 0.2 for i in x], table["predicted_iteration_ms"], width=0.4, label="simulated (calibrated)")
    ax.bar([i + 0.2 for i in x], table["measured_iteration_ms"], width=0.4, label="measured (real)")
    for i, row in enumerate(table.itertuples()):
        top = max(row.predicted_iteration_ms, row.measured_iteration_ms)
        ax.annotate(f"{row.error:+.0%}", (i, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), table["policy"])
    ax.set_ylabel("mean iteration (ms)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
