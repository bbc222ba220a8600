"""Every published nccl-tests figure (sim/catalog/published_collectives.csv) simulated on its own
cluster, with the simulator's bus bandwidth and its error: `syncsim fidelity`, docs/fidelity.md.

Each row becomes a star cluster of the row's hosts, GPUs and NICs under the NCCL model (with the
row's forced algorithm, if any) and one collective of the row's size, run by the engine's collective
runner on the flow network: the same path a training run's collectives take.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import simpy

from policies.ops import AllGather, AllReduce, AllToAll, Group, ReduceScatter
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.collectives import CollectiveRunner
from sim.engine.nccl_plans import nccl_capacity, planner_for
from sim.nccl.fabrics import fabric_of
from sim.nccl.published import LINK_US, Published, rows
from sim.network.flows import Network

OPS = {"all_reduce": AllReduce, "all_gather": AllGather, "reduce_scatter": ReduceScatter, "all_to_all": AllToAll}
DEFAULT_NIC_GBPS = 100.0  # a one-host row's NIC (unused by its collective)


def row_config(row: Published) -> dict[str, Any]:
    """The config (as YAML would give it) of the cluster `row` was measured on."""
    return {
        "name": "fidelity",
        "cluster": {
            "topology": "star",
            "hosts": row.nodes,
            "gpus_per_host": row.gpus_per_node,
            "gpu": row.gpu,
            "nic_gbps": row.nic_gbps or DEFAULT_NIC_GBPS,
            "nics_per_host": row.nics_per_node,
            "link_latency_us": LINK_US,
        },
        "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 1.0},
        "policies": [{"name": "ring"}],
        "simulation": {
            "network_model": "nccl",
            "nccl": {"algorithm": row.algorithm, "transport": row.transport},
            "trace": False,
        },
    }


def simulate(row: Published) -> tuple[float, str, str]:
    """The simulated bus bandwidth (GB/s) of `row`'s collective, and the algorithm and protocol run."""
    config = parse_config(row_config(row))
    cluster = build_cluster(config.cluster)
    env = simpy.Environment()
    router = Router(cluster)
    capacity = nccl_capacity(cluster, fabric_of(row.gpu, row.transport))
    planner = planner_for(cluster, config.simulation, router, capacity)
    net = Network(env, capacity, cluster.latency)
    runner = CollectiveRunner(env, net, router, cluster.rank_gpus, "pipelined", None, planner)
    op = OPS[row.collective](Group.of(range(row.ranks)), row.nbytes)
    runner.run(op)
    env.run()
    choice = runner.nccl_choice(op)
    assert choice is not None  # the NCCL model is on
    return row.bus_factor() * row.nbytes / env.now / 1e9, choice.algorithm, choice.protocol


def scored(row: Published) -> dict[str, Any]:
    """`row` simulated: its collective and cluster, the published and simulated bus bandwidth, the
    error (simulated / published - 1), and the algorithm and protocol run."""
    busbw, algorithm, protocol = simulate(row)
    return {
        "collective": row.collective,
        "gpu": row.gpu,
        "network": row.network,
        "hosts": row.nodes,
        "gpus": row.ranks,
        "size": _size(row.nbytes) if row.sized else "peak",
        "published_gbs": row.busbw_gbs,
        "simulated_gbs": round(busbw, 1),
        "error": busbw / row.busbw_gbs - 1,
        "algorithm": algorithm,
        "protocol": protocol,
        "bug_report": row.bug_report,
    }


def fidelity_table(include_bug_reports: bool = True) -> pd.DataFrame:
    """One line per published figure: the figure, the simulator's, and the error (simulated / published - 1)."""
    figures = rows(include_bug_reports)
    return pd.DataFrame([{"kind": r.kind} | scored(r) | {"system": r.system, "source": r.source} for r in figures])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and worst |error| per kind of row, network and collective (bug reports left out), and how
    many rows each has."""
    scored = table[~table["bug_report"]].assign(abs_error=lambda t: t["error"].abs())
    return scored.groupby(["kind", "network", "collective"]).agg(
        rows=("abs_error", "size"), median=("abs_error", "median"), worst=("abs_error", "max")
    )


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"
