"""The rail-optimized fabric (sim/cluster/rails.py) and its routes (sim/cluster/routing.py): the wiring
as the config states it, PXN's rule (a flow to a GPU keeps to that GPU's rail), rings whose hops keep to
one rail switch, and all-reduces against the alpha-beta closed form at nics_per_host x nic_gbps."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
import simpy
from helpers import GBPS, synthetic

from policies.ops import AllReduce, Collective, Group
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.collectives import CollectiveRunner
from sim.engine.nccl_plans import nccl_capacity, planner_for
from sim.errors import ConfigError
from sim.nccl.fabrics import fabric_of
from sim.network.flows import Network

MB = 1e6
NIC = 100.0  # Gbit/s


def rails(**extra: Any) -> dict[str, Any]:
    return {
        "topology": "rail_optimized",
        "nic_gbps": NIC,
        "gpus_per_host": 4,
        "nics_per_host": 4,
        "link_latency_us": 0.0,
        "intra_host_latency_us": 0.0,
        "intra_host_gbps": 1e5,  # NVLink far faster than the rails: only the rails bound the rings below
        **extra,
    }


def config_of(cluster: dict[str, Any], network_model: str = "ideal"):  # type: ignore[no-untyped-def]
    cfg = synthetic(cluster, [{"name": "ring"}])
    cfg["simulation"]["network_model"] = network_model
    return parse_config(cfg)


def cluster_of(cluster: dict[str, Any]):  # type: ignore[no-untyped-def]
    return build_cluster(config_of(cluster).cluster)


def test_nic_i_of_every_host_of_a_group_is_on_its_rail_switch_i() -> None:
    # 2 GPUs a NIC; a rail switch: 3 hosts x 100 = 300 Gbit/s down, / 2 = 150 up, over 3 spines = 50 each
    cluster = cluster_of(
        rails(rail_groups=2, hosts_per_group=3, gpus_per_host=8, spine_switches=3, rail_oversubscription=2.0)
    )
    for h in range(6):
        ends = sorted((link.dst, link.capacity / GBPS) for link in cluster.links if link.src == f"h{h}")
        gpus, nics = ends[:8], ends[8:]
        assert [dst for dst, _ in gpus] == [f"h{h}.g{j}" for j in range(8)]
        assert nics == [(f"rail{h // 3}.{i}", NIC) for i in range(4)]
        assert [cluster.graph.nodes[f"h{h}.g{j}"]["rail"] for j in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    ups = [link.capacity / GBPS for link in cluster.links if link.src.startswith("rail") and link.kind == "uplink"]
    assert ups == [50.0] * (2 * 4 * 3)
    assert sorted(cluster.view.racks) == ["group0", "group1"]
    group = cluster.view.racks["group0"]
    assert group.hosts == ("h0", "h1", "h2") and group.uplink_bytes_per_s == pytest.approx(4 * 150 * GBPS)
    assert group.oversubscription(cluster.view.hosts) == pytest.approx(2.0)
    assert cluster.view.hosts["h0"].nic_bytes_per_s == pytest.approx(4 * NIC * GBPS)


def switches_on(cluster, path) -> list[str]:  # type: ignore[no-untyped-def]
    return [cluster.links[i].dst for i in path if cluster.graph.nodes[cluster.links[i].dst]["kind"] == "switch"]


def test_a_flow_to_a_gpu_keeps_to_that_gpus_rail() -> None:
    """PXN: leave the source host on the destination GPU's rail; inside a group one rail switch, between
    groups that rail's switches and a spine, never a switch of another rail."""
    cluster = cluster_of(rails(rail_groups=2, hosts_per_group=2, spine_switches=2))
    router = Router(cluster)
    for src, dst in itertools.permutations(cluster.rank_gpus, 2):
        rail = cluster.graph.nodes[dst]["rail"]
        hosts = cluster.graph.nodes[src]["host"], cluster.graph.nodes[dst]["host"]
        on = switches_on(cluster, router.path(src, dst))
        groups = [int(h[1:]) // 2 for h in hosts]
        if hosts[0] == hosts[1]:
            assert on == []  # NVLink only
        elif groups[0] == groups[1]:
            assert on == [f"rail{groups[0]}.{rail}"]
        else:
            assert (
                on[0] == f"rail{groups[0]}.{rail}"
                and on[1].startswith("spine")
                and on[2:] == [f"rail{groups[1]}.{rail}"]
            )


def test_a_ring_of_one_gpu_per_host_crosses_one_rail_switch_a_step() -> None:
    """Rank r's GPU g talks to GPU g of the next host through NIC g: every hop of the ring of GPUs g
    has one route, through rail switch g of the group and nothing else."""
    cluster = cluster_of(rails(rail_groups=1, hosts_per_group=4))
    router = Router(cluster)
    for g in range(4):
        nodes = [f"h{h}.g{g}" for h in range(4)]
        for hop in router.ring_hops(nodes):
            assert len(hop) == 1 and switches_on(cluster, hop[0]) == [f"rail0.{g}"]


def test_a_ring_over_whole_hosts_spreads_each_hop_over_every_rail() -> None:
    cluster = cluster_of(rails(rail_groups=1, hosts_per_group=3))
    hops = Router(cluster).ring_hops(list(cluster.rank_gpus))
    crossing = [hop for hop in hops if len(hop) > 1]
    assert len(crossing) == 3  # h0 -> h1, h1 -> h2, h2 -> h0
    for hop in crossing:
        assert sorted(s for route in hop for s in switches_on(cluster, route)) == [f"rail0.{i}" for i in range(4)]


def run(cluster: dict[str, Any], ops: list[Collective], model: str = "pipelined") -> tuple[float, np.ndarray, Any]:
    """Seconds until every op is done, with the bytes each link carried, and the cluster."""
    built = cluster_of(cluster)
    env = simpy.Environment()
    net = Network(env, built.capacity, built.latency)
    runner = CollectiveRunner(env, net, Router(built), built.rank_gpus, model)
    done = [runner.run(op).done for op in ops]
    env.run()
    assert all(event.processed for event in done)
    return env.now, net.carried_bytes(), built


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
@pytest.mark.parametrize("groups", [1, 2])
def test_rail_aligned_rings_reach_the_closed_form_at_every_nic(model: str, groups: int) -> None:
    """A host's n bytes all-reduced over H hosts as 4 rings, GPU g's over rail g, n/4 each: the
    alpha-beta ring 2 (H-1)/H n / B with B = 4 NICs x 100 Gbit/s (no latency), across groups too."""
    n, hosts = 80 * MB, 4
    cfg = rails(rail_groups=groups, hosts_per_group=hosts // groups)
    ops: list[Collective] = [AllReduce(Group.of([h * 4 + g for h in range(hosts)]), n / 4) for g in range(4)]
    seconds, carried, cluster = run(cfg, ops, model)
    assert seconds == pytest.approx(2 * (hosts - 1) / hosts * n / (4 * NIC * GBPS), rel=1e-9)
    nics = [i for i, link in enumerate(cluster.links) if link.kind == "nic"]
    # every NIC carried its ring's 2 (H-1)/H x n/4 each way
    assert carried[nics] == pytest.approx(np.full(len(nics), 2 * (hosts - 1) / hosts * n / 4), rel=1e-9)


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_a_ring_over_whole_hosts_reaches_the_closed_form_at_every_nic(model: str) -> None:
    """One ring through all 16 GPUs: each hop carries 2 (p-1)/p n; a hop between hosts spread over the
    4 rails moves it at 4 x 100 Gbit/s, NVLink hops far faster, so the ring takes 2 (p-1)/p n / 400."""
    n, p = 80 * MB, 16
    seconds, _, _ = run(rails(rail_groups=2, hosts_per_group=2), [AllReduce(Group.of(range(p)), n)], model)
    assert seconds == pytest.approx(2 * (p - 1) / p * n / (4 * NIC * GBPS), rel=1e-9)


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_rings_between_groups_wait_for_the_oversubscribed_rail_uplink(model: str) -> None:
    # 2 groups of 2 hosts, rail_oversubscription 4: a rail switch sends 2 x 100 / 4 = 50 Gbit/s to the
    # spine; ring g crosses between the groups once each way (h1 -> h2, h3 -> h0) on rail g: 50 a hop
    n, hosts = 80 * MB, 4
    cfg = rails(rail_groups=2, hosts_per_group=2, rail_oversubscription=4.0)
    ops: list[Collective] = [AllReduce(Group.of([h * 4 + g for h in range(hosts)]), n / 4) for g in range(4)]
    seconds, _, _ = run(cfg, ops, model)
    assert seconds == pytest.approx(2 * (hosts - 1) / hosts * (n / 4) / (50 * GBPS), rel=1e-9)


def nccl_seconds(cluster: dict[str, Any], nbytes: float) -> tuple[str, float]:
    cfg = config_of(cluster, "nccl")
    built = build_cluster(cfg.cluster)
    router = Router(built)
    capacity = nccl_capacity(built, fabric_of(built.gpu.name))
    planner = planner_for(built, cfg.simulation, router, capacity)
    env = simpy.Environment()
    runner = CollectiveRunner(
        env, Network(env, capacity, built.latency), router, built.rank_gpus, "pipelined", None, planner
    )
    op = AllReduce(Group.of(range(built.world_size)), nbytes)
    choice = runner.nccl_choice(op)
    assert choice is not None
    runner.run(op)
    env.run()
    return choice.algorithm, env.now


@pytest.mark.parametrize("nbytes", [1 * MB, 64 * MB, 1000 * MB])
def test_under_nccl_one_rail_group_is_a_star_of_hosts_with_the_nics_summed(nbytes: float) -> None:
    """Non-blocking rails with every hop spread over them move what one link of the NICs' sum moves
    (the star's model of a DGX host): NCCL picks the same algorithm and it takes the same time."""
    base = {"gpu": "H100", "gpus_per_host": 8, "nics_per_host": 8, "nic_gbps": 400.0, "link_latency_us": 2.0}
    star = nccl_seconds({"topology": "star", "hosts": 4, **base}, nbytes)
    rail = nccl_seconds({"topology": "rail_optimized", "rail_groups": 1, "hosts_per_group": 4, **base}, nbytes)
    assert rail[0] == star[0]
    assert rail[1] == pytest.approx(star[1], rel=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"nics_per_host": 3}, r"cluster\.nics_per_host: must divide gpus_per_host \(4\)"),
        ({"rail_oversubscription": 0.9}, r"cluster\.rail_oversubscription: Input should be greater than or equal"),
        ({"rail_groups": 0}, r"cluster\.rail_groups: Input should be greater than or equal to 1"),
        ({"hosts_per_rack": 2}, r"cluster: unknown key hosts_per_rack; allowed keys: .*rail_groups, hosts_per_group"),
    ],
)
def test_bad_keys_are_named(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cluster_of({**rails(rail_groups=1, hosts_per_group=2), **change})
