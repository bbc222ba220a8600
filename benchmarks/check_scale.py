"""The cost estimate (sim/estimate/cost.py) at work: how fast `syncsim check` refuses what would not fit, and how
close the estimate comes to measured runs.

    python benchmarks/check_scale.py                 # check timings, then the cheaper scenarios
    python benchmarks/check_scale.py --only quickstart ring_1024
    python benchmarks/check_scale.py --all           # also the runs of a minute or more
    python benchmarks/check_scale.py --only ring_one_bucket_1048576   # LARGE: host-symmetric runs at scale

Each measured scenario is a fresh `syncsim run --quiet` in a subprocess (tables, trace and plots
written, as a user runs it): its wall time from the interpreter's start and its peak memory, with the
engine's event and flow counts, against `estimate(config)`. The estimate promises a factor of ~3. The
est/cpu column divides the estimated wall time by the run's CPU time (user + system): on a machine busy
with other work the wall time grows and the CPU time does not.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
START = time.perf_counter()

from run_all import SCENARIOS, frontier_job, large_job  # noqa: E402


def bundled(name: str) -> Callable[[], dict[str, Any]]:
    return lambda: yaml.safe_load((ROOT / "configs" / name).read_text())


def scaled(name: str, **change: Any) -> Callable[[], dict[str, Any]]:
    return lambda: {**yaml.safe_load((ROOT / "configs" / name).read_text()), **change}


def from_run_all(*names: str) -> dict[str, Callable[[], Any]]:
    """Scenarios of run_all.py (those it still has)."""
    return {name: SCENARIOS[name][1] for name in names if name in SCENARIOS}


CHEAP: dict[str, Callable[[], Any]] = {
    "quickstart": bundled("quickstart.yaml"),
    "two_tier_4to1_bert_large": bundled("two_tier_4to1_bert_large.yaml"),
    "dssync_16to1_packed": bundled("dssync_16to1_packed.yaml"),
    "slow_worker_async": bundled("slow_worker_async.yaml"),
    "zen_deepfm_16": bundled("zen_deepfm_16.yaml"),
    "wan_two_datacenters": bundled("wan_two_datacenters.yaml"),  # ring and hierarchical across a WAN
    "wan_bandwidth_sweep": bundled("wan_bandwidth_sweep.yaml"),  # diloco (two replicas), streaming_diloco
    "diloco_digits_wan": bundled("diloco_digits_wan.yaml"),  # numerics mode: DiLoCo's buffers and local ops
    **from_run_all("ring_1024", "compare_64", "bert_ring_1024", "resnet_ring_4096"),
    **from_run_all("zen_64", "sparse_allgather_64", "ring_256_stepwise"),
}
STAR_4 = {"topology": "star", "hosts": 4, "gpus_per_host": 1, "gpu": "V100", "nic_gbps": 25}
# What the policies' programs alone do not show: a fault storm, many server shards, a large numerics model.
CHEAP.update({
    "straggler_every_ms": scaled("quickstart.yaml", iterations=30, policies=[{"name": "ring"}], faults={"stragglers": [
        {"ranks": list(range(8)), "compute_factor": 2, "every_s": 0.001, "duration_s": 0.0005}]}),
    "ps_16384_shards": lambda: {"name": "shards", "iterations": 3, "cluster": STAR_4,
                                "workload": {"model": "resnet50", "batch_size": 64},
                                "policies": [{"name": "ps", "shards": 16384}]},
    "numerics_deepfm_1e6_rows": lambda: {"name": "deepfm", "iterations": 3, "cluster": STAR_4,
                                         "workload": {"model": "deepfm", "batch_size": 64},
                                         "numerics": {"model": "deepfm", "dataset": "synthetic",
                                                      "zoo": {"features": 1_000_000}},
                                         "policies": [{"name": "ring"}]},
    # large sparse index sets: 2M lookups per worker and iteration in a 20M-row table, every sparse policy
    "sparse_lookups_2e6": lambda: {"name": "lookups", "iterations": 2, "cluster": {"topology": "star", "hosts": 16},
                                   "workload": {"model": "synthetic", "gradient_mb": 80.0, "compute_ms": 5.0,
                                                "sparsity": {"lookups": 2_000_000, "zipf_s": 0.5}},
                                   "policies": [{"name": p} for p in ("zen", "sparcml", "omnireduce", "sparse_ps",
                                                                      "sparse_allgather")]},
})  # fmt: skip
# PowerSGD (rank 4, one ring step first): three all-reduces and about ten factor ops per compressed bucket.
POWERSGD = {"name": "powersgd", "rank": 4, "warmup_steps": 1}
CHEAP.update({
    "powersgd_resnet50": scaled("quickstart.yaml", policies=[POWERSGD]),
    "powersgd_bert_large": scaled("two_tier_4to1_bert_large.yaml", policies=[POWERSGD]),
    "powersgd_no_feedback_lockstep": scaled(
        "quickstart.yaml", policies=[{**POWERSGD, "error_feedback": False}],
        workload={"model": "resnet50", "batch_size": 64}),
    "powersgd_bert_256": lambda: {**large_job(4, "bert_large", "ring", 16), "policies": [POWERSGD]},
})  # fmt: skip
COSTLY: dict[str, Callable[[], Any]] = {
    "numerics_16to1_digits": bundled("numerics_16to1_digits.yaml"),
    "sync_switch_cifar10_resnet32": bundled("papers/sync_switch_cifar10_resnet32.yaml"),
    **from_run_all("asp_256", "bert_ring_4096", "bert_hier_4096", "resnet_hier_16384"),
}


def ring_one_bucket(racks: int) -> dict[str, Any]:
    """Issue 48's cluster (racks of 32 hosts x 8 H100, two_tier 1:1) under a ring of one 100 MB bucket, 2
    iterations: a host-symmetric run whose cost is the cluster, its routes and its rows, not its events."""
    job = frontier_job(racks, "ring")
    job["workload"] = {"model": "synthetic", "gradient_mb": 100.0, "compute_ms": 50.0}
    return job


# Host-symmetric runs at scale (issue 48), measured by --only: minutes each, the last one ~1e6 GPUs.
LARGE: dict[str, Callable[[], Any]] = {
    **from_run_all("frontier_ring_131072", "frontier_hier_131072", "resnet_hier_16384_100"),
    "ring_one_bucket_131072": lambda: ring_one_bucket(512),
    "ring_one_bucket_1048576": lambda: ring_one_bucket(4096),
}
HUGE = {
    "1,000 x 1,000 hosts under a raised limit (answered unbuilt)": scaled(
        "quickstart.yaml", iterations=1, policies=[{"name": "ring"}],
        cluster={"topology": "two_tier", "racks": 1000, "hosts_per_rack": 1000},
        simulation={"max_estimated_wall_s": 1e5, "max_estimated_memory_mb": 1e6}),
    "1,000 racks x 1,000 hosts": scaled("quickstart.yaml", cluster={"topology": "two_tier", "racks": 1000,
                                                                       "hosts_per_rack": 1000}),
    "1e9 iterations": scaled("quickstart.yaml", iterations=1_000_000_000),
    "a 316 x 316 = 99,856-point sweep (was ~5 min, every point validated and estimated)": scaled(
        "quickstart.yaml", sweep={"grid": {"cluster.nic_gbps": list(range(1, 317)),
                                           "workload.batch_size": list(range(1, 317))}}),
}  # fmt: skip


def time_checks(folder: Path) -> None:
    """`syncsim check` of huge configs: refused from the estimate, or (a cluster too large to build within
    check's budget) accepted from it; nothing built either way."""
    for label, build in HUGE.items():
        path = folder / "huge.yaml"
        path.write_text(yaml.safe_dump(build()))
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "sim.cli", "check", str(path)], capture_output=True, text=True)
        wall = time.perf_counter() - start
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(f"syncsim check, {label}: exit {proc.returncode} in {wall:.2f} s (children's peak RSS {peak:.0f} MB)")
        print("\n".join("  " + line for line in (proc.stdout + proc.stderr).splitlines()))


