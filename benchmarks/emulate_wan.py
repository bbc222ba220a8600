"""The real backend on an emulated multi_datacenter cluster against the simulator (docs/emulation.md,
"Across datacenters"): measured iteration time per policy against three predictions.

    syncsim emulate up configs/emulate_wan_2dc.yaml --tag wan46          # root
    syncsim calibrate configs/emulate_wan_2dc.yaml --emulate wan46 --out CAL/calibrated.yaml \
        --set 'policies=[{name: ring}]'      # the model's compute time and gradient size, a fitted network
    python benchmarks/emulate_wan.py configs/emulate_wan_2dc.yaml CAL/calibrated.yaml --tag wan46 --out DIR
    (with `--set KEY=VALUE`, the same for all three commands, e.g. --set cluster.wan.bandwidth_gbps=0.02)
    syncsim emulate down --tag wan46

Predictions, each from the calibrated workload (compute time and gradient size measured on this machine):

- `wan`: the config's own multi_datacenter cluster at its configured rates (the emulation's), its link
  latency the calibrated one, and `wan.rtt_ms` what the emulated WAN link really adds to a round trip:
  the median ping across it less the median ping inside a datacenter (no delay is emulated: no netem).
- `fit`: the calibrated config as `syncsim validate` uses it: the config's own datacenters with the
  measured NIC rates, WAN rate and latencies (docs/calibration.md, "Clusters across datacenters"). Before
  calibration kept the datacenters, this was a two-tier cluster of two racks (the figures in
  docs/emulation.md were measured so).
- `null`: perfect scaling, compute alone (`no_sync` on the `wan` config).

Measured: the median over `--runs` real runs of each policy's mean iteration time, after the same warm-up
on both sides as `syncsim validate` drops.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import subprocess
from pathlib import Path

import yaml

import real.emulate.probe as probe
from real.emulate import Emulation
from real.launch import launch
from real.validate import warmup_setting
from sim.api import simulate
from sim.config import Config, load_config
from sim.results.result import read_table
from sim.results.tables import steady_figures

PINGS = 9
MIN_RTT_MS = 0.001  # rtt_ms must be > 0


def wan_rtt_ms(emu: Emulation, datacenters: dict[str, tuple[str, ...]]) -> tuple[float, float, float]:
    """(across, inside, added): median ping ms between the first hosts of two datacenters, inside the
    first datacenter, and what the WAN link adds (their difference)."""
    names = list(datacenters)
    a, b = datacenters[names[0]], datacenters[names[1]]
    across = statistics.median(probe.ping(emu, a[0], b[0]) * 1e3 for _ in range(PINGS))
    inside = statistics.median(probe.ping(emu, a[0], a[1]) * 1e3 for _ in range(PINGS))
    return across, inside, max(MIN_RTT_MS, across - inside)


def configs(config: Config, calibrated_path: Path, rtt_ms: float, out: Path) -> dict[str, Path]:
    """Write the `wan`, `fit` and `null` configs (module docstring) into `out`."""
    base = config.model_dump(mode="json")
    cal = yaml.safe_load(calibrated_path.read_text())
    workload = dict(cal["workload"])
    if "profile" in workload:  # relative to the calibrated config
        workload["profile"] = str((calibrated_path.parent / workload["profile"]).resolve())
    wan = copy.deepcopy(base)
    wan["workload"], wan["simulation"] = workload, cal.get("simulation", {})
    for key in ("link_latency_us", "intra_host_latency_us"):
        if key in cal["cluster"]:  # the cluster's and every datacenter's (a dumped config repeats it in each)
            for section in (wan["cluster"], *wan["cluster"]["datacenters"]):
                section[key] = cal["cluster"][key]
    wan["cluster"]["wan"]["rtt_ms"] = rtt_ms
    fit = copy.deepcopy(cal)
    fit["workload"] = workload
    fit["policies"] = copy.deepcopy(base["policies"])
    null = copy.deepcopy(wan) | {"policies": [{"name": "no_sync"}]}
    paths = {}
    for name, data in (("wan", wan), ("fit", fit), ("null", null)):
        paths[name] = out / f"predict_{name}.yaml"
        paths[name].write_text(yaml.safe_dump(data, sort_keys=False))
    return paths


def mean_iterations(folder: Path, warmup: int) -> dict[str, float]:
    return {p: f["mean_iteration_s"] for p, f in steady_figures(read_table(folder, "iterations"), warmup).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("calibrated", type=Path)
    parser.add_argument("--tag", required=True, help="the running emulation of `config`")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as for `syncsim`")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    emu = Emulation.load(args.tag)
    config = load_config(args.config, args.set)
    from sim.cluster.topology import build_cluster

    across, inside, rtt = wan_rtt_ms(emu, build_cluster(config.cluster, config.seed).view.datacenters)
    delay = [
        f"ping: across the WAN {across:.3f} ms, inside a datacenter {inside:.3f} ms; the WAN adds {rtt:.3f} ms",
        f"the emulated WAN has NO added delay (no netem): the config's rtt_ms {config.cluster.wan.rtt_ms:g} is not "
        f"emulated, the wan model uses rtt_ms {rtt:.3f}",
    ]
    print("\n".join(delay))
    paths = configs(config, args.calibrated, rtt, args.out)
    warmup, same = warmup_setting(load_config(paths["wan"]), None)
    predicted: dict[str, dict[str, float]] = {}
    for name, path in paths.items():
        simulate(load_config(path, same)).write(args.out / f"sim_{name}", plot=False)
        predicted[name] = mean_iterations(args.out / f"sim_{name}", warmup)
    null = predicted["null"]["no_sync"]
    loads, measured = [], []
    for run in range(args.runs):
        loads.append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
        folder = args.out / f"real{run}"
        outcome = launch(paths["wan"], folder, timeout_s=args.timeout, emulation=args.tag, overrides=same)
        if not outcome.ok:
            raise SystemExit(f"real run {run} failed: {outcome.failed}")
        measured.append(mean_iterations(folder, warmup))
    loads.append(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    lines = [
        *delay,
        f"warm-up {warmup} iterations dropped; measured: median of {args.runs} real runs (each run's mean)",
        "| policy | measured ms (runs) | wan model ms (error) | alpha-beta fit ms (error) | null: compute only ms "
        "(error) |",
        "| --- | --- | --- | --- | --- |",
    ]
    fit_names = {p.display: q.display for p, q in zip(config.policies, load_config(paths["fit"]).policies)}
    for policy in measured[0]:
        runs = [m[policy] * 1e3 for m in measured]
        got = statistics.median(runs)
        wan = predicted["wan"][policy] * 1e3
        fit = predicted["fit"].get(fit_names.get(policy, policy), float("nan")) * 1e3
        lines.append(
            f"| {policy} | {got:.1f} ({', '.join(f'{r:.1f}' for r in runs)}) | {wan:.1f} ({wan / got - 1:+.1%}) | "
            f"{fit:.1f} ({fit / got - 1:+.1%}) | {null * 1e3:.1f} ({null * 1e3 / got - 1:+.1%}) |"
        )
    lines += ["", "load (uptime) before each run and after the last:", *(f"    {x}" for x in loads)]
    text = "\n".join(lines) + "\n"
    (args.out / "table.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
