"""Sync-Switch's logged runs predicted from its pure BSP and ASP runs alone (docs/sync_switch.md,
"Predicting the authors' runs").

The setup is the authors' code (configs/papers/sync_switch_logs_cifar10_resnet32.yaml says where
each value comes from): BSP runs as Tensor2Tensor's `--sync`, one master whose single input
pipeline prepares every tower's batch (`ps` with `replication: in_graph`); ASP runs a client per
worker. Three things are calibrated, each on runs that are not predicted:

1. the master's input rate (`workload.input_samples_s`): a simulated BSP step of the CIFAR-10
   ResNet-32 setup takes the logged pure-BSP runs' median time per step;
2. each model's compute (`workload.compute_ms`): a simulated ASP update takes the logged pure-ASP
   runs' median time per worker-update (ResNet-32 on CIFAR-10, ResNet-50 on CIFAR-100);
3. the switch's cost: the median gap between one phase's end and the next one's start in the
   launcher's job records of the CIFAR-100 hybrids (only those: the CIFAR-10 predictions use
   nothing of their own).

Beside each prediction stands the null model `phase_mix_minutes`: the hybrid's BSP share of the
same setup's simulated pure BSP run, the rest of its pure ASP run, plus the switch cost. The
hybrids' predictions come out within a fraction of a point of it: their times follow from the
BSP and ASP calibration, and what the simulation predicts on its own is the pure runs of the
other setups.

Every other configuration is then simulated at its full length: the CIFAR-10 hybrids of every BSP
fraction and order, the 16-worker cluster (same rates, twice the towers per master), and CIFAR-100
ResNet-50's BSP (the CIFAR-10 input rate at 64 images a tower) and hybrids.

The straggler runs and the online policies' runs are predicted in sim.experiments.sync_switch_stragglers;
sim.experiments.sync_switch_heldout calibrates on the CIFAR-10 runs alone (ResNet-50's compute and
the switch included) and predicts the CIFAR-100 and 16-worker runs.

    python -m sim.experiments.sync_switch_reproduction    # calibrate, simulate, print the tables (~5 min)
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from sim.config import load_config
from sim.experiments import sync_switch_logs as logs

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "papers" / "sync_switch_logs_cifar10_resnet32.yaml"
CALIBRATION_ITERATIONS = 240  # steps (or updates per worker) of each calibration run


@dataclass(frozen=True)
class Setup:
    """One logged experiment's cluster and model, as its launch arguments and logs give them."""

    experiment: str  # the logs' experiment folder
    hosts: int
    batch_size: int  # images per worker (tower) per step
    bsp_steps: int  # the whole run under BSP; under ASP the same images are bsp_steps x hosts updates
    gradient_mb: float  # the Tensor2Tensor model's parameters in FP32
    model: str  # which calibrated compute it runs

    def bsp_fraction(self, steps: float) -> float:
        """The share of the BSP steps a hybrid ran under BSP, from its logged global steps (BSP steps
        count once, ASP updates once per worker), to the nearest 1/800: the paper's halvings (12.5%,
        6.25%) are on that grid, and the few updates a run does past its budget are not."""
        n, total = self.hosts, self.bsp_steps
        return round((n * total - steps) / ((n - 1) * total) * 800) / 800


CIFAR10 = Setup("cifar10_res32/switch_exp", 8, 128, 8000, 7.45, "resnet32")
CLUSTER16 = Setup("cluster_16", 16, 128, 4000, 7.45, "resnet32")
CIFAR100 = Setup("cifar100_res50", 8, 64, 16000, 94.8, "resnet50")  # ResNet-50, 23.7 M parameters (100 classes)
BASELINE = "cifar10_res32/baseline"
SETUPS = (CIFAR10, CLUSTER16, CIFAR100)


@dataclass(frozen=True)
class Calibration:
    input_samples_s: float  # the master's input pipeline
    compute_ms: dict[str, float]  # per model: one worker's step at its batch
    switch_cost_s: float


def logged(runs: pd.DataFrame, experiment: str) -> pd.DataFrame:
    """Per configuration of `experiment`: how many timed runs of its usual length it has (steps
    within 1% of their median, which leaves out the baseline folder's older 23,400-step runs), their
    median minutes and steps."""
    chosen = runs[runs["experiment"] == experiment].dropna(subset=["wall_min"])
    usual = chosen.groupby("configuration")["steps"].transform("median")
    chosen = chosen[(chosen["steps"] - usual).abs() <= 0.01 * usual]
    return chosen.groupby("configuration").agg(
        runs=("run", "size"), median_min=("wall_min", "median"), steps=("steps", "median")
    )


def logged_seconds(runs: pd.DataFrame, experiment: str, configuration: str) -> float:
    """Median seconds per global step of a configuration's runs of its usual length (`logged`): a
    BSP step, or under ASP one update (a worker's update takes that x workers)."""
    table = logged(runs, experiment)
    if configuration not in table.index:
        raise ValueError(f"no timed {experiment}/{configuration} run in the logs")
    row = table.loc[configuration]
    return float(row["median_min"]) * 60.0 / float(row["steps"])


