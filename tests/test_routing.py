"""Routes: shortest paths through switches, never through hosts, ECMP spread and stability."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import GBPS, US, bounded, star, synthetic, two_tier

from sim.api import simulate
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.errors import ConfigError


def build(cluster: dict):  # type: ignore[no-untyped-def]
    return build_cluster(parse_config(synthetic(cluster, [{"name": "ring"}])).cluster)


def nodes_of(cluster, path) -> list[str]:  # type: ignore[no-untyped-def]
    links = [cluster.links[i] for i in path]
    for a, b in zip(links, links[1:]):
        assert a.dst == b.src, "links of a path must chain"
    return [links[0].src] + [link.dst for link in links] if links else []


def test_paths_within_host_rack_and_across_racks() -> None:
    c = build(two_tier(2, 2, 50, gpus_per_host=2))
    r = Router(c)
    assert nodes_of(c, r.path("h0.g0", "h0.g1")) == ["h0.g0", "h0", "h0.g1"]
    assert nodes_of(c, r.path("h0.g0", "h1.g0")) == ["h0.g0", "h0", "tor0", "h1", "h1.g0"]
    assert nodes_of(c, r.path("h0.g1", "h3.g1")) == ["h0.g1", "h0", "tor0", "core0", "tor1", "h3", "h3.g1"]
    assert r.path("h2.g0", "h2.g0") == ()


def test_server_paths_end_at_the_server_host() -> None:
    c = build(star(2, server_hosts=1))
    assert nodes_of(c, Router(c).path("h1.g0", "ps0")) == ["h1.g0", "h1", "switch", "ps0"]


def test_ecmp_spreads_pairs_over_core_switches_and_is_stable() -> None:
    c = build(two_tier(2, 16, 100, core_switches=4))
    r = Router(c, seed=7)
    cores = Counter()
    for i in range(16):
        for j in range(16, 32):
            cores[nodes_of(c, r.path(f"h{i}.g0", f"h{j}.g0"))[3]] += 1
    assert set(cores) == {"core0", "core1", "core2", "core3"}
    assert min(cores.values()) > 256 / 4 * 0.6  # a hash, not round robin, but no core is starved
    again = Router(c, seed=7)
    assert all(r.path(f"h{i}.g0", "h20.g0") == again.path(f"h{i}.g0", "h20.g0") for i in range(16))
    other = Router(c, seed=8)
    assert any(r.path(f"h{i}.g0", "h20.g0") != other.path(f"h{i}.g0", "h20.g0") for i in range(16))


def test_hosts_never_forward() -> None:
    """In a custom cluster where a path through a host would be shorter, routes still avoid it."""
    cluster = {
        "topology": "custom",
        "nodes": [
            {"name": "s0", "kind": "switch"},
            {"name": "s1", "kind": "switch"},
            {"name": "s2", "kind": "switch"},
            {"name": "a", "kind": "host"},
            {"name": "b", "kind": "host"},
            {"name": "m", "kind": "host"},
        ],
        "links": [
            {"a": "a", "b": "s0"},
            {"a": "b", "b": "s2"},
            {"a": "s0", "b": "s1"},
            {"a": "s1", "b": "s2"},
            {"a": "m", "b": "s0"},
            {"a": "m", "b": "s2"},
        ],
    }
    c = build(cluster)
    assert nodes_of(c, Router(c).path("a.g0", "b.g0")) == ["a.g0", "a", "s0", "s1", "s2", "b", "b.g0"]
    # a multi-homed host still reaches others through its switches
    assert nodes_of(c, Router(c).path("m.g0", "b.g0")) == ["m.g0", "m", "s2", "b", "b.g0"]


BACK_TO_BACK = {  # two hosts cabled to each other, no switch (once: the route search walked a->b->a...)
    "topology": "custom",
    "link_latency_us": 5.0,
    "nodes": [{"name": "a", "kind": "host", "gpus": 2}, {"name": "b", "kind": "host", "gpus": 2}],
    "links": [{"a": "a", "b": "b", "gbps": 25}],
}


def test_hosts_cabled_back_to_back_route_over_their_cable() -> None:
    c = build(BACK_TO_BACK)
    with bounded(20, "no route (the route search loops)"):
        r = Router(c)
        assert nodes_of(c, r.path("a.g0", "b.g1")) == ["a.g0", "a", "b", "b.g1"]
        assert nodes_of(c, r.path("b.g0", "a.g0")) == ["b.g0", "b", "a", "a.g0"]
        assert nodes_of(c, r.path("a.g0", "a.g1")) == ["a.g0", "a", "a.g1"]
        assert nodes_of(c, r.path("a", "b")) == ["a", "b"]


def test_hosts_cabled_back_to_back_run_a_ring_at_the_closed_form() -> None:
    """Two 1-GPU hosts on one 25 Gbps cable: a ring all-reduce of n bytes is one step each way,
    2 (p-1) alpha + 2 (p-1)/p n/B with p = 2 and alpha = GPU->host (1 us) + cable (5 us) + host->GPU (1 us)."""
    cluster = {**BACK_TO_BACK, "nodes": [{**n, "gpus": 1} for n in BACK_TO_BACK["nodes"]]}
    with bounded(30, "no route (the route search loops)"):
        result = simulate(synthetic(cluster, [{"name": "ring"}], 100.0))
    assert not result.errors, result.errors
    alpha, n = (1 + 5 + 1) * US, 100e6
    assert float(result.summary["mean_iteration_s"].iloc[0]) == pytest.approx(2 * alpha + n / (25 * GBPS), rel=0.01)


def test_a_host_between_two_hosts_is_refused_as_no_route() -> None:
    """Hosts do not forward, so a chain a - m - b (no switch) leaves a and b without a route."""
    line = {
        "topology": "custom",
        "nodes": [{"name": n, "kind": "host"} for n in ("a", "m", "b")],
        "links": [{"a": "a", "b": "m"}, {"a": "m", "b": "b"}],
    }
    with pytest.raises(ConfigError, match=r"cluster\.links: no route joins 'a' and 'b': hosts do not forward"):
        build(line)
