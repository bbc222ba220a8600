"""Dense all-reduce on oversubscribed racks under the NCCL model: how long it takes, and how busy it
keeps the link that limits it (`python -m sim.experiments.oversubscribed`, docs/fidelity.md).

The cluster: 4 racks of 2 hosts, A100 GPUs (1 or 8 per host), one 100 Gb/s NIC per host, rack
uplinks of 100, 50 or 12.5 Gb/s (2:1, 4:1 and 16:1 oversubscribed). The schemes: NCCL's ring and its
tree over all ranks, and the hierarchical all-reduce (reduce-scatter inside each host, or rack with
one GPU per host; all-reduce of the shards across; all-gather), its collectives as rings. Each case
is one collective (three phases one after another for the hierarchical), run by the engine's
collective runner on the flow network, the path a training run's collectives take.

A case reports its time, NCCL's latency (its base and per-step figures, without the pipeline's fill),
the bandwidth share NCCL's protocol reaches (`efficiency`), and the mean utilisation of the busiest
network link at its line rate over the phase that crosses racks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import simpy

from policies.ops import AllGather, AllReduce, Collective, Group, ReduceScatter
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.collectives import CollectiveRunner
from sim.engine.nccl_plans import nccl_capacity, planner_for
from sim.nccl.fabrics import fabric_of
from sim.nccl.protocols import bandwidth_factor, tree_correction
from sim.nccl.tuner import Choice
from sim.network.flows import Network

RACKS, HOSTS_PER_RACK, NIC_GBPS, GPU = 4, 2, 100.0, "A100"
UPLINK_GBPS = {"2:1": 100.0, "4:1": 50.0, "16:1": 12.5}
SCHEMES = ("ring", "tree", "hierarchical")  # and "auto": one all-reduce as NCCL's tuner picks it


@dataclass(frozen=True)
class Case:
    """One collective of `nbytes` by `scheme` on the `ratio` cluster with `gpus` GPUs per host."""

    ratio: str
    gpus: int
    scheme: str
    nbytes: float

    @property
    def ranks(self) -> int:
        return RACKS * HOSTS_PER_RACK * self.gpus

    def config(self, uplink_gbps: float | None = None) -> dict[str, Any]:
        """The cluster and settings (`uplink_gbps`: another uplink than the ratio's)."""
        return {
            "name": "oversubscribed",
            "cluster": {
                "topology": "two_tier",
                "racks": RACKS,
                "hosts_per_rack": HOSTS_PER_RACK,
                "gpus_per_host": self.gpus,
                "gpu": GPU,
                "nic_gbps": NIC_GBPS,
                "uplink_gbps": uplink_gbps or UPLINK_GBPS[self.ratio],
                "link_latency_us": 1.0,
            },
            "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 1.0},
            "policies": [{"name": "ring"}],
            "simulation": {
                "network_model": "nccl",
                "trace": False,
                "nccl": {"algorithm": self.scheme if self.scheme in ("tree", "auto") else "ring"},
            },
        }

    def phases(self) -> list[list[Collective]]:
        """The collectives of each phase, run one phase after another."""
        n = self.nbytes
        if self.scheme != "hierarchical":
            return [[AllReduce(Group.of(range(self.ranks)), n)]]
        size = self.gpus if self.gpus > 1 else HOSTS_PER_RACK  # a host's GPUs, else a rack's hosts
        local = [Group.of(range(start, start + size)) for start in range(0, self.ranks, size)]
        cross = [Group(tuple(g.ranks[i] for g in local)) for i in range(size)]
        return [
            [ReduceScatter(g, n) for g in local],
            [AllReduce(g, n / size) for g in cross],
            [AllGather(g, n) for g in local],
        ]


@dataclass(frozen=True)
class Outcome:
    seconds: float  # the whole collective (all phases)
    nccl_latency_s: float  # NCCL's latency (base and steps, no fill), summed over phases
    efficiency: float  # the bandwidth share NCCL's protocol reaches (1: Simple ring)
    algorithm: str
    protocol: str
    crossing_utilization: float  # busiest network link's bytes / (its line rate x the crossing phase)
    crossing_link: str


def run(case: Case, uplink_gbps: float | None = None) -> Outcome:
    """Run `case` and measure it (`uplink_gbps`: on other uplinks than its ratio's)."""
    config = parse_config(case.config(uplink_gbps))
    cluster = build_cluster(config.cluster)
    fabric = fabric_of(GPU)
    env, router = simpy.Environment(), Router(cluster)
    capacity = nccl_capacity(cluster, fabric)
    planner = planner_for(cluster, config.simulation, router, capacity)
    net = Network(env, capacity, cluster.latency)
    runner = CollectiveRunner(env, net, router, cluster.rank_gpus, "pipelined", None, planner)
    network = np.array([link.kind != "intra" for link in cluster.links])
    spans: list[tuple[float, float, np.ndarray]] = []

    def phases() -> Iterator[simpy.Event]:
        for ops in case.phases():
            start, before = env.now, net.carried_bytes().copy()
            yield env.all_of([runner.run(op).done for op in ops])
            spans.append((start, env.now, net.carried_bytes() - before))

    env.process(phases())
    env.run()
    latency, efficiency, choice = 0.0, 1.0, None
    for ops in case.phases():
        choice = runner.nccl_choice(ops[0])
        assert choice is not None  # the NCCL model is on
        latency += float(dataclasses.replace(choice.terms, fill_steps=0, net_steps=0).seconds(fabric.slices))
        hosts = len({cluster.graph.nodes[cluster.rank_gpus[r]]["host"] for r in ops[0].group.ranks})
        efficiency = min(efficiency, _efficiency(choice, hosts, ops[0].nbytes))
    crossing = max(spans, key=lambda s: float((s[2] * network).max()))  # the phase that loads the network most
    start, end, carried = crossing
    util = np.where(network, carried / ((end - start) * cluster.capacity), 0.0)
    i = int(np.argmax(util))
    assert choice is not None
    return Outcome(
        env.now,
        latency,
        efficiency,
        choice.algorithm,
        choice.protocol,
        float(util[i]),
        f"{cluster.links[i].src}->{cluster.links[i].dst}",
    )


def _efficiency(choice: Choice, hosts: int, nbytes: float) -> float:
    """The share of the links' bandwidth NCCL's tables give `choice` (its protocol, a tree's correction)."""
    factor = bandwidth_factor(choice.algorithm, choice.protocol, hosts)
    return factor * (tree_correction(choice.protocol, nbytes) if choice.algorithm == "tree" else 1.0)


def table(sizes: tuple[float, ...] = (2**20, 64 * 2**20, 256 * 2**20)) -> pd.DataFrame:
    """Every ratio, GPUs per host, scheme and size."""
    out = []
    for ratio in UPLINK_GBPS:
        for gpus in (1, 8):
            for scheme in SCHEMES:
                for nbytes in sizes:
                    o = run(Case(ratio, gpus, scheme, nbytes))
                    out.append(
                        {
                            "ratio": ratio,
                            "gpus_per_host": gpus,
                            "scheme": scheme,
                            "mib": nbytes / 2**20,
                            "ms": o.seconds * 1e3,
                            "nccl_latency_ms": o.nccl_latency_s * 1e3,
                            "algorithm": f"{o.algorithm}/{o.protocol}",
                            "efficiency": o.efficiency,
                            "bottleneck_busy": o.crossing_utilization,
                            "bottleneck": o.crossing_link,
                        }
                    )
    return pd.DataFrame(out)


def main() -> None:
    with pd.option_context("display.width", 160, "display.max_rows", 200, "display.float_format", "{:.3f}".format):
        print(table().to_string(index=False))


if __name__ == "__main__":
    main()
