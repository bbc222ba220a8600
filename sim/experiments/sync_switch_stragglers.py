"""Sync-Switch's straggler runs predicted as slowdowns, and its online policies' runs replayed
(docs/sync_switch.md, "Predicting the authors' runs"); sim.experiments.sync_switch_reproduction
calibrates the setups and prints these tables after its own.

The straggler runs (`data/straggler`, an earlier setup: 40,000 BSP steps of 0.255 s in March; the
April BSP runs at 0.68 s a step logged two 10 ms cases) are predicted as slowdowns: each series'
compute calibrated on its run without stragglers (BSP here runs a client per worker: its steps
are far faster than the master's pipeline allows), then the same run with
the `tc netem` delay on the straggling hosts (`faults.stragglers[].delay_ms`), against the logged
slowdowns. The delay is charged per RPC (`delay_mode: rpc`): TensorFlow moves every tensor as a gRPC
request answered with it, so a transfer to or from a delayed host pays it once and one between two
delayed hosts twice (docs/sync_switch.md, "Stragglers", has the mechanisms checked and rejected).
Each slowdown is scored on the total time and on the extra time the stragglers add (slowdown - 1),
beside the null model "stragglers cost nothing": on the total, the calibrated run without
stragglers counts, and the null model already scores well.

The online policies' runs are replayed: their phases from the launcher's job records (the logs
keep neither the stragglers' timing nor the detection thresholds), simulated beside the static 5%
hybrid under the same stragglers, for the gain of one over the other (`online_gains`).

    python -m sim.experiments.sync_switch_stragglers   # calibrate, then both tables (~2 min)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from sim.experiments import sync_switch_logs as logs
from sim.experiments.sync_switch_reproduction import (
    ASP,
    CIFAR10,
    Calibration,
    Setup,
    base_config,
    calibrate,
    calibrate_compute,
    logged,
    logged_seconds,
    run_policies,
    setup_config,
)

STRAGGLER = Setup("straggler", 8, 128, 40000, 7.45, "resnet32")
# the logged straggler runs: (configuration suffix, delay ms, straggling ranks)
STRAGGLER_CASES = (
    ("10lat_1strag", 10.0, (1,)),
    ("10lat_2strag", 10.0, (1, 6)),
    ("30lat_1strag", 30.0, (1,)),
    ("30lat_2strag", 30.0, (1, 6)),
)
# each series: mode, its run without stragglers, how a straggler run is named from a case's suffix,
# its policy, the cases it logged. The March runs (sync_baseline*, async_baseline*) have all four;
# the April BSP runs (a cosine schedule, 0.67 s steps) only the two 10 ms ones.
BSP_PER_WORKER: dict[str, Any] = {"name": "ps", "label": "bsp"}  # a client per worker, not in-graph
STRAGGLER_SERIES = (
    ("BSP", "sync_baseline", "sync_baseline_{}", BSP_PER_WORKER, STRAGGLER_CASES),
    ("ASP", "async_baseline", "async_baseline_{}", ASP, STRAGGLER_CASES),
    ("BSP", "fixed_batch_sync_baseline_cosine", "fixed_batch_sync_{}_cosine", BSP_PER_WORKER, STRAGGLER_CASES[:2]),
)
SLOWDOWN_ITERATIONS = 400
WITHIN = 0.25  # the band a prediction's error is counted in


def extra_error_pct(predicted_slowdown: float, logged_slowdown: float) -> float:
    """The error on the time the stragglers add (slowdown - 1), in percent: the total time's error
    counts the run without stragglers, which a model that charges them nothing already gets
    right. The null model (slowdown 1) scores -100."""
    if logged_slowdown <= 1.0:
        raise ValueError(f"logged_slowdown: above 1, or there is no extra time to score (got {logged_slowdown})")
    return 100.0 * ((predicted_slowdown - 1.0) / (logged_slowdown - 1.0) - 1.0)


def within(errors_pct: pd.Series, band: float = WITHIN) -> int:
    """How many errors (percent) lie within +-`band`."""
    return int((errors_pct.abs() <= 100.0 * band).sum())


def _netem(ranks: Sequence[int], delay_ms: float, delay_mode: str) -> dict[str, Any]:
    """`code/straggler_simulator.sh`'s `tc qdisc add dev ens5 root netem delay <ms>` on the straggling
    hosts, for the whole run."""
    return {"ranks": list(ranks), "delay_ms": delay_ms, "delay_mode": delay_mode, "start_s": 0.0, "duration_s": 1e9}


def straggler_slowdowns(runs: pd.DataFrame, base: dict[str, Any], delay_mode: str = "rpc") -> pd.DataFrame:
    """Per straggler case of each series (`STRAGGLER_SERIES`), the logged and the simulated slowdown
    over the series' run without stragglers, per step (the April 10 ms x 2 run stopped at 34,000
    steps), each scored on the total time and on the extra time the stragglers add
    (`extra_error_pct`), beside the null model "stragglers cost nothing" (slowdown 1). Each series'
    compute is calibrated on that run. `delay_mode`: how the netem delay is charged
    (`faults.stragglers[].delay_mode`)."""
    setup = STRAGGLER
    rows = []
    for mode, baseline, name, policy, cases in STRAGGLER_SERIES:
        target = logged_seconds(runs, setup.experiment, baseline)
        compute = calibrate_compute(base, setup, target * (1 if mode == "BSP" else setup.hosts), 1e9, policy)
        config = setup_config(base, setup, compute, 1e9)
        label = policy["label"]
        nominal = float(run_policies(config, [policy], SLOWDOWN_ITERATIONS).loc[label, "sim_time_s"])
        for suffix, delay_ms, ranks in cases:
            slowdown = logged_seconds(runs, setup.experiment, name.format(suffix)) / target
            faults = {"stragglers": [_netem(ranks, delay_ms, delay_mode)]}
            slowed = float(
                run_policies({**config, "faults": faults}, [policy], SLOWDOWN_ITERATIONS).loc[label, "sim_time_s"]
            )
            predicted = slowed / nominal
            rows.append(
                {
                    "mode": mode,
                    "baseline": baseline,
                    "delay_ms": delay_ms,
                    "stragglers": len(ranks),
                    "logged_slowdown": round(slowdown, 3),
                    "predicted_slowdown": round(predicted, 3),
                    "error_pct": round(100.0 * (predicted / slowdown - 1.0), 1),
                    "null_error_pct": round(100.0 * (1.0 / slowdown - 1.0), 1),
                    "logged_extra": round(slowdown - 1.0, 3),
                    "predicted_extra": round(predicted - 1.0, 3),
                    "extra_error_pct": round(extra_error_pct(predicted, slowdown), 1),
                    "null_extra_error_pct": round(extra_error_pct(1.0, slowdown), 1),
                }
            )
    return pd.DataFrame(rows)


# the online policies' runs, each beside the static hybrid run under the same stragglers:
# (online configuration, static configuration, delay ms, straggling ranks)
ONLINE_CASES = (
    ("policy1_freq1_1straggler_10ms", "baseline_freq1_1straggler_10ms", 10.0, (1,)),
    ("policy2_freq1_1straggler_10ms", "baseline_freq1_1straggler_10ms", 10.0, (1,)),
    ("policy2_freq4_2straggler_30ms", "baseline_freq4_2straggler_30ms", 30.0, (1, 6)),
)


def replayed_plan(phases: pd.DataFrame, configuration: str, workers: int) -> tuple[str, tuple[float, ...]]:
    """The phases a logged run took, from the launcher's job records of its runs: the pattern (1 =
    BSP) and where each phase ended, as a fraction of the run's worker-updates (a BSP step is
    `workers` updates, an ASP update one; each boundary the median over the runs). The records
    spell "straggler" as "strggler"."""
    job = configuration.replace("straggler", "strggler")
    records = phases[phases["job"].str.match(re.escape(job) + r"_run\d+$")]
    plans = []
    for _, run in records.groupby("job"):
        run = run.sort_values("started")
        plans.append(("".join("1" if mode == "BSP" else "0" for mode in run["mode"]), run["steps"].astype(float)))
    patterns = {pattern for pattern, _ in plans}
    if not patterns:
        raise ValueError(f"{configuration}: no job records of its runs")
    if len(patterns) != 1:
        raise ValueError(f"{configuration}: its runs' job records disagree on the phases ({sorted(patterns)})")
    (pattern,) = patterns
    ends = np.median(np.array([list(steps) for _, steps in plans]), axis=0)
    starts = np.concatenate([[0.0], ends[:-1]])
    updates = (ends - starts) * np.array([workers if mode == "1" else 1 for mode in pattern])
    shares = np.cumsum(updates) / updates.sum()
    return pattern, tuple(round(float(x), 4) for x in shares[:-1])


def online_gains(
    runs: pd.DataFrame, phases: pd.DataFrame, calibration: Calibration, base: dict[str, Any], delay_mode: str = "rpc"
) -> pd.DataFrame:
    """Per online run: its logged and its simulated gain over the static hybrid under the same
    stragglers. The online policy's decisions are replayed from its job records (`replayed_plan`):
    the logs keep neither its detection thresholds nor when the stragglers came, so syncsim predicts
    the time the decisions took, not the decisions. The stragglers are the netem delay on the
    straggling hosts (charged as `delay_mode`) for the whole run, on the CIFAR-10 setup as calibrated."""
    setup = CIFAR10
    config = setup_config(base, setup, calibration.compute_ms[setup.model], calibration.input_samples_s)
    table = logged(runs, "straggler")
    rows = []
    for online, static, delay_ms, ranks in ONLINE_CASES:
        policies = []
        for label in (online, static):
            pattern, switch_at = replayed_plan(phases, label, setup.hosts)
            policies.append(
                {
                    "name": "sync_switch",
                    "label": label,
                    "first": {"name": "ps", "replication": "in_graph"},
                    "pattern": pattern,
                    "switch_at": list(switch_at),
                    "switch_cost_s": calibration.switch_cost_s,
                }
            )
        faults = {"stragglers": [_netem(ranks, delay_ms, delay_mode)]}
        simulated = run_policies({**config, "faults": faults}, policies, setup.bsp_steps)
        logged_min = {label: float(table.loc[label, "median_min"]) for label in (online, static)}
        predicted_min = {label: float(simulated.loc[label, "sim_time_s"]) / 60.0 for label in (online, static)}
        logged_gain = logged_min[static] / logged_min[online]
        predicted_gain = predicted_min[static] / predicted_min[online]
        rows.append(
            {
                "online": online,
                "replayed_phases": policies[0]["pattern"],
                "runs": int(table.loc[online, "runs"]),
                "logged_min": round(logged_min[online], 1),
                "static_logged_min": round(logged_min[static], 1),
                "logged_gain": round(logged_gain, 3),
                "predicted_min": round(predicted_min[online], 1),
                "static_predicted_min": round(predicted_min[static], 1),
                "predicted_gain": round(predicted_gain, 3),
                "points_apart": round(100.0 * (predicted_gain - logged_gain), 1),
            }
        )
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sim.experiments.sync_switch_stragglers", description=__doc__.split("\n\n")[0]
    )
    parser.parse_args(argv)
    runs, phases, base = logs.bundled(), logs.bundled(logs.PHASES), base_config()
    rpc = straggler_slowdowns(runs, base, "rpc")
    one_way = straggler_slowdowns(runs, base, "one_way")
    total = ["mode", "baseline", "delay_ms", "stragglers", "logged_slowdown", "predicted_slowdown", "error_pct"]
    extra = ["logged_extra", "predicted_extra", "extra_error_pct"]
    on_total = rpc[total + ["null_error_pct"]].rename(
        columns={"predicted_slowdown": "predicted (rpc)", "null_error_pct": "error_pct (null)"}
    )
    on_total["predicted (one_way)"] = one_way["predicted_slowdown"]
    on_total["error_pct (one_way)"] = one_way["error_pct"]
    print("total time (slowdown over the run without stragglers):\n")
    print(logs.markdown(on_total))
    on_extra = rpc[total[:4] + extra + ["null_extra_error_pct"]].rename(
        columns={"predicted_extra": "predicted_extra (rpc)", "null_extra_error_pct": "extra_error_pct (null)"}
    )
    on_extra["predicted_extra (one_way)"] = one_way["predicted_extra"]
    on_extra["extra_error_pct (one_way)"] = one_way["extra_error_pct"]
    print("\nextra time (slowdown - 1), the null model's extra is 0:\n")
    print(logs.markdown(on_extra))
    counts = {
        "rpc": (rpc["error_pct"], rpc["extra_error_pct"]),
        "one_way": (one_way["error_pct"], one_way["extra_error_pct"]),
        "null (stragglers cost nothing)": (rpc["null_error_pct"], rpc["null_extra_error_pct"]),
    }
    print(f"\nwithin {WITHIN:.0%} of {len(rpc)}, total time / extra time:")
    for name, (on_total, on_extra) in counts.items():
        print(f"  {name}: {within(on_total)} / {within(on_extra)}")
    print()
    print(logs.markdown(online_gains(runs, phases, calibrate(runs, phases, base), base)))


if __name__ == "__main__":
    main()
