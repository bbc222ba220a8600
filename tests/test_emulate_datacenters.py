"""Emulated clusters across datacenters (real/emulate/datacenters.py): the plan, the commands that build
it (recorded, not run), and one live check where network namespaces can be made (root, iproute2)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import synthetic

from real.emulate import Emulation, emulated_cluster, netns, plan_cluster, state
from real.emulate.names import IFNAMSIZ, owned
from real.emulate.plan import EmulationPlan
from sim.config import parse_config
from sim.errors import ConfigError


def dcs(datacenters: list[dict], wan: dict | None = None, **cluster: object) -> dict:
    return {
        "topology": "multi_datacenter",
        "nic_gbps": 0.2,
        "datacenters": datacenters,
        "wan": wan or {"bandwidth_gbps": 0.05, "rtt_ms": 40},
        **cluster,
    }


def plan(cluster: dict, tag: str = "w", **kwargs: object) -> EmulationPlan:
    config = parse_config(synthetic(cluster, [{"name": "ring"}]))
    return plan_cluster(config.cluster, tag, **kwargs)  # type: ignore[arg-type]


TWO_STARS = dcs([{"name": "east", "topology": "star", "hosts": 2}, {"name": "west", "topology": "star", "hosts": 2}])


def test_two_star_datacenters_are_two_bridges_joined_by_a_wan_veth() -> None:
    p = plan(TWO_STARS)
    assert p.topology == "multi_datacenter" and p.bridges == ("d0sw", "d1sw") and p.uplinks == ()
    assert [(h.name, h.rack, h.namespace, h.port, h.bridge) for h in p.hosts] == [
        ("east.h0", "east", "ssim-w-d0h0", "d0h0-p", "d0sw"),
        ("east.h1", "east", "ssim-w-d0h1", "d0h1-p", "d0sw"),
        ("west.h0", "west", "ssim-w-d1h0", "d1h0-p", "d1sw"),
        ("west.h1", "west", "ssim-w-d1h1", "d1h1-p", "d1sw"),
    ]
    assert {h.rate_bps for h in p.hosts} == {200_000_000}
    (w,) = p.wan
    # 0.05 Gbit/s is 50 Mbit/s each way; the config's round trip is kept, not emulated
    assert (w.a, w.b, w.a_bridge, w.b_bridge, w.a_port, w.b_port) == (
        "east",
        "west",
        "d0sw",
        "d1sw",
        "wan0-1",
        "wan1-0",
    )
    assert (w.rate_bps, w.rtt_ms) == (50_000_000, 40.0)
    assert p.namespaces == ("ssim-w-fabric", "ssim-w-d0h0", "ssim-w-d0h1", "ssim-w-d1h0", "ssim-w-d1h1")


def test_the_wan_is_shaped_both_ways_and_scaled_with_everything_else() -> None:
    p = plan(TWO_STARS, scale=0.5)
    links = p.shaped()
    assert len(links) == 2 * 4 + 2  # each NIC's two ends, the WAN's two ends
    wan = {link.direction: (link.device, link.rate_bps) for link in links if link.direction.startswith("wan")}
    assert wan == {"wan east -> west": ("wan0-1", 25_000_000), "wan west -> east": ("wan1-0", 25_000_000)}
    assert {link.rate_bps for link in links if not link.direction.startswith("wan")} == {100_000_000}


def test_a_two_tier_datacenter_keeps_its_racks_and_its_core_carries_the_wan() -> None:
    p = plan(
        dcs(
            [
                {"name": "east", "topology": "star", "hosts": 1, "nic_gbps": 0.4},
                {"name": "West-2", "topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "uplink_gbps": 0.1},
            ]
        )
    )
    assert p.bridges == ("d0sw", "d1tor0", "d1tor1", "d1core")
    assert {h.name: (h.bridge, h.rate_bps) for h in p.hosts} == {
        "east.h0": ("d0sw", 400_000_000),
        "West-2.h0": ("d1tor0", 200_000_000),
        "West-2.h1": ("d1tor0", 200_000_000),
        "West-2.h2": ("d1tor1", 200_000_000),
        "West-2.h3": ("d1tor1", 200_000_000),
    }
    assert [(u.rack, u.bridge, u.rack_port, u.core_port, u.core, u.rate_bps) for u in p.uplinks] == [
        ("West-2.rack0", "d1tor0", "d1tor0-up", "d1core-0", "d1core", 100_000_000),
        ("West-2.rack1", "d1tor1", "d1tor1-up", "d1core-1", "d1core", 100_000_000),
    ]
    assert [(w.a_bridge, w.b_bridge) for w in p.wan] == [("d0sw", "d1core")]
    assert {link.direction for link in p.shaped() if "core" in link.direction} == {
        "d1tor0 -> d1core",
        "d1core -> d1tor0",
        "d1tor1 -> d1core",
        "d1core -> d1tor1",
    }


def test_wan_links_must_form_a_tree_and_keep_their_own_bandwidth() -> None:
    three = [{"name": n, "topology": "star", "hosts": 1} for n in ("a", "b", "c")]
    with pytest.raises(ConfigError, match=r"cluster.wan.links: emulation needs the WAN links to form a tree \(2 links"):
        plan(dcs(three))  # every pair joined by default: a loop of bridges
    chain = {
        "bandwidth_gbps": 0.05,
        "rtt_ms": 40,
        "links": [{"a": "a", "b": "b"}, {"a": "b", "b": "c", "bandwidth_gbps": 0.02}],
    }
    p = plan(dcs(three, chain))
    assert [(w.a_port, w.b_port, w.rate_bps) for w in p.wan] == [
        ("wan0-1", "wan1-0", 50_000_000),
        ("wan1-2", "wan2-1", 20_000_000),
    ]


def test_traces_and_custom_datacenters_are_refused_by_field(tmp_path: Path) -> None:
    trace = tmp_path / "wan.csv"
    trace.write_text("time_s,gbps\n0,0.05\n1,0.02\n")
    with pytest.raises(ConfigError, match=r"cluster.wan.bandwidth_trace: emulation shapes each link at one fixed rate"):
        plan(dcs(TWO_STARS["datacenters"], {"bandwidth_gbps": 0.05, "rtt_ms": 40, "bandwidth_trace": str(trace)}))
    custom = {
        "name": "c",
        "topology": "custom",
        "nodes": [{"name": "x", "kind": "host"}, {"name": "s", "kind": "switch"}],
        "links": [{"a": "x", "b": "s"}],
    }
    with pytest.raises(ConfigError, match=r"cluster.datacenters\[1\].topology: emulation supports star and two_tier"):
        plan(dcs([TWO_STARS["datacenters"][0], custom]))


def test_up_says_the_wan_has_no_delay() -> None:
    (note,) = plan(TWO_STARS).notes()
    assert "WAN east <-> west" in note and "NO DELAY" in note and "rtt_ms 40" in note
    assert "window / RTT ceiling" in note


def test_names_fit_and_stay_unique_over_many_datacenters() -> None:
    many = [
        {"topology": "two_tier", "racks": 12, "hosts_per_rack": 2, "server_hosts": 1, "uplink_gbps": 0.1}
        for _ in range(20)
    ]
    wan = {"bandwidth_gbps": 0.05, "rtt_ms": 40, "links": [{"a": f"dc{i}", "b": f"dc{i + 1}"} for i in range(19)]}
    p = plan(dcs(many, wan), tag="a" * 20)
    ports = [h.port for h in p.hosts] + [u.rack_port for u in p.uplinks] + [u.core_port for u in p.uplinks]
    ports += [w.a_port for w in p.wan] + [w.b_port for w in p.wan] + list(p.bridges)
    assert len(set(ports)) == len(ports) and max(map(len, ports)) <= IFNAMSIZ
    assert len(set(p.namespaces)) == len(p.namespaces) and all(owned(p.tag, ns) for ns in p.namespaces)
    assert len({h.address for h in p.hosts}) == len(p.hosts) == 20 * 25


def test_build_joins_the_datacenters_and_shapes_the_wan_without_touching_the_system(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[list[str], str | None]] = []
    monkeypatch.setattr(netns, "run", lambda args, stdin=None: calls.append((list(args), stdin)) or "")
    p = plan(TWO_STARS, tag="b")
    netns.build(p)
    fab = ["ip", "-n", "ssim-b-fabric", "link"]
    commands = [args for args, _ in calls]
    assert fab + ["add", "wan0-1", "type", "veth", "peer", "name", "wan1-0"] in commands
    assert fab + ["set", "wan0-1", "master", "d0sw", "up"] in commands
    assert fab + ["set", "wan1-0", "master", "d1sw", "up"] in commands
    assert fab + ["add", "d1h0-p", "type", "veth", "peer", "name", "eth0", "netns", "ssim-b-d1h0"] in commands
    batches = {(args[2], stdin.split()[3]): stdin for args, stdin in calls if args[0] == "tc"}  # (ns, device)
    for device in ("wan0-1", "wan1-0"):
        assert "classid 1:1 htb rate 50000000bit ceil 50000000bit" in batches[("ssim-b-fabric", device)]
    assert len(batches) == 10  # every veth end once: 4 NICs x 2, the WAN x 2


def test_hosts_keep_the_simulators_names_through_the_state_file(tmp_path: Path) -> None:
    emulation = Emulation.from_plan(plan(TWO_STARS, tag="rt"))
    state.write("rt", emulation.to_dict(), tmp_path)
    loaded = Emulation.load("rt", tmp_path)
    assert loaded == emulation
    assert loaded.exec_prefix("west.h1") == ["ip", "netns", "exec", "ssim-rt-d1h1"]
    assert (loaded.address("west.h0"), loaded.host("west.h0").rack) == ("10.213.0.3", "west")


def _why_no_namespaces() -> str:
    from test_emulate_live import _WHY  # the live tests' check: root, iproute2, a namespace can be made

    return _WHY


@pytest.mark.slow
@pytest.mark.skipif(bool(_why_no_namespaces()), reason=f"network namespaces unavailable: {_why_no_namespaces()}")
def test_live_flows_across_the_wan_are_held_to_its_rate(tmp_path: Path) -> None:
    import real.emulate.probe as probe

    tag = f"wan{os.getpid()}"
    config = parse_config(synthetic(TWO_STARS, [{"name": "ring"}]))
    with emulated_cluster(config.cluster, tag, state_dir=tmp_path) as emu:
        assert probe.ping(emu, "east.h0", "west.h1") > 0  # a reply came back across the WAN veth
        inside = sum(probe.measure(emu, [("east.h0", "east.h1")], 5361))
        across = sum(probe.measure(emu, [("east.h0", "west.h0"), ("east.h1", "west.h1")], 5371))
        print(f"\ninside east: {inside / 1e6:.1f} Mbit/s of 200; two flows across the WAN: {across / 1e6:.1f} of 50")
        # load only lowers goodput: the shaper's ceilings (15 % for the window's edges) are what is asserted
        assert 0 < across <= 1.15 * 50e6 and 0 < inside <= 1.15 * 200e6
    assert not any(ns.startswith(f"ssim-{tag}-") for ns in netns.namespaces())
