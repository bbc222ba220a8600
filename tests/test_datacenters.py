"""Clusters across datacenters (sim/cluster/datacenters.py, docs/wan.md): how they are built, which links
their routes cross, and the alpha-beta closed forms on them (one flow, a ring all-reduce, a trace)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import simpy
import yaml
from helpers import GBPS, US, synthetic

from sim.api import simulate
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import load_config, parse_config
from sim.network.flows import Network
from sim.network.traces import follow_traces

MB = 1e6
RTT = 0.05  # every WAN here: 1 Gb/s, 50 ms unless a case says otherwise
WAN_BPS = 1 * GBPS
NIC_US, INTRA_US = 5.0, 1.0  # link_latency_us below, and the default intra_host_latency_us


def two_datacenters(hosts: int = 2, gpus: int = 2, **wan: object) -> dict:
    return {
        "topology": "multi_datacenter",
        "gpus_per_host": gpus,
        "nic_gbps": 100,
        "link_latency_us": NIC_US,
        "datacenters": [
            {"name": "east", "topology": "star", "hosts": hosts},
            {"name": "west", "topology": "star", "hosts": hosts},
        ],
        "wan": {"bandwidth_gbps": 1, "rtt_ms": RTT * 1e3, **wan},
    }


def built(cluster: dict, seed: int = 0):  # type: ignore[no-untyped-def]
    return build_cluster(parse_config(synthetic(cluster, [{"name": "ring"}])).cluster, seed)


def wan_ids(cluster) -> set[int]:  # type: ignore[no-untyped-def]
    return {i for cable in cluster.wan for i in cable.links}


# ----------------------------------------------------------------------------- building
def test_datacenters_are_named_racked_and_joined_by_one_wan_cable() -> None:
    c = built(two_datacenters(hosts=2, gpus=2))
    assert c.datacenters == {"east": ("east.h0", "east.h1"), "west": ("west.h0", "west.h1")}
    assert c.rank_gpus[:3] == ("east.h0.g0", "east.h0.g1", "east.h1.g0") and c.world_size == 8
    assert c.view.rack_of(5) == "west" and set(c.view.racks) == {"east", "west"}  # a star datacenter is a rack
    (cable,) = c.wan
    there, back = (c.links[i] for i in cable.links)
    assert (there.src, there.dst, back.src, back.dst) == ("east", "west", "west", "east")
    assert there.capacity == back.capacity == WAN_BPS and there.latency == back.latency == RTT / 2
    assert cable.flow_cap == np.inf and c.flow_cap is None and not c.capacity_traces
    # the border: no latency, and the capacity of the gateway's own ports (two hosts' NICs)
    border = c.links[c.graph.edges["east.switch", "east"]["link"]]
    assert border.latency == 0.0 and border.capacity == 2 * 100 * GBPS


def test_each_datacenter_keeps_its_own_topology_and_keys() -> None:
    cluster = two_datacenters()
    cluster["datacenters"][1] = {
        "name": "west",
        "topology": "two_tier",
        "racks": 2,
        "hosts_per_rack": 1,
        "core_switches": 2,
        "nic_gbps": 25,
        "gpus_per_host": 4,
    }
    cluster["wan"]["connection_window_mb"] = 2
    cluster["wan"]["connections"] = 3
    c = built(cluster)
    assert c.world_size == 2 * 2 + 2 * 4
    assert set(c.view.racks) == {"east", "west.rack0", "west.rack1"}
    assert (
        c.view.hosts["west.h1"].nic_bytes_per_s == 25 * GBPS and c.view.hosts["east.h0"].nic_bytes_per_s == 100 * GBPS
    )
    # both core switches carry the WAN, each cabled to the border at the capacity of its links down to the
    # two ToRs (a rack's default uplink, one host's 25 Gb/s, is split over the two cores)
    for core in ("west.core0", "west.core1"):
        assert c.links[c.graph.edges[core, "west"]["link"]].capacity == 2 * (25 * GBPS / 2)
    assert c.wan[0].flow_cap == pytest.approx(3 * 2 * MB / RTT)
    assert set(np.flatnonzero(np.isfinite(c.flow_cap))) == wan_ids(c)


def test_full_mesh_by_default_or_the_links_named() -> None:
    cluster = two_datacenters(hosts=1, gpus=1)
    cluster["datacenters"].append({"name": "north", "topology": "star", "hosts": 1})
    assert {(w.a, w.b) for w in built(cluster).wan} == {("east", "west"), ("east", "north"), ("west", "north")}
    cluster["wan"]["links"] = [{"a": "east", "b": "west"}, {"a": "west", "b": "north", "rtt_ms": 80}]
    c = built(cluster)
    assert [(w.a, w.b, w.rtt) for w in c.wan] == [("east", "west", RTT), ("west", "north", 0.08)]


# ----------------------------------------------------------------------------- routes
def test_routes_between_datacenters_cross_the_wan_link_and_routes_inside_do_not() -> None:
    c = built(two_datacenters(hosts=2, gpus=2))
    router, there, back = Router(c), *c.wan[0].links
    east = {r for r in range(c.world_size) if c.view.host_of(r).startswith("east.")}
    for a in range(c.world_size):
        for b in range(c.world_size):
            path = set(router.path(c.rank_gpus[a], c.rank_gpus[b]))
            if (a in east) == (b in east):
                assert not path & {there, back}
            else:
                assert path & {there, back} == {there if a in east else back}


def test_a_chain_of_datacenters_routes_through_the_middle_one() -> None:
    cluster = two_datacenters(hosts=1, gpus=1)
    cluster["datacenters"].append({"name": "north", "topology": "star", "hosts": 1})
    cluster["wan"]["links"] = [{"a": "east", "b": "west"}, {"a": "west", "b": "north", "rtt_ms": 80}]
    c = built(cluster)
    path = Router(c).path("east.h0.g0", "north.h0.g0")
    assert [(c.links[i].src, c.links[i].dst) for i in path if i in wan_ids(c)] == [("east", "west"), ("west", "north")]
    # one-way latency: the two GPU links, the two NIC links, and half of each round trip
    assert sum(c.links[i].latency for i in path) == pytest.approx((2 * INTRA_US + 2 * NIC_US) * US + 0.025 + 0.04)


# ----------------------------------------------------------------------------- closed forms
ALPHA = (2 * INTRA_US + 2 * NIC_US) * US + RTT / 2  # GPU -> host -> switch -> WAN -> switch -> host -> GPU


@pytest.mark.parametrize("window_mb, connections", [(None, 1), (2.0, 1), (2.0, 4)])
def test_one_flow_between_datacenters(window_mb: float | None, connections: int) -> None:
    wan = {} if window_mb is None else {"connection_window_mb": window_mb, "connections": connections}
    c = built(two_datacenters(hosts=1, gpus=1, **wan))
    env = simpy.Environment()
    net = Network(env, c.capacity, c.latency, c.flow_cap)
    n = 50 * MB
    done = net.transfer([Router(c).path("east.h0.g0", "west.h0.g0")], n)
    env.run(done)
    rate = WAN_BPS if window_mb is None else min(WAN_BPS, connections * window_mb * MB / RTT)
    assert env.now == pytest.approx(ALPHA + n / rate, rel=1e-9)


def ring_allreduce(p: int, n: float, alpha: float, bandwidth: float) -> float:
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / bandwidth


def ring_seconds(cluster: dict, mb: float, model: str) -> float:
    result = simulate(synthetic(cluster, [{"name": "ring"}], mb, model=model))
    assert not result.errors, result.errors
    return float(result.summary["mean_iteration_s"].iloc[0])


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
@pytest.mark.parametrize("window_mb", [None, 1.0])  # 1 MB per 50 ms: 20 MB/s, under the link's 125 MB/s
def test_ring_allreduce_across_two_datacenters(model: str, window_mb: float | None) -> None:
    # 8 ranks, 4 per datacenter: the ring crosses the WAN once each way, one flow per direction, so its
    # bottleneck is the WAN's bandwidth or one flow's window, and its slowest hop the WAN crossing.
    wan = {} if window_mb is None else {"connection_window_mb": window_mb}
    mb = 20.0
    bandwidth = WAN_BPS if window_mb is None else window_mb * MB / RTT
    got = ring_seconds(two_datacenters(hosts=2, gpus=2, **wan), mb, model)
    assert got == pytest.approx(ring_allreduce(8, mb * MB, ALPHA, bandwidth), rel=1e-6)


def test_a_bandwidth_trace_is_followed_in_a_run(tmp_path: Path) -> None:
    # The trace halves the WAN from t = 0: the ring's bottleneck is 0.5 Gb/s. The path is relative to the
    # config file.
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "wan.csv").write_text("# a halved link\ntime_s,gbps\n0,0.5\n")
    cluster = two_datacenters(hosts=1, gpus=2, bandwidth_trace="traces/wan.csv")
    config = synthetic(cluster, [{"name": "ring"}], 10.0)
    (tmp_path / "wan.yaml").write_text(yaml.safe_dump(config))
    result = simulate(load_config(tmp_path / "wan.yaml"))
    got = float(result.summary["mean_iteration_s"].iloc[0])
    assert got == pytest.approx(ring_allreduce(4, 10 * MB, ALPHA, WAN_BPS / 2), rel=1e-6)


def test_a_trace_step_mid_transfer_on_a_built_cluster(tmp_path: Path) -> None:
    # 1 Gb/s until 0.2 s, then 0.25 Gb/s: 50 MB from t = 0 moves 25 MB by 0.2 s, the other 25 MB at
    # 31.25 MB/s in 0.8 s; delivered ALPHA later.
    trace = tmp_path / "wan.csv"
    trace.write_text("time_s,gbps\n0.2,0.25\n")
    c = built(two_datacenters(hosts=1, gpus=1, bandwidth_trace=str(trace)))
    env = simpy.Environment()
    net = Network(env, c.capacity, c.latency, c.flow_cap)
    follow_traces(env, net, c.capacity_traces)
    done = net.transfer([Router(c).path("east.h0.g0", "west.h0.g0")], 50 * MB)
    env.run(done)
    assert env.now == pytest.approx(0.2 + 25 * MB / (0.25 * GBPS) + ALPHA, rel=1e-9)


def test_the_cost_estimate_counts_what_is_built() -> None:
    # `syncsim check` estimates a run before building its cluster: its counts must be the built ones
    from sim.estimate.counts import shape_of

    cluster = two_datacenters(hosts=2, gpus=2)
    cluster["datacenters"][0]["server_hosts"] = 1
    cluster["datacenters"][1] = {
        "name": "west",
        "topology": "two_tier",
        "racks": 2,
        "hosts_per_rack": 2,
        "core_switches": 2,
    }
    nodes = [{"name": "s", "kind": "switch"}, {"name": "h", "kind": "host"}]
    cluster["datacenters"].append(
        {"name": "north", "topology": "custom", "nodes": nodes, "links": [{"a": "h", "b": "s"}]}
    )
    config = parse_config(synthetic(cluster, [{"name": "ring"}]))
    shape, c = shape_of(config), build_cluster(config.cluster)
    assert (shape.links, shape.workers, shape.hosts, shape.racks, shape.server_hosts) == (
        len(c.links), c.world_size, len(c.view.worker_hosts), len(c.view.racks), len(c.view.server_hosts)
    )  # fmt: skip
