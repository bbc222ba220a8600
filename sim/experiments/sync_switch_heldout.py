"""Sync-Switch calibrated on its CIFAR-10 runs alone, then scored on the CIFAR-100 and 16-worker runs
(docs/sync_switch.md, "Held out: calibrated on CIFAR-10 alone").

The split, fixed before scoring, follows the logs' own folders (sync_switch_logs):

- calibration: the 8-worker CIFAR-10 ResNet-32 setup only. Its pure BSP and ASP runs
  (`cifar10_res32/baseline`, the 8,000-step runs) give the master's input rate and ResNet-32's
  compute, as in sync_switch_reproduction; the launcher's job records of its hybrids (jobs named by
  their split alone: `5050_run1`, `2575_run1`, `694_run1`, `694_run2`) give the switch cost.
- held out by dataset: every `cifar100_res50` run (ResNet-50, 64 images a tower, 16,000 BSP steps).
  Nothing of CIFAR-10 says what ResNet-50 computes, so its compute is ResNet-32's per image
  (calibrated ms x 64 / 128); what syncsim adds is the larger model's parameter traffic (94.8 MB).
- held out by worker count: every `cluster_16` run (ResNet-32, 16 workers, 4,000 BSP steps), with
  the same rates.
- not used: `straggler` (an earlier setup), `dynamic` and `momentum_tunning` (other policies and
  hyper-parameters), and the CIFAR-10 hybrids' times (they are what sync_switch_reproduction predicts).

Each run is scored on its total time beside a null model that simulates nothing: the phase-weighted
mix of the CIFAR-10 calibration's logged BSP and ASP minutes (every setup trains the same 8.2 M
images), at perfect scaling with the worker count (x 8 / workers), plus the switches. A hybrid is also
scored on its time beyond the plain mix of its own setup's pure runs (logged against logged,
syncsim against syncsim): what the switch and anything else the phases do not add up to cost. No
accuracy is predicted here: syncsim trains no ResNet on CIFAR.

    python -m sim.experiments.sync_switch_heldout    # calibrate on CIFAR-10, predict, print (3-4 min)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from sim.experiments import sync_switch_logs as logs
from sim.experiments.sync_switch_reproduction import (
    ASP,
    BASELINE,
    BSP,
    CIFAR10,
    CIFAR100,
    CLUSTER16,
    Calibration,
    Setup,
    base_config,
    calibrate_compute,
    calibrate_input,
    hybrid_policy,
    logged,
    logged_seconds,
    phase_mix_minutes,
    run_policies,
    scored_minutes,
    setup_config,
)

# the held-out setups, each with what it is held out by and the job names of its hybrids' records
HELD_OUT: tuple[tuple[Setup, str, str], ...] = (
    (CIFAR100, "dataset", r"^cifar100_\d+_run\d+$"),
    (CLUSTER16, "worker count", r"^cluster_16_\d+_run\d+$"),
)
CIFAR10_JOBS = r"^\d+_run\d+$"  # the CIFAR-10 switch experiment's records: named by the split alone


def switch_gap_s(phases: pd.DataFrame, jobs: str) -> float:
    """The median gap between one phase's end and the next one's start over the job records whose
    job name matches the regular expression `jobs`."""
    gaps = logs.switch_gaps(phases)
    chosen = gaps[gaps.index.str.match(jobs)]
    if chosen.empty:
        raise ValueError(f"jobs: no job record with several phases matches {jobs!r}")
    return float(chosen.median())


def calibrate_cifar10(runs: pd.DataFrame, phases: pd.DataFrame, base: dict[str, Any]) -> Calibration:
    """The calibration from the 8-worker CIFAR-10 runs alone: input rate and ResNet-32 compute from
    its pure runs, ResNet-50's compute as ResNet-32's per image, the switch from its job records."""
    asp10 = logged_seconds(runs, BASELINE, "asp") * CIFAR10.hosts
    bsp10 = logged_seconds(runs, BASELINE, "bsp")
    compute10 = calibrate_compute(base, CIFAR10, asp10, 1e9)
    rate = calibrate_input(base, CIFAR10, bsp10, compute10)
    compute50 = compute10 * CIFAR100.batch_size / CIFAR10.batch_size
    return Calibration(rate, {"resnet32": compute10, "resnet50": compute50}, switch_gap_s(phases, CIFAR10_JOBS))


def images(setup: Setup) -> int:
    """The images a whole run trains on (BSP steps x workers x batch)."""
    return setup.bsp_steps * setup.hosts * setup.batch_size


def null_minutes(
    setup: Setup, fraction: float, switches: int, bsp10_min: float, asp10_min: float, switch_cost_s: float
) -> float:
    """The null model: the CIFAR-10 calibration's phase mix for `setup`'s images, at perfect scaling
    from CIFAR-10's workers to `setup`'s."""
    factor = images(setup) / images(CIFAR10) * CIFAR10.hosts / setup.hosts
    return phase_mix_minutes(fraction, bsp10_min * factor, asp10_min * factor, switches, switch_cost_s)


def _share(label: str, setup: Setup, steps: float) -> tuple[float, int]:
    """A configuration's BSP share and switches (a pure run: share 1 or 0, no switch)."""
    if label in ("bsp", "asp"):
        return (1.0 if label == "bsp" else 0.0), 0
    return setup.bsp_fraction(steps), 1