def measure(name: str, folder: Path) -> dict[str, Any]:
    """Run one scenario as `syncsim run` does, in this process; its counts, wall time and peak memory."""
    import sim.api
    from sim.cli import main

    results = []
    simulate = sim.api.simulate

    def keep(*args: Any, **kwargs: Any) -> Any:
        results.append(simulate(*args, **kwargs))
        return results[-1]

    sim.api.simulate = keep  # type: ignore[assignment]
    path = folder / f"{name}.yaml"
    code = main(["run", str(path), "--out", str(folder / name), "--quiet"])
    runs = results[0].runs if results else []
    return {
        "code": code,
        "wall_s": time.perf_counter() - START,
        "cpu_s": (lambda r: r.ru_utime + r.ru_stime)(resource.getrusage(resource.RUSAGE_SELF)),
        "memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "events": sum(run.events for run in runs),
        "flows": sum(run.flows for run in runs),
    }


def compare(names: list[str], scenarios: dict[str, Callable[[], Any]], folder: Path) -> None:
    from sim.config import parse_config
    from sim.estimate.cost import count, duration, estimate, megabytes

    header = (("events est/meas", 21), ("flows est/meas", 19), ("wall est/meas", 23), ("est/cpu", 7),
              ("memory est/meas", 23))  # fmt: skip
    print(f"\n{'scenario':<30}" + "".join(f" {title:>{width}}" for title, width in header))
    for name in names:
        data = scenarios[name]()
        data.setdefault("simulation", {})["max_estimated_wall_s"] = 1e6  # measure even what check would refuse
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(data))
        est = estimate(parse_config(data))
        proc = subprocess.run(
            [sys.executable, __file__, "--measure", name, str(folder)], capture_output=True, text=True
        )
        if proc.returncode:
            print(f"{name:<30} failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        m = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{name:<30} {count(est.events):>6}/{count(m['events']):>6} {est.events / m['events']:5.2f}x "
            f"{count(est.flows):>6}/{count(m['flows']):>6} {(est.flows + 1) / (m['flows'] + 1):4.2f}x "
            f"{duration(est.wall_s):>8}/{duration(m['wall_s']):>7} {est.wall_s / m['wall_s']:5.2f}x "
            f"{est.wall_s / m['cpu_s']:6.2f}x "
            f"{megabytes(est.memory_mb):>8}/{megabytes(m['memory_mb']):>7} {est.memory_mb / m['memory_mb']:5.2f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=[*CHEAP, *COSTLY, *LARGE])
    parser.add_argument("--all", action="store_true", help="also the scenarios that run a minute or more")
    parser.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure[0], Path(args.measure[1]))))
        return 0
    scenarios = {**CHEAP, **COSTLY, **LARGE}
    with tempfile.TemporaryDirectory() as tmp:
        if not args.only:
            time_checks(Path(tmp))
        names = args.only or [*CHEAP, *(COSTLY if args.all else ())]
        compare(names, scenarios, Path(tmp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
