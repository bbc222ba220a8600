"""Routes: shortest paths through switches, never through hosts, ECMP spread and stability."""

from __future__ import annotations

from collections import Counter

from helpers import star, synthetic, two_tier

from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config


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