def predict_held_out(
    runs: pd.DataFrame, calibration: Calibration, base: dict[str, Any], scale: int = 1
) -> pd.DataFrame:
    """Every logged configuration of the held-out setups, simulated, beside its logs and the null
    model (`null_minutes`), with each hybrid's time beyond its setup's plain mix. `scale` > 1
    simulates 1/scale of every run (steps and switch cost) and multiplies the time back: a run's
    time is linear in both, which keeps tests short."""
    if scale < 1:
        raise ValueError(f"scale: a whole number, 1 or more (got {scale})")
    base10 = logged(runs, BASELINE)
    bsp10, asp10 = (float(base10.loc[label, "median_min"]) for label in ("bsp", "asp"))
    rows = []
    for setup, held_out, _ in HELD_OUT:
        table = logged(runs, setup.experiment)
        shares = {str(label): _share(str(label), setup, float(entry["steps"])) for label, entry in table.iterrows()}
        policies = [{**BSP, "label": "bsp"}, {**ASP, "label": "asp"}]
        for label, entry in table.iterrows():
            if label not in ("bsp", "asp"):
                policies.append(
                    hybrid_policy(str(label), setup, float(entry["steps"]), calibration.switch_cost_s / scale)
                )
        config = setup_config(base, setup, calibration.compute_ms[setup.model], calibration.input_samples_s)
        simulated = run_policies(config, policies, setup.bsp_steps // scale)
        minutes = {p["label"]: float(simulated.loc[p["label"], "sim_time_s"]) * scale / 60.0 for p in policies}
        for label, entry in table.iterrows():
            fraction, switches = shares[str(label)]
            logged_min, predicted = float(entry["median_min"]), minutes[str(label)]
            null = null_minutes(setup, fraction, switches, bsp10, asp10, calibration.switch_cost_s)
            extra_logged = extra_predicted = float("nan")
            if switches:
                extra_predicted = predicted - phase_mix_minutes(fraction, minutes["bsp"], minutes["asp"], 0, 0.0)
                if {"bsp", "asp"} <= set(table.index):
                    pure = (float(table.loc[mode, "median_min"]) for mode in ("bsp", "asp"))
                    extra_logged = logged_min - phase_mix_minutes(fraction, *pure, 0, 0.0)
            rows.append(
                {
                    "experiment": setup.experiment,
                    "configuration": label,
                    "held_out_by": held_out,
                    "runs": int(entry["runs"]),
                    **scored_minutes(logged_min, predicted, null),
                    "logged_extra_min": round(extra_logged, 1),
                    "predicted_extra_min": round(extra_predicted, 1),
                }
            )
    return pd.DataFrame(rows)


def kind(configuration: str) -> str:
    """A configuration's run kind: `bsp`, `asp` or `hybrid`."""
    return configuration if configuration in ("bsp", "asp") else "hybrid"


def by_kind(table: pd.DataFrame) -> pd.DataFrame:
    """Per held-out setup and run kind: configurations, the largest |error| of syncsim and of the null
    model (percent), and for hybrids the largest miss on the time beyond the mix (minutes)."""
    scored = table.assign(
        kind=table["configuration"].map(kind),
        abs_error=table["error_pct"].abs(),
        abs_null=table["null_error_pct"].abs(),
        extra_miss=(table["predicted_extra_min"] - table["logged_extra_min"]).abs(),
    )
    grouped = scored.groupby(["experiment", "kind"], sort=False)
    return grouped.agg(
        configurations=("configuration", "size"),
        worst_error_pct=("abs_error", "max"),
        worst_null_error_pct=("abs_null", "max"),
        worst_extra_miss_min=("extra_miss", "max"),
    ).reset_index()


def extra_misses(table: pd.DataFrame, switch_cost_s: float) -> dict[str, float]:
    """Over the hybrids whose setup logged both pure runs: the median |miss| (minutes) on the time
    beyond the plain mix, of syncsim, of the phase-mix null (whose extra is its switch term) and of
    "no extra" (the plain mix)."""
    hybrids = table.dropna(subset=["logged_extra_min", "predicted_extra_min"])
    logged_extra = hybrids["logged_extra_min"]
    return {
        "syncsim": float((hybrids["predicted_extra_min"] - logged_extra).abs().median()),
        "phase-mix null": float((switch_cost_s / 60.0 - logged_extra).abs().median()),
        "no extra": float(logged_extra.abs().median()),
    }


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sim.experiments.sync_switch_heldout", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scale", type=int, default=1, help="simulate 1/SCALE of every run (default: full length)")
    args = parser.parse_args(argv)
    runs, phases, base = logs.bundled(), logs.bundled(logs.PHASES), base_config()
    calibration = calibrate_cifar10(runs, phases, base)
    print(
        f"calibrated on CIFAR-10 alone: master input {calibration.input_samples_s:.1f} images/s; compute "
        + ", ".join(f"{m} {ms:.1f} ms" for m, ms in calibration.compute_ms.items())
        + f" (ResNet-32's per image); switch {calibration.switch_cost_s:.1f} s\n"
    )
    table = predict_held_out(runs, calibration, base, args.scale)
    print(logs.markdown(table))
    print()
    print(logs.markdown(by_kind(table)))
    print()
    misses = extra_misses(table, calibration.switch_cost_s)
    print(
        "hybrids' time beyond their setup's plain mix, median |miss|: "
        + ", ".join(f"{name} {minutes:.1f} min" for name, minutes in misses.items())
    )
    for setup, held_out, jobs in HELD_OUT:
        gap = switch_gap_s(phases, jobs)
        print(
            f"switch cost, held out by {held_out} ({setup.experiment} job records): logged median {gap:.1f} s, "
            f"predicted {calibration.switch_cost_s:.1f} s ({100.0 * (calibration.switch_cost_s / gap - 1.0):+.1f}%)"
        )


if __name__ == "__main__":
    main()