def base_config() -> dict[str, Any]:
    return load_config(CONFIG).model_dump(exclude_none=True)


def setup_config(base: dict[str, Any], setup: Setup, compute_ms: float, input_samples_s: float) -> dict[str, Any]:
    """The base config for `setup`: its hosts, batch, gradient and the calibrated rates."""
    config = copy.deepcopy(base)
    config["name"] = setup.experiment.replace("/", "_")
    config["iterations"] = setup.bsp_steps
    config["cluster"]["hosts"] = setup.hosts
    config["workload"].update(
        batch_size=setup.batch_size,
        gradient_mb=setup.gradient_mb,
        compute_ms=compute_ms,
        input_samples_s=input_samples_s,
    )
    return config


def run_policies(config: dict[str, Any], policies: list[dict[str, Any]], iterations: int) -> pd.DataFrame:
    from sim.api import simulate

    config = {**config, "iterations": iterations, "policies": policies}
    return simulate(config).summary.set_index("policy")


BSP: dict[str, Any] = {"name": "ps", "label": "bsp", "replication": "in_graph"}
ASP: dict[str, Any] = {"name": "asp", "label": "asp"}


def _solve(measure: Callable[[float], float], target: float, start: float, update: Callable, rounds: int = 3) -> float:
    """Fixed-point iteration `x <- update(x, measured, target)` from `start`."""
    x = start
    for _ in range(rounds):
        x = update(x, measure(x), target)
    return x


def calibrate_compute(
    base: dict[str, Any], setup: Setup, iteration_s: float, input_samples_s: float, policy: dict[str, Any] = ASP
) -> float:
    """compute_ms at which a simulated iteration of `policy` on `setup` takes `iteration_s` (an ASP
    update per worker by default; the update's communication, a few milliseconds, is what compute
    is not)."""

    def measure(compute_ms: float) -> float:
        config = setup_config(base, setup, compute_ms, input_samples_s)
        return float(run_policies(config, [policy], CALIBRATION_ITERATIONS).loc[policy["label"], "mean_iteration_s"])

    # an iteration is compute plus a fixed communication time: two rounds are exact
    return _solve(measure, iteration_s, iteration_s * 1e3, lambda x, got, want: x + (want - got) * 1e3, rounds=2)


def calibrate_input(base: dict[str, Any], setup: Setup, step_s: float, compute_ms: float) -> float:
    """input_samples_s at which a simulated in-graph BSP step of `setup` takes `step_s`."""

    def measure(rate: float) -> float:
        row = run_policies(setup_config(base, setup, compute_ms, rate), [BSP], CALIBRATION_ITERATIONS).loc["bsp"]
        return float(row["mean_iteration_s"])

    start = setup.hosts * setup.batch_size / step_s
    return _solve(measure, step_s, start, lambda x, got, want: x * got / want)


def calibrate(runs: pd.DataFrame, phases: pd.DataFrame, base: dict[str, Any]) -> Calibration:
    """The three calibrations of the module docstring, from the pure runs and the job records."""
    c10 = CIFAR10
    asp10 = logged_seconds(runs, BASELINE, "asp") * c10.hosts
    bsp10 = logged_seconds(runs, BASELINE, "bsp")
    asp100 = logged_seconds(runs, CIFAR100.experiment, "asp") * CIFAR100.hosts
    # compute first with unlimited input is exact: each ASP worker's own pipeline (batch / rate) is faster
    compute10 = calibrate_compute(base, c10, asp10, 1e9)
    rate = calibrate_input(base, c10, bsp10, compute10)
    compute100 = calibrate_compute(base, CIFAR100, asp100, rate)
    gaps = logs.switch_gaps(phases)
    switch = float(gaps[gaps.index.str.startswith("cifar100_")].median())
    return Calibration(rate, {"resnet32": compute10, "resnet50": compute100}, switch)


def hybrid_policy(label: str, setup: Setup, steps: float, switch_cost_s: float) -> dict[str, Any]:
    """The sync_switch entry of a logged hybrid: its BSP share from its steps, its order from its
    name (`a..`: ASP first)."""
    fraction = setup.bsp_fraction(steps)
    asp_first = label.startswith("a")
    return {
        "name": "sync_switch",
        "label": label,
        "first": {"name": "ps", "replication": "in_graph"},
        "pattern": "01" if asp_first else "10",
        "switch_at": 1.0 - fraction if asp_first else fraction,
        "switch_cost_s": switch_cost_s,
    }


