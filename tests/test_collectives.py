"""Collectives as flows: each primitive against its closed form, and the pipelined (coarse) model
against the stepwise (fine) one under contention, where they are not equal by construction."""

from __future__ import annotations

import pytest
import simpy
from helpers import GBPS, US, star, synthetic, two_tier

from policies.ops import AllGather, AllReduce, AllToAll, Barrier, Group, ReduceScatter
from sim.api import simulate
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.collectives import CollectiveRunner, ring_steps
from sim.network.flows import Network

MB = 1e6
ALPHA = 12 * US  # GPU-host-switch-host-GPU on the test star
B = 25 * GBPS


def run_collective(op, hosts: int, model: str) -> float:  # type: ignore[no-untyped-def]
    cfg = parse_config(synthetic(star(hosts), [{"name": "ring"}]))
    cluster = build_cluster(cfg.cluster)
    env = simpy.Environment()
    net = Network(env, cluster.capacity, cluster.latency)
    runner = CollectiveRunner(env, net, Router(cluster), cluster.rank_gpus, model)
    done = runner.run(op).done
    env.run()
    assert done.processed
    return env.now


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
@pytest.mark.parametrize("p", [2, 3, 8])
def test_reduce_scatter_and_all_gather(p: int, model: str) -> None:
    n = 64 * MB
    group = Group.of(range(p))
    expected = (p - 1) * ALPHA + (p - 1) / p * n / B
    assert run_collective(ReduceScatter(group, n), p, model) == pytest.approx(expected, rel=1e-9)
    assert run_collective(AllGather(group, n), p, model) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
@pytest.mark.parametrize("p", [2, 5, 8])
def test_all_to_all(p: int, model: str) -> None:
    """Every rank sends n/p to each of the p-1 others at once: its NIC carries (p-1)/p of n."""
    n = 64 * MB
    expected = ALPHA + (p - 1) / p * n / B
    assert run_collective(AllToAll(Group.of(range(p)), n), p, model) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_barrier_costs_latency_only(model: str) -> None:
    assert run_collective(Barrier(Group.of(range(6))), 6, model) == pytest.approx(2 * 5 * ALPHA, rel=1e-9)


def test_single_rank_collective_is_free() -> None:
    assert run_collective(AllReduce(Group.of([3]), 100 * MB), 4, "pipelined") == 0.0


def test_ring_orders_over_arbitrary_group() -> None:
    """A group in scrambled order still forms a ring of p flows with one flow per NIC direction."""
    n, p = 32 * MB, 5
    t = run_collective(AllReduce(Group.of([3, 0, 4, 1, 2]), n), p, "stepwise")
    assert t == pytest.approx(2 * (p - 1) * ALPHA + 2 * (p - 1) / p * n / B, rel=1e-9)


def test_ring_steps() -> None:
    g = Group.of(range(4))
    assert ring_steps(AllReduce(g, 1), 4) == 6
    assert ring_steps(ReduceScatter(g, 1), 4) == 3
    with pytest.raises(TypeError):
        ring_steps(AllToAll(g, 1), 4)


CONTENDED = [
    # (cluster, policies): schedules where flows of different buckets, workers and groups overlap
    (two_tier(4, 4, 25.0), [{"name": "ps", "shards": 4}]),
    (two_tier(4, 4, 100.0), [{"name": "ps"}]),
    (two_tier(2, 4, 12.5), [{"name": "hierarchical", "level": "rack"}]),
    (star(4, gpus_per_host=4), [{"name": "hierarchical", "level": "host"}]),
    (two_tier(2, 3, 10.0), [{"name": "ring"}]),
    # two rings (even and odd ranks) competing for the same uplinks at jitter-shifted times
    (two_tier(4, 4, 25.0), [{"name": "custom_policies:InterleavedRings"}]),
    (two_tier(2, 4, 12.5), [{"name": "custom_policies:InterleavedRings"}]),
]


@pytest.mark.parametrize("cluster, policies", CONTENDED)
def test_pipelined_agrees_with_stepwise_under_contention(cluster: dict, policies: list) -> None:
    """Jittered compute and 8 buckets per iteration make transfers start at different times and
    share links; the coarse model must stay within 3% of the fine one. Measured here: 2.2% for
    colocated PS, 0.03% for the competing rings, 0 where one collective at a time uses each link;
    the largest gap seen in wider sweeps was 2.3% (PS with 16 shards, ResNet-50, non-blocking racks)."""
    times = {}
    for model in ("pipelined", "stepwise"):
        cfg = synthetic(
            cluster,
            policies,
            80,
            compute_ms=60.0,
            iterations=4,
            model=model,
            bucket_mb=10,
            layers=16,
            jitter=0.05,
            seed=3,
        )
        result = simulate(cfg)
        assert not result.errors
        times[model] = float(result.summary["mean_iteration_s"].iloc[0])
    assert times["pipelined"] == pytest.approx(times["stepwise"], rel=0.03)
