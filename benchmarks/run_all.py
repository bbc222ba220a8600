"""Simulation speed and memory, printed as a table (medians of repeated runs; these machines are noisy).

    python benchmarks/run_all.py             # every scenario, 3 repeats
    python benchmarks/run_all.py --repeats 1 --only ring_1024

Each run is a fresh subprocess, so peak memory (max RSS) belongs to that scenario alone. Targets
from the project's issues: one 100 MB ring all-reduce iteration over 1,024 GPUs in <= 10 s; a
100-iteration ps/ring/hierarchical comparison on 64 GPUs in <= 30 s; 100 iterations of ASP with 256
workers and 8 PS shards in <= 60 s; numerics mode, 16 workers x 500 iterations of the digits MLP
in <= 60 s; a 64-worker Zen iteration at 1% density over 100M parameters in <= 10 s; 10 iterations of
BERT-large over 4,096 A100 GPUs, ring or hierarchical, in <= 30 s and 2 GB; 10 iterations of ResNet-50
over 16,384 GPUs, hierarchical, in <= 60 s and 4 GB; ASP with 256 workers in <= 10 s. Issue 48's: 131,072 H100s,
BERT-large hierarchical or ring, 2 iterations, in <= 60 s and 6 GB; 100 iterations of ResNet-50 over 16,384
GPUs, hierarchical, in <= 60 s; `bert_ring_4096` in <= 10 s.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def ring_config(racks: int, hosts_per_rack: int, model: str = "pipelined") -> dict[str, Any]:
    """One iteration: 100 ms of compute, then one 100 MB ring all-reduce; uplinks 4:1."""
    return {
        "name": f"ring-{racks * hosts_per_rack}",
        "iterations": 1,
        "cluster": {
            "topology": "two_tier",
            "racks": racks,
            "hosts_per_rack": hosts_per_rack,
            "nic_gbps": 25,
            "uplink_gbps": hosts_per_rack * 25 / 4,
        },
        "workload": {"model": "synthetic", "gradient_mb": 100, "compute_ms": 100, "compute_jitter": 0.02},
        "policies": [{"name": "ring"}],
        "simulation": {"collective_model": model, "trace": False},
    }


def large_job(racks: int, model: str, policy: str, batch_size: int, iterations: int = 10) -> dict[str, Any]:
    """A realistic job at scale: A100 hosts of 4 GPUs, 16 per rack, 100 Gbps NICs, 400 Gbps uplinks
    (4:1 for the rack's 1.6 Tbps of NICs), DDP's 25 MB buckets, every iteration simulated."""
    return {
        "name": f"{model}-{policy}-{racks * 64}",
        "iterations": iterations,
        "cluster": {
            "topology": "two_tier",
            "racks": racks,
            "hosts_per_rack": 16,
            "gpus_per_host": 4,
            "gpu": "A100",
            "nic_gbps": 100,
            "uplink_gbps": 400,
        },
        "workload": {"model": model, "batch_size": batch_size},
        "policies": [{"name": policy}],
        "simulation": {"trace": False},
    }


def frontier_job(racks: int, policy: str) -> dict[str, Any]:
    """Issue 48's cluster: racks of 32 hosts of 8 H100s, 8 x 400 Gbps NICs a host, uplinks at the rack's
    NIC bandwidth (1:1, two tiers), BERT-large in bf16 (27 buckets), 2 iterations. 512 racks: 131,072 GPUs."""
    return {
        "name": f"frontier-{policy}-{racks * 256}",
        "iterations": 2,
        "cluster": {
            "topology": "two_tier",
            "racks": racks,
            "hosts_per_rack": 32,
            "gpus_per_host": 8,
            "gpu": "H100",
            "nic_gbps": 400,
            "nics_per_host": 8,
            "uplink_gbps": 12800,
        },
        "workload": {"model": "bert_large", "batch_size": 32, "precision": "bf16"},
        "policies": [{"name": policy}],
        "simulation": {"trace": False},
    }


def comparison_64() -> dict[str, Any]:
    """The bundled 8 x 8 GPU config, 100 iterations of ps, ring and hierarchical."""
    from sim.config import load_config

    cfg = load_config(ROOT / "configs" / "nvlink_8x8_100g.yaml")
    keep = [p for p in cfg.policies if p.name in ("ps", "ring", "hierarchical")]
    return cfg.model_copy(update={"iterations": 100, "policies": keep}).model_dump(mode="json")


def asp_256() -> dict[str, Any]:
    """ASP, 256 workers (8 racks x 32 hosts, 1:1) and 8 dedicated 100 Gbps PS shards, ResNet-50."""
    return {
        "name": "asp-256",
        "iterations": 100,
        "cluster": {
            "topology": "two_tier",
            "racks": 8,
            "hosts_per_rack": 32,
            "nic_gbps": 25,
            "uplink_gbps": 800,
            "server_hosts": 8,
            "server_nic_gbps": 100,
        },
        "workload": {"model": "resnet50", "batch_size": 64, "compute_jitter": 0.02},
        "policies": [{"name": "asp", "placement": "dedicated"}],
        "simulation": {"trace": False},
    }


def zen_64(policy: str = "zen") -> dict[str, Any]:
    """One iteration of a sparse scheme: 64 workers on a 25 Gbps star, 100M parameters whose
    gradients keep 1% by top-k (1M rows per worker, drawn as real index sets)."""
    return {
        "name": f"{policy}-64",
        "iterations": 1,
        "cluster": {"topology": "star", "hosts": 64, "nic_gbps": 25},
        "workload": {
            "model": "synthetic",
            "gradient_mb": 400,
            "compute_ms": 100,
            "bucket_mb": 800,
            "sparsity": {"topk": 0.01},
        },
        "policies": [{"name": policy}],
        "simulation": {"trace": False},
    }


def numerics_16(policy: str, numerics: bool = True) -> dict[str, Any]:
    """16 workers x 500 iterations training the digits MLP on the DS-Sync 16:1 cluster (ResNet-50 clock)."""
    cfg: dict[str, Any] = {
        "name": f"numerics-{policy}-16",
        "iterations": 500,
        "cluster": {"topology": "two_tier", "racks": 4, "hosts_per_rack": 4, "nic_gbps": 25, "uplink_gbps": 6.25},
        "workload": {"model": "resnet50", "batch_size": 32, "compute_jitter": 0.02},
        "policies": [{"name": policy}],
        "simulation": {"trace": False},
    }
    if numerics:
        cfg["numerics"] = {"model": "mlp", "global_batch": 256, "eval_every": 25, "target_accuracy": 0.95}
    return cfg


SCENARIOS: dict[str, tuple[str, Callable[[], Any]]] = {
    "ring_1024": ("ring all-reduce 100 MB, 1,024 GPUs (32x32, 4:1), pipelined", lambda: ring_config(32, 32)),
    "compare_64": ("ps + ring + hierarchical, 64 GPUs (8x8 NVLink), 100 iterations", comparison_64),
    "asp_256": ("ASP, 256 workers + 8 PS shards, ResNet-50, 100 iterations", asp_256),
    "bert_ring_4096": (
        "BERT-large ring, 4,096 A100 (64x16x4), 39 buckets, 10 iterations",
        lambda: large_job(64, "bert_large", "ring", 16),
    ),
    "bert_hier_4096": (
        "BERT-large hierarchical, 4,096 A100, 39 buckets, 10 iterations",
        lambda: large_job(64, "bert_large", "hierarchical", 16),
    ),
    "resnet_hier_16384": (
        "ResNet-50 hierarchical, 16,384 A100 (256x16x4), 10 iterations",
        lambda: large_job(256, "resnet50", "hierarchical", 32),
    ),
    "resnet_hier_16384_100": (
        "ResNet-50 hierarchical, 16,384 A100 (256x16x4), 100 iterations (issue 48)",
        lambda: large_job(256, "resnet50", "hierarchical", 32, iterations=100),
    ),
    "frontier_hier_131072": (
        "BERT-large hierarchical, 131,072 H100 (512x32x8), 2 iterations (issue 48)",
        lambda: frontier_job(512, "hierarchical"),
    ),
    "frontier_ring_131072": (
        "BERT-large ring, 131,072 H100 (512x32x8), 2 iterations (issue 48)",
        lambda: frontier_job(512, "ring"),
    ),
    "frontier_fsdp_131072": (
        "BERT-large FSDP (full shard), 131,072 H100 (512x32x8), 2 iterations",
        lambda: frontier_job(512, "fsdp"),
    ),
    "bert_ring_1024": (
        "scaling: BERT-large ring, 1,024 A100, 10 iterations",
        lambda: large_job(16, "bert_large", "ring", 16),
    ),
    "bert_ring_16384": (
        "scaling: BERT-large ring, 16,384 A100, 10 iterations",
        lambda: large_job(256, "bert_large", "ring", 16),
    ),
    "resnet_ring_4096": (
        "scaling (buckets): ResNet-50 ring, 4,096 A100, 4 buckets, 10 iterations",
        lambda: large_job(64, "resnet50", "ring", 32),
    ),
    "ring_64": ("scaling: ring 100 MB, 64 GPUs, pipelined", lambda: ring_config(2, 32)),
    "ring_4096": ("scaling: ring 100 MB, 4,096 GPUs (64x64), pipelined", lambda: ring_config(64, 64)),
    "ring_64_stepwise": ("fidelity cost: ring 100 MB, 64 GPUs, stepwise", lambda: ring_config(2, 32, "stepwise")),
    "ring_256_stepwise": ("fidelity cost: ring 100 MB, 256 GPUs, stepwise", lambda: ring_config(8, 32, "stepwise")),
    "zen_64": ("Zen, 64 workers, 100M parameters at 1% (top-k), one iteration", zen_64),
    "sparse_allgather_64": ("  sparse all-gather, the same", lambda: zen_64("sparse_allgather")),
    "numerics_ring_16": ("numerics: ring, 16 workers x 500 it, MLP on digits", lambda: numerics_16("ring")),
    "timing_ring_16": ("  the same, timing only", lambda: numerics_16("ring", numerics=False)),
    "numerics_ds_sync_16": ("numerics: DS-Sync, 16 workers x 500 it, MLP on digits", lambda: numerics_16("ds_sync")),
    "numerics_asp_16": ("numerics: ASP (16 shards), 16 workers x 500 it, MLP on digits", lambda: numerics_16("asp")),
    "timing_asp_16": ("  the same, timing only", lambda: numerics_16("asp", numerics=False)),
}


def measure(name: str) -> dict[str, Any]:
    """Run one scenario in this process and return its figures."""
    from sim.api import simulate

    config = SCENARIOS[name][1]()
    start = time.perf_counter()
    result = simulate(config)
    wall = time.perf_counter() - start
    events = sum(run.events for run in result.runs)
    return {
        "wall_s": wall,
        "events": events,
        "events_per_s": events / sum(run.wall_s for run in result.runs),
        "flows": sum(run.flows for run in result.runs),
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "mean_iteration_ms": float(result.summary["mean_iteration_s"].mean() * 1e3),
        "errors": result.errors,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=list(SCENARIOS))
    parser.add_argument("--one", choices=list(SCENARIOS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one)))
        return 0
    names = args.only or list(SCENARIOS)
    print(f"{'scenario':<68} {'wall s (median)':>15} {'events/s':>10} {'events':>9} {'flows':>9} {'max RSS MB':>10}")
    for name in names:
        runs = []
        for _ in range(args.repeats):
            out = subprocess.run(
                [sys.executable, __file__, "--one", name], capture_output=True, text=True, check=True, cwd=ROOT
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        if any(r["errors"] for r in runs):
            print(f"{name}: errors {runs[0]['errors']}")
            return 1
        med = {k: statistics.median(r[k] for r in runs) for k in ("wall_s", "events_per_s", "max_rss_mb")}
        print(
            f"{SCENARIOS[name][0]:<68} {med['wall_s']:>15.2f} {med['events_per_s']:>10,.0f} "
            f"{runs[0]['events']:>9,} {runs[0]['flows']:>9,} {med['max_rss_mb']:>10.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
