"""Building clusters: node and link counts, units, oversubscription, custom wiring and its errors."""

from __future__ import annotations

import pytest
from helpers import GBPS, US, star, synthetic, two_tier

from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.errors import ConfigError


def cluster_of(cluster: dict, policies: list | None = None):  # type: ignore[no-untyped-def]
    return build_cluster(parse_config(synthetic(cluster, policies or [{"name": "ring"}])).cluster)


def kinds(cluster) -> dict[str, int]:  # type: ignore[no-untyped-def]
    out: dict[str, int] = {}
    for _, kind in cluster.graph.nodes(data="kind"):
        out[kind] = out.get(kind, 0) + 1
    return out


def test_star_nodes_links_and_units() -> None:
    c = cluster_of(star(3, nic_gbps=40, gpus_per_host=2, server_hosts=1))
    assert kinds(c) == {"switch": 1, "host": 3, "gpu": 6, "server": 1}
    # duplex cables: 6 GPU-host + 4 host/server-switch, two directed links each
    assert len(c.links) == 2 * (6 + 4)
    nic = [link for link in c.links if link.kind == "nic"]
    assert {link.capacity for link in nic} == {40 * GBPS}
    assert {link.latency for link in nic} == {5 * US}
    assert c.world_size == 6 and c.rank_gpus[:3] == ("h0.g0", "h0.g1", "h1.g0")
    assert c.view.server_hosts == ("ps0",)
    assert c.view.hosts["h1"].ranks == (2, 3)


def test_two_tier_oversubscription_and_racks() -> None:
    c = cluster_of(two_tier(4, 4, uplink_gbps=6.25))
    assert kinds(c) == {"switch": 5, "host": 16, "gpu": 16}
    uplinks = [link for link in c.links if link.kind == "uplink"]
    assert len(uplinks) == 8 and {link.capacity for link in uplinks} == {6.25 * GBPS}
    rack = c.view.racks["rack2"]
    assert rack.hosts == ("h8", "h9", "h10", "h11")
    assert rack.oversubscription(c.view.hosts) == pytest.approx(16.0)
    assert c.view.rack_of(9) == "rack2"


def test_two_tier_default_uplink_is_non_blocking() -> None:
    cfg = synthetic(two_tier(2, 3, uplink_gbps=1.0), [{"name": "ring"}])
    del cfg["cluster"]["uplink_gbps"]
    c = build_cluster(parse_config(cfg).cluster)
    assert c.view.racks["rack0"].oversubscription(c.view.hosts) == pytest.approx(1.0)


def test_two_tier_core_switches_split_the_uplink() -> None:
    c = cluster_of(two_tier(2, 2, uplink_gbps=40, core_switches=4))
    uplinks = [link for link in c.links if link.kind == "uplink"]
    assert len(uplinks) == 2 * 2 * 4 and {link.capacity for link in uplinks} == {10 * GBPS}
    assert c.view.racks["rack0"].uplink_bytes_per_s == pytest.approx(40 * GBPS)


def test_server_hosts_spread_over_racks() -> None:
    c = cluster_of(two_tier(3, 2, uplink_gbps=50, server_hosts=4))
    assert [c.view.hosts[s].rack for s in c.view.server_hosts] == ["rack0", "rack1", "rack2", "rack0"]


def test_intra_host_bandwidth_defaults_to_gpu_and_can_be_set() -> None:
    default = cluster_of(star(1, gpus_per_host=2, gpu="A100"))
    set_ = cluster_of(star(1, gpus_per_host=2, intra_host_gbps=64))
    assert {link.capacity for link in default.links if link.kind == "intra"} == {2400 * GBPS}
    assert {link.capacity for link in set_.links if link.kind == "intra"} == {64 * GBPS}


CUSTOM = {
    "topology": "custom",
    "nodes": [
        {"name": "core", "kind": "switch"},
        {"name": "t0", "kind": "switch"},
        {"name": "t1", "kind": "switch"},
        {"name": "a", "kind": "host", "rack": "r0", "gpus": 2},
        {"name": "b", "kind": "host", "rack": "r0"},
        {"name": "c", "kind": "host", "rack": "r1"},
    ],
    "links": [
        {"a": "a", "b": "t0", "gbps": 10},
        {"a": "b", "b": "t0", "gbps": 10},
        {"a": "c", "b": "t1", "gbps": 10},
        {"a": "t0", "b": "core", "gbps": 5},
        {"a": "t1", "b": "core", "gbps": 40, "latency_us": 50},
    ],
}


def test_custom_topology_racks_and_min_cut_uplinks() -> None:
    c = cluster_of(CUSTOM)
    assert c.world_size == 4  # a has 2 GPUs, b and c the default 1
    assert c.view.racks["r0"].uplink_bytes_per_s == pytest.approx(5 * GBPS)  # the ToR-core link
    # the uplink is the ToR-core link, as in two_tier, even where the rack's NICs sum to less
    assert c.view.racks["r1"].uplink_bytes_per_s == pytest.approx(40 * GBPS)
    assert c.view.racks["r1"].oversubscription(c.view.hosts) == pytest.approx(0.25)
    slow = [link for link in c.links if {link.src, link.dst} == {"t1", "core"}]
    assert {link.latency for link in slow} == {50 * US}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["links"].append({"a": "a", "b": "nowhere"}), r"cluster\.links\[5\]: unknown node 'nowhere'"),
        (lambda c: c["nodes"].append({"name": "a", "kind": "switch"}), "node name 'a' is used twice"),
        (lambda c: c["links"].append({"a": "t0", "b": "a"}), r"links\[5\]: links\[0\] already joins 't0' and 'a'"),
        (lambda c: c["links"].append({"a": "t0", "b": "t0"}), r"links\[5\]: joins 't0' to itself"),
        (lambda c: c["links"].pop(), r"cluster\.links: the network is not connected \(2 separate parts"),
        (lambda c: c["nodes"].append({"name": "a.g1", "kind": "server"}), "'a.g1' is the name of host 'a''s GPU 1"),
        (lambda c: c["nodes"].append({"name": "s", "kind": "switch", "gpus": 2}), r"nodes\[6\]\.gpus: applies only"),
        (lambda c: c["nodes"].append({"name": "s", "kind": "switch", "rack": "r0"}), r"nodes\[6\]\.rack: applies"),
    ],
)
def test_custom_topology_errors(change, message: str) -> None:  # type: ignore[no-untyped-def]
    bad = {**CUSTOM, "nodes": list(CUSTOM["nodes"]), "links": list(CUSTOM["links"])}
    change(bad)
    with pytest.raises(ConfigError, match=message):
        cluster_of(bad)


def test_custom_topology_reports_every_problem_in_one_pass() -> None:
    bad = {**CUSTOM, "nodes": [*CUSTOM["nodes"], {"name": "b", "kind": "switch"}]}
    bad["links"] = [*CUSTOM["links"][:-1], {"a": "c", "b": "nowhere"}, {"a": "b", "b": "t0"}]  # t1's part cut off
    with pytest.raises(ConfigError) as caught:
        parse_config(synthetic(bad, [{"name": "ring"}]))
    assert str(caught.value).splitlines() == [
        "cluster.nodes[6].name: node name 'b' is used twice",
        "cluster.links[4]: unknown node 'nowhere'; allowed: the names under cluster.nodes",
        "cluster.links[5]: links[1] already joins 'b' and 't0'; merge them into one",
        "cluster.links: the network is not connected (2 separate parts, containing 'a', 'c')",
    ]
