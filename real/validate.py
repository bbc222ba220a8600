"""`syncsim validate CONFIG`: calibrate, then run every policy real and simulated, and compare.

Steps: (1) measure the cluster and write `calibrated.yaml` (the config with fitted links, latency,
compute time and the model's real gradient size); (2) run that config on the real backend; (3)
simulate it, and simulate the asynchronous policies (ASP, SSP) again with their workers out of step
(`sim.experiments.ensemble`: the median of seeded runs is their prediction); (4) compare, policy by
policy, the mean iteration time (throughput for the asynchronous policies, whose iterations are not
in lockstep), after dropping each worker's first `warmup` iterations on both sides (connection
set-up and allocator warm-up have no simulated counterpart): by default the config's
`warmup_iterations`, else 3 (`Config.summary_warmup`), which both runs' summaries leave out too.
By default the cluster is an emulated one built from the config (`syncsim emulate`, root needed). A
multi_datacenter cluster stays one in `calibrated.yaml` (`real.calibrate.datacenters`, which refuses up
front the clusters whose shape it could not keep).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pandas as pd

from real.calibrate.datacenters import check_calibratable
from real.launch import launch
from sim.api import simulate
from sim.config import Config, load_config
from sim.errors import ConfigError, SyncsimError
from sim.experiments.ensemble import JITTER, asynchronous_policies, decorrelated
from sim.files import atomic_write
from sim.results import Result
from sim.results.result import read_table
from sim.results.tables import steady_figures

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

    @classmethod
    def read(cls, folder: str | Path) -> Validation:
        """A validation back from the folder `syncsim validate --out` filled."""
        out = Path(folder)
        if not (out / "validation.csv").is_file():
            raise FileNotFoundError(f"{out}: no validation.csv here; not the folder of `syncsim validate`")
        return cls(pd.read_csv(out / "validation.csv"), out)

    def simulated(self) -> Result:
        """The calibrated config's simulation (every policy once, workers in step)."""
        return Result.read(self.out / "sim")

    def measured(self) -> Result:
        """The real run's tables (the same columns as the simulation's)."""
        return Result.read(self.out / "real")

    def calibrated_config(self) -> Config:
        return load_config(self.out / "calibrated.yaml")

    def calibration(self) -> dict[str, pd.DataFrame]:
        """The calibration's raw measurements, by kind: `pairs` (one-way time per host pair and size),
        `collectives`, `computes` (per rank), `uplinks` (a rack's hosts sending out at once)."""
        return {p.name.split(".")[1]: pd.read_csv(p) for p in sorted(self.out.glob("calibrated.*.csv"))}

    def out_of_step(self) -> pd.DataFrame:
        """The asynchronous policies' seeded simulations with their workers out of step (one row each)."""
        return pd.read_csv(self.out / "sim_out_of_step.csv")


def validate(
    config_path: Path,
    out: Path,
    tag: Optional[str] = None,
    timeout_s: float = 120.0,
    warmup: Optional[int] = None,
    queue: str = "fair",
    overrides: Sequence[str] = (),
) -> Validation:
    """`warmup`: iterations dropped on both sides (default: the config's `warmup_iterations`, else 3);
    `queue`: the links' discipline when the emulation is built here (`tag` None); `overrides`: `KEY=VALUE`
    settings applied to the config (`--set`), which the calibrated config then holds."""
    config = load_config(config_path, overrides)
    check_calibratable(config.cluster)  # refused now, not after minutes of measuring
    warmup, same = warmup_setting(config, warmup)
    out.mkdir(parents=True, exist_ok=True)
    calibrated = out / "calibrated.yaml"
    with _emulation(config_path, tag, queue, overrides) as running:
        outcome = launch(
            config_path, calibrated, timeout_s=timeout_s, emulation=running, calibrate=True, overrides=overrides
        )
        if not outcome.ok:
            raise ValidationError(f"calibration failed: {outcome.failed}")
        outcome = launch(calibrated, out / "real", timeout_s=timeout_s, emulation=running, overrides=same)
        if not outcome.ok:
            raise ValidationError(f"the real run failed: {outcome.failed}; partial results in {out / 'real'}")
    config = load_config(calibrated, same)
    simulate(config).write(out / "sim", plot=False)
    ensemble = out_of_step(config, warmup)
    atomic_write(out / "sim_out_of_step.csv", ensemble.to_csv(index=False))
    table = compare(calibrated, out / "sim", out / "real", warmup, ensemble)
    atomic_write(out / "validation.csv", table.to_csv(index=False))
    atomic_write(out / "validation.md", markdown(table))
    plot(table, out / "validation.png", config.name)
    return Validation(table, out)


def warmup_setting(config: Config, warmup: Optional[int]) -> tuple[int, list[str]]:
    """The warm-up a validation drops (`warmup`, else the real run's default for `config`), and the
    override that makes both runs' summaries leave out the same iterations."""
    if warmup is None:
        warmup = config.summary_warmup(real=True)
    elif not 0 <= warmup < config.iterations:
        raise ConfigError(f"--warmup: {warmup} leaves no iteration to compare; allowed: 0 to {config.iterations - 1}")
    return warmup, [f"warmup_iterations={warmup}"]


