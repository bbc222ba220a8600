"""The three-tier fat tree (sim/cluster/fat_tree.py): each tier's capacity and oversubscription as the
config states them, pods as policies' racks, and a ring across pods or racks held to the closed form
at the oversubscribed tier's bandwidth (every number below is worked by hand from the config)."""

from __future__ import annotations

from typing import Any

import pytest
import simpy
from helpers import GBPS, synthetic

from policies.ops import AllReduce, Group
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.collectives import CollectiveRunner
from sim.errors import ConfigError
from sim.network.flows import Network

MB = 1e6


def fat_tree(**extra: Any) -> dict[str, Any]:
    return {"topology": "fat_tree", "nic_gbps": 100.0, "link_latency_us": 0.0, "intra_host_latency_us": 0.0, **extra}


def cluster_of(cluster: dict[str, Any]):  # type: ignore[no-untyped-def]
    return build_cluster(parse_config(synthetic(cluster, [{"name": "ring"}])).cluster)


def capacities(cluster, src: str, dst: str) -> list[float]:  # type: ignore[no-untyped-def]
    """Gbit/s of every link from a node named `src`* to one named `dst`*."""
    return [
        link.capacity / GBPS
        for link in cluster.links
        if link.src.startswith(src) and link.dst.startswith(dst) and link.kind != "intra"
    ]


def test_each_tier_is_its_downlinks_over_its_oversubscription() -> None:
    # a host: 2 NICs x 100 = 200 Gbit/s; a ToR: 4 hosts = 800 down, / 2 = 400 up, over 2 aggregation
    # switches = 200 a cable; a pod: 3 ToRs x 400 = 1200 down, / 3 = 400 up, over 2 x 2 cables = 100 each
    cfg = fat_tree(
        pods=2,
        racks_per_pod=3,
        hosts_per_rack=4,
        nics_per_host=2,
        aggregation_switches=2,
        spine_switches=2,
        tor_oversubscription=2.0,
        pod_oversubscription=3.0,
    )
    cluster = cluster_of(cfg)
    assert capacities(cluster, "h", "tor") == [200.0] * 24
    assert capacities(cluster, "tor", "agg") == [200.0] * 2 * 6
    assert capacities(cluster, "agg", "spine") == [100.0] * 2 * 2 * 2
    assert capacities(cluster, "spine", "agg") == [100.0] * 2 * 2 * 2
    assert sorted(cluster.view.racks) == ["pod0", "pod1"]
    pod = cluster.view.racks["pod0"]
    assert len(pod.hosts) == 12 and pod.uplink_bytes_per_s == pytest.approx(400 * GBPS)
    assert pod.oversubscription(cluster.view.hosts) == pytest.approx(2.0 * 3.0)  # the tiers multiply
    out, into = cluster.rack_links["pod0"]  # the pod's boundary is its cables to the spines
    assert {(cluster.links[i].src[:3], cluster.links[i].dst[:5]) for i in out} == {("agg", "spine")}
    assert len(out) == len(into) == 4


def test_default_tiers_are_non_blocking() -> None:
    cluster = cluster_of(fat_tree(pods=2, racks_per_pod=2, hosts_per_rack=2))
    pod = cluster.view.racks["pod1"]
    assert pod.oversubscription(cluster.view.hosts) == pytest.approx(1.0)
    assert capacities(cluster, "tor", "agg") == [200.0] * 4


def all_reduce_seconds(cfg: dict[str, Any], nbytes: float, model: str) -> float:
    cluster = cluster_of(cfg)
    env = simpy.Environment()
    net = Network(env, cluster.capacity, cluster.latency)
    runner = CollectiveRunner(env, net, Router(cluster), cluster.rank_gpus, model)
    done = runner.run(AllReduce(Group.of(range(cluster.world_size)), nbytes)).done
    env.run()
    assert done.processed
    return env.now


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_a_ring_across_pods_runs_at_the_spine_tier_bandwidth(model: str) -> None:
    # 8 hosts of 1 GPU, packed: the ring crosses between the pods twice (h3 -> h4, h7 -> h0), once each
    # way through each pod's uplink of 2 racks x 200 / 8 = 50 Gbit/s, half a NIC: every hop waits for it
    n = 80 * MB
    cfg = fat_tree(pods=2, racks_per_pod=2, hosts_per_rack=2, pod_oversubscription=8.0)
    assert all_reduce_seconds(cfg, n, model) == pytest.approx(2 * 7 / 8 * n / (50 * GBPS), rel=1e-9)
    # non-blocking, the NICs bound it instead: twice as fast
    cfg = fat_tree(pods=2, racks_per_pod=2, hosts_per_rack=2)
    assert all_reduce_seconds(cfg, n, model) == pytest.approx(2 * 7 / 8 * n / (100 * GBPS), rel=1e-9)


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_a_ring_across_racks_of_a_pod_runs_at_the_tor_tier_bandwidth(model: str) -> None:
    # one pod of 2 racks of 4 hosts: a ToR sends 4 x 100 / 8 = 50 Gbit/s up; the pod tier is not crossed
    n = 80 * MB
    cfg = fat_tree(pods=1, racks_per_pod=2, hosts_per_rack=4, tor_oversubscription=8.0, pod_oversubscription=50.0)
    assert all_reduce_seconds(cfg, n, model) == pytest.approx(2 * 7 / 8 * n / (50 * GBPS), rel=1e-9)


def test_an_ecmp_flow_takes_one_of_the_equal_cables() -> None:
    # 2 aggregation x 2 spine switches: a pod's 400 Gbit/s uplink is four cables of 100, and one hop
    # between pods (one connection) hashes onto one of them: a ring hop crossing pods gets 100, not 400
    n = 80 * MB
    cfg = fat_tree(pods=2, racks_per_pod=1, hosts_per_rack=1, nics_per_host=4, aggregation_switches=2, spine_switches=2)
    assert all_reduce_seconds(cfg, n, "pipelined") == pytest.approx(2 * 1 / 2 * n / (100 * GBPS), rel=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tor_oversubscription": 0.5}, r"cluster\.tor_oversubscription: Input should be greater than or equal to 1"),
        ({"pod_oversubscription": 0}, r"cluster\.pod_oversubscription: Input should be greater than or equal to 1"),
        ({"pods": 0}, r"cluster\.pods: Input should be greater than or equal to 1"),
        ({"spine_switches": 1.5}, r"cluster\.spine_switches: Input should be a valid integer"),
        ({"racks": 2}, r"cluster: unknown key racks; allowed keys: .*pods, racks_per_pod"),
    ],
)
def test_bad_keys_are_named(change: dict[str, Any], message: str) -> None:
    cfg = {**fat_tree(pods=2, racks_per_pod=2, hosts_per_rack=2), **change}
    with pytest.raises(ConfigError, match=message):
        cluster_of(cfg)


def test_missing_sizes_are_named() -> None:
    with pytest.raises(ConfigError, match=r"cluster\.racks_per_pod: required"):
        cluster_of(fat_tree(pods=2, hosts_per_rack=2))