def phase_mix_minutes(fraction: float, bsp_min: float, asp_min: float, switches: int, switch_cost_s: float) -> float:
    """The null model of a hybrid's time: its BSP share of the pure BSP run's minutes, the rest of
    the pure ASP run's, plus each switch's idle time (docs/sync_switch.md, "Throughput: the
    phase-weighted mix"). No simulation: what the discrete-event run adds is what differs from it."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction: a BSP share between 0 and 1 (got {fraction})")
    if switches < 0:
        raise ValueError(f"switches: a count, 0 or more (got {switches})")
    return fraction * bsp_min + (1.0 - fraction) * asp_min + switches * switch_cost_s / 60.0


def predict(runs: pd.DataFrame, calibration: Calibration, base: dict[str, Any]) -> pd.DataFrame:
    """Every configuration of the three setups, simulated at full length, beside its logs and the
    null model (`phase_mix_minutes` of the same setup's simulated pure BSP and ASP runs, which are
    the calibration's times; the 16-worker ASP run is simulated for it alone)."""
    rows = []
    for setup in SETUPS:
        table = logged(runs, setup.experiment)
        policies, roles, shares = [], {}, {}
        for label, entry in table.iterrows():
            if label in ("bsp", "asp"):
                policies.append({**(BSP if label == "bsp" else ASP), "label": label})
            else:
                policies.append(hybrid_policy(str(label), setup, float(entry["steps"]), calibration.switch_cost_s))
                shares[str(label)] = (setup.bsp_fraction(float(entry["steps"])), len(policies[-1]["pattern"]) - 1)
        if setup is CIFAR10:  # its pure runs sit in the baseline folder: the calibration, shown for reference
            policies += [{**BSP, "label": "bsp"}, {**ASP, "label": "asp"}]
            table = pd.concat([table, logged(runs, BASELINE).loc[["bsp", "asp"]]])
            roles = {"bsp": "calibration (input rate)", "asp": "calibration (compute)"}
        elif setup is CIFAR100:  # its hybrids' switches are the ones the switch cost is the median of
            roles = {"asp": "calibration (compute)", "bsp": "held out: dataset"}
        hybrid_role = {CIFAR10: "held out: configuration", CLUSTER16: "held out: worker count"}.get(
            setup, "in-sample (switch cost)"
        )
        pure = [p for p in ({**BSP, "label": "bsp"}, {**ASP, "label": "asp"}) if p["label"] not in table.index]
        config = setup_config(base, setup, calibration.compute_ms[setup.model], calibration.input_samples_s)
        simulated = run_policies(config, policies + pure, setup.bsp_steps)
        bsp_min, asp_min = (float(simulated.loc[label, "sim_time_s"]) / 60.0 for label in ("bsp", "asp"))
        for label, entry in table.iterrows():
            predicted = float(simulated.loc[label, "sim_time_s"]) / 60.0
            logged_min = float(entry["median_min"])
            # a pure run is the mix at share 1 or 0: the null model is then syncsim's own number
            share, switches = shares.get(str(label), (1.0 if label == "bsp" else 0.0, 0))
            null = phase_mix_minutes(share, bsp_min, asp_min, switches, calibration.switch_cost_s)
            rows.append(
                {
                    "experiment": BASELINE if label in ("bsp", "asp") and setup is CIFAR10 else setup.experiment,
                    "configuration": label,
                    "role": roles.get(str(label), hybrid_role),
                    "runs": int(entry["runs"]),
                    **scored_minutes(logged_min, predicted, null),
                }
            )
    return pd.DataFrame(rows)


def scored_minutes(logged_min: float, predicted: float, null: float) -> dict[str, float]:
    """A run's logged, predicted and null-model minutes and both errors, as the tables print them."""
    return {
        "logged_min": round(logged_min, 1),
        "predicted_min": round(predicted, 1),
        "error_pct": round(100.0 * (predicted / logged_min - 1.0), 1),
        "null_min": round(null, 1),
        "null_error_pct": round(100.0 * (null / logged_min - 1.0), 1),
    }


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sim.experiments.sync_switch_reproduction", description=__doc__.split("\n\n")[0]
    )
    parser.parse_args(argv)
    runs, phases, base = logs.bundled(), logs.bundled(logs.PHASES), base_config()
    calibration = calibrate(runs, phases, base)
    print(
        f"calibrated: master input {calibration.input_samples_s:.1f} images/s; compute "
        + ", ".join(f"{m} {ms:.1f} ms" for m, ms in calibration.compute_ms.items())
        + f"; switch {calibration.switch_cost_s:.1f} s\n"
    )
    table = predict(runs, calibration, base)
    print(logs.markdown(table))
    scored = table[~table["role"].str.startswith("calibration")]
    print()
    for name, rows in (
        ("held out", scored[scored["role"].str.startswith("held out")]),
        ("in-sample", scored[scored["role"].str.startswith("in-sample")]),
        ("all not calibrated", scored),
    ):
        print(
            f"{name}: {len(rows)}, median |error| syncsim {rows['error_pct'].abs().median():.1f}%, "
            f"null model {rows['null_error_pct'].abs().median():.1f}%; worst {rows['error_pct'].abs().max():.1f}% "
            f"and {rows['null_error_pct'].abs().max():.1f}%"
        )
    hybrids = scored[~scored["configuration"].isin(["bsp", "asp"])]
    apart = (hybrids["error_pct"] - hybrids["null_error_pct"]).abs()
    print(
        f"hybrids: {len(hybrids)}, syncsim and the null model at most {apart.max():.1f} points apart "
        f"(median {apart.median():.1f}); a pure run is the null model at share 1 or 0"
    )


if __name__ == "__main__":
    main()