def out_of_step(config: Config, warmup: int) -> pd.DataFrame:
    """The asynchronous policies' seeded simulations with their workers out of step (rows of
    `sim.experiments.ensemble.decorrelated`); no rows when the config has none, which a config of
    synchronous policies alone (say, across datacenters) is, and which `decorrelated` would refuse."""
    shared = asynchronous_policies(config)
    if not shared:
        return pd.DataFrame(columns=OUT_OF_STEP_COLUMNS)
    return decorrelated(config, shared, warmup=warmup)


OUT_OF_STEP_COLUMNS = ["policy", "seed", "mean_iteration_s", "throughput_samples_s"]


@contextlib.contextmanager
def _emulation(
    config_path: Path, tag: Optional[str], queue: str, overrides: Sequence[str] = ()
) -> Iterator[Optional[str]]:
    """An existing emulation (`tag`), or one built from the config and torn down afterwards."""
    if tag is not None:
        yield tag
        return
    from real.emulate import emulated_cluster

    with emulated_cluster(load_config(config_path, overrides), queue=queue) as emu:
        yield emu.tag


def compare(
    config_path: Path, sim_dir: Path, real_dir: Path, warmup: int, ensemble: Optional[pd.DataFrame] = None
) -> pd.DataFrame:
    """One row per policy. A policy in `ensemble` (rows of `sim.experiments.ensemble.decorrelated`) is
    predicted by the ensemble's medians, with its range and the single simulation's throughput
    beside them."""
    config = load_config(config_path)
    shared = set(asynchronous_policies(config))
    sim = steady_figures(read_table(sim_dir, "iterations"), warmup)
    real = steady_figures(read_table(real_dir, "iterations"), warmup)
    spread = ensemble.groupby("policy") if ensemble is not None and len(ensemble) else None
    rows = []
    for policy in (e.display for e in config.policies):
        s, r = sim.get(policy), real.get(policy)
        if s is None or r is None:
            continue
        row: dict[str, object] = {"policy": policy, "predicted_by": "one simulation"}
        if spread is not None and policy in spread.groups:
            runs = spread.get_group(policy)
            single = s["throughput_samples_s"]
            s = runs[["mean_iteration_s", "throughput_samples_s"]].median().to_dict()
            row.update(
                predicted_by=f"median of {len(runs)} out of step",
                predicted_low_samples_s=runs["throughput_samples_s"].min(),
                predicted_high_samples_s=runs["throughput_samples_s"].max(),
                in_step_samples_s=single,
            )
        is_shared = policy in shared
        metric = "throughput_samples_s" if is_shared else "mean_iteration_s"
        error = s[metric] / r[metric] - 1
        tolerance = TOLERANCE_SHARED if is_shared else TOLERANCE
        row.update(
            compared="throughput" if is_shared else "iteration time",
            predicted_iteration_ms=s["mean_iteration_s"] * 1e3,
            measured_iteration_ms=r["mean_iteration_s"] * 1e3,
            predicted_samples_s=s["throughput_samples_s"],
            measured_samples_s=r["throughput_samples_s"],
            error=error,
            tolerance=tolerance,
            within=abs(error) <= tolerance,
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=COLUMNS)


COLUMNS = [
    "policy", "compared", "predicted_iteration_ms", "measured_iteration_ms", "predicted_samples_s",
    "measured_samples_s", "error", "tolerance", "within", "predicted_by", "predicted_low_samples_s",
    "predicted_high_samples_s", "in_step_samples_s",
]  # fmt: skip


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
    notes = [
        f"- {row.policy}: predicted by the median of simulations with the workers out of step (compute "
        f"jitter at least {JITTER:g}; docs/validation.md): {row.predicted_low_samples_s:,.0f}-"
        f"{row.predicted_high_samples_s:,.0f} samples/s over the seeds; "
        f"the config simulated once, without that jitter: {row.in_step_samples_s:,.0f} samples/s."
        for row in table.itertuples()
        if row.predicted_by != "one simulation"
    ]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def plot(table: pd.DataFrame, path: Path, config_name: Optional[str] = None) -> None:
    from sim.results.plots import figure, save_captioned

    fig, ax = figure(figsize=(7, 3.5))
    x = range(len(table))
    ax.bar([i - 0.2 for i in x], table["predicted_iteration_ms"], width=0.4, label="simulated (calibrated)")
    ax.bar([i + 0.2 for i in x], table["measured_iteration_ms"], width=0.4, label="measured (real)")
    for i, row in enumerate(table.itertuples()):
        top = max(row.predicted_iteration_ms, row.measured_iteration_ms)
        ax.annotate(f"{row.error:+.0%}", (i, top), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(list(x), table["policy"])
    ax.set_ylabel("mean iteration (ms)")
    ax.legend(fontsize=8)
    save_captioned(fig, path, config_name)
