"""Emulation plans, names, shaping (tbf, fair queues), state files and the CLI's errors: everything that needs
no root."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

import pytest
from helpers import star, synthetic, two_tier

from real.emulate import Emulation, EmulationError, emulated_cluster, netns, plan_cluster, plan_config, state
from real.emulate import cli as emulate_cli
from real.emulate.names import IFNAMSIZ, check_tag, namespace_prefix, owned, tag_from_name
from real.emulate.plan import EmulationPlan
from real.emulate.shaping import FAIR_BUCKETS, GSO_MAX, QUEUES, shaping_for
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.errors import ConfigError


def config(cluster: dict, name: str = "test"):  # type: ignore[no-untyped-def]
    return parse_config({**synthetic(cluster, [{"name": "ring"}]), "name": name})


def plan(cluster: dict, tag: str = "t", **kwargs: object) -> EmulationPlan:
    return plan_cluster(config(cluster).cluster, tag, **kwargs)  # type: ignore[arg-type]


def interfaces(p: EmulationPlan) -> list[tuple[str, str]]:
    """(namespace, interface) for every interface the plan creates."""
    out = [(p.fabric, b) for b in p.bridges]
    out += [(h.namespace, h.interface) for h in p.hosts] + [(p.fabric, h.port) for h in p.hosts]
    out += [(p.fabric, u.rack_port) for u in p.uplinks] + [(p.fabric, u.core_port) for u in p.uplinks]
    return out


def test_star_is_one_bridge_with_every_host_on_it() -> None:
    p = plan(star(3, nic_gbps=0.2, server_hosts=1, server_nic_gbps=0.4), tag="s1")
    assert p.topology == "star" and p.bridges == ("switch",) and p.uplinks == ()
    assert [h.name for h in p.hosts] == ["h0", "h1", "h2", "ps0"]
    assert {h.bridge for h in p.hosts} == {"switch"}
    assert [h.rate_bps for h in p.hosts] == [200_000_000] * 3 + [400_000_000]
    assert p.fabric == "ssim-s1-fabric" and p.namespaces[1:] == tuple(f"ssim-s1-{h}" for h in ("h0", "h1", "h2", "ps0"))


def test_two_tier_racks_hang_off_their_tor_and_uplinks_join_the_core() -> None:
    p = plan(two_tier(2, 2, uplink_gbps=0.1, nic_gbps=0.2, server_hosts=1))
    assert p.bridges == ("tor0", "tor1", "core")
    assert {h.name: h.bridge for h in p.hosts} == {
        "h0": "tor0",
        "h1": "tor0",
        "h2": "tor1",
        "h3": "tor1",
        "ps0": "tor0",
    }
    assert [(u.rack, u.bridge, u.rack_port, u.core_port, u.rate_bps) for u in p.uplinks] == [
        ("rack0", "tor0", "tor0-up", "core-tor0", 100_000_000),
        ("rack1", "tor1", "tor1-up", "core-tor1", 100_000_000),
    ]
    # host names, racks and rates are the simulator's
    view = build_cluster(config(two_tier(2, 2, uplink_gbps=0.1, nic_gbps=0.2, server_hosts=1)).cluster).view
    assert {h.name: h.rack for h in p.hosts} == {name: info.rack for name, info in view.hosts.items()}


def test_every_link_is_shaped_in_both_directions() -> None:
    p = plan(two_tier(3, 2, uplink_gbps=0.1, nic_gbps=0.2))
    links = p.shaped()
    assert len(links) == 2 * len(p.hosts) + 2 * len(p.uplinks)
    assert len({(link.namespace, link.device) for link in links}) == len(links)  # one qdisc per veth end
    h0 = [link for link in links if "h0" in link.direction]
    assert {(link.namespace, link.device) for link in h0} == {("ssim-t-h0", "eth0"), ("ssim-t-fabric", "h0-p")}
    assert {link.direction for link in links if "core" in link.direction} == {f"tor{r} -> core" for r in range(3)} | {
        f"core -> tor{r}" for r in range(3)
    }


@pytest.mark.parametrize(
    ("cluster", "scale", "nic", "uplink"),
    [
        (two_tier(4, 4, uplink_gbps=25, nic_gbps=25), 0.01, 250e6, 250e6),  # 4:1, scaled down 100x
        (two_tier(2, 8, uplink_gbps=0.2, nic_gbps=0.2), 1.0, 200e6, 200e6),  # 8:1
        (two_tier(2, 4, uplink_gbps=1, nic_gbps=0.5), 0.5, 250e6, 500e6),  # 2:1
    ],
)
def test_rates_are_the_config_times_scale_and_keep_the_oversubscription(
    cluster: dict, scale: float, nic: float, uplink: float
) -> None:
    p = plan(cluster, scale=scale)
    assert {h.rate_bps for h in p.hosts} == {nic} and {u.rate_bps for u in p.uplinks} == {uplink}
    ratio = cluster["hosts_per_rack"] * cluster["nic_gbps"] / cluster["uplink_gbps"]
    assert cluster["hosts_per_rack"] * nic / uplink == pytest.approx(ratio)


def test_missing_uplink_is_non_blocking_and_core_switches_merge() -> None:
    cluster = two_tier(2, 3, uplink_gbps=1.0, nic_gbps=0.2, core_switches=4)
    del cluster["uplink_gbps"]
    p = plan(cluster)
    assert p.bridges.count("core") == 1 and len(p.uplinks) == 2
    assert {u.rate_bps for u in p.uplinks} == {3 * 200_000_000}
    split = plan(two_tier(2, 3, uplink_gbps=0.3, nic_gbps=0.2, core_switches=3))
    assert {u.rate_bps for u in split.uplinks} == {300_000_000}  # the rack's total, not one core's share


def test_names_fit_ifnamsiz_and_addresses_are_unique_in_a_large_cluster() -> None:
    p = plan(two_tier(40, 50, uplink_gbps=1, nic_gbps=1, server_hosts=120), tag="a" * 20)
    assert len(p.hosts) == 2120
    names = interfaces(p)
    assert max(len(name) for _, name in names) <= IFNAMSIZ
    assert len(set(names)) == len(names)  # unique within each namespace
    net = ipaddress.IPv4Network(p.subnet)
    addresses = [ipaddress.IPv4Address(h.address) for h in p.hosts]
    assert len(set(addresses)) == len(addresses)
    assert all(a in net and a not in (net.network_address, net.broadcast_address) for a in addresses)
    assert len(set(p.namespaces)) == len(p.namespaces) and all(owned(p.tag, ns) for ns in p.namespaces)


def test_subnet_is_configurable_and_checked() -> None:
    p = plan(star(2), subnet="172.20.8.0/29")
    assert [h.address for h in p.hosts] == ["172.20.8.1", "172.20.8.2"] and p.hosts[0].prefixlen == 29
    with pytest.raises(ConfigError, match=r"emulate.subnet: 172.20.8.0/30 has 2 host addresses, the cluster 3"):
        plan(star(3), subnet="172.20.8.0/30")
    with pytest.raises(ConfigError, match="emulate.subnet: '10.1.2.3/16' is not an IPv4 network"):
        plan(star(2), subnet="10.1.2.3/16")
    with pytest.raises(ConfigError, match="not a private range"):
        plan(star(2), subnet="8.8.0.0/16")


def test_custom_topology_is_rejected_naming_the_supported_ones() -> None:
    custom = {
        "topology": "custom",
        "nodes": [{"name": "a", "kind": "host"}, {"name": "b", "kind": "host"}, {"name": "s", "kind": "switch"}],
        "links": [{"a": "a", "b": "s"}, {"a": "b", "b": "s"}],
    }
    with pytest.raises(
        ConfigError, match=r"cluster.topology: emulation supports star, two_tier and multi_datacenter, got 'custom'"
    ):
        plan_config(config(custom))


def test_bad_scale_is_a_config_error() -> None:
    for scale in (0.0, -1.0):
        with pytest.raises(ConfigError, match="emulate.scale: must be > 0"):
            plan(star(2), scale=scale)
    with pytest.raises(ConfigError, match="least tc shapes is 1 kbit/s"):
        plan(star(2, nic_gbps=1), scale=1e-7)


def test_tags_and_namespace_ownership() -> None:
    assert tag_from_name("DS-Sync vs Ring (4:1)") == "ds_sync_vs_ring_4_1"
    assert tag_from_name("---") == "syncsim" and len(tag_from_name("x" * 50)) == 20
    assert plan_config(config(star(2), name="My Run")).tag == "my_run"
    assert plan_config(config(star(2), name="My Run"), "other").tag == "other"
    for bad in ("", "A", "a-b", "_a", "a" * 21, "a/b"):
        with pytest.raises(ConfigError, match="emulate.tag"):
            check_tag(bad)
    assert namespace_prefix("x1") == "ssim-x1-"
    assert owned("x1", "ssim-x1-h0") and owned("x1", "ssim-x1-fabric")
    assert not owned("x1", "ssim-x12-h0") and not owned("x1", "ssim-x1-") and not owned("x1", "ssim-x1-h0-x")
    assert not owned("x1", "x1-h0") and not owned("x1", "ssim-x1-../h0")


def test_tbf_holds_a_gso_segment_and_queues_50_ms() -> None:
    slow, fast, tiny = shaping_for(100e6), shaping_for(10e9), shaping_for(1e6)
    assert slow.burst_bytes == GSO_MAX and slow.limit_bytes == int(100e6 / 8 * 0.050)  # the burst's floor
    assert fast.burst_bytes == int(10e9 / 8 * 0.002) and fast.limit_bytes == int(10e9 / 8 * 0.050)
    assert tiny.limit_bytes == 2 * GSO_MAX  # the queue's floor: two full buckets
    assert slow.tc_args("ns", "eth0") == [
        "tc", "-n", "ns", "qdisc", "replace", "dev", "eth0", "root", "tbf",
        "rate", "100000000bit", "burst", str(GSO_MAX), "limit", str(625000),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="rate_bps"):
        shaping_for(0)


def classify(lines: list[str], sport: int, dport: int) -> str:
    """The class the u32 filters in `lines` give a TCP segment, computed as the kernel's u32 does
    (bucket = (word & mask) >> mask's lowest set bit, modulo the table's divisor)."""
    word = (sport << 16) | dport
    divisors, links, flows = {}, {}, {}
    for line in lines:
        w = line.split()
        if "divisor" in w:
            divisors[w[w.index("handle") + 1].rstrip(":")] = int(w[w.index("divisor") + 1])
        elif "ht" in w:
            table, bucket, _ = w[w.index("ht") + 1].split(":")
            if "link" in w:
                mask = int(w[w.index("mask") + 1], 16)
                links[(table, bucket)] = (mask, w[w.index("link") + 1].rstrip(":"))
            else:
                flows[(table, bucket)] = w[w.index("flowid") + 1]
    table, bucket = "800", ""
    while (table, bucket) in links:
        mask, table = links[(table, bucket)]
        shift = (mask & -mask).bit_length() - 1
        bucket = f"{((word & mask) >> shift) % divisors[table]:x}"
    return flows[(table, bucket)]


def test_fair_queues_give_each_connection_its_own_class_at_the_links_rate() -> None:
    shaping = shaping_for(100e6)
    lines = shaping.lines("eth0", "fair")
    assert lines[0] == "qdisc replace dev eth0 root handle 1: htb default 2"
    leaves = [w for w in (line.split() for line in lines) if w[:2] == ["class", "add"] and w[5] == "1:1"]
    assert len(leaves) == FAIR_BUCKETS**2 + 1  # one per bucket pair, and the default for what is not TCP
    for w in leaves:
        assert w[w.index("ceil") + 1] == "100000000bit"  # any one connection may take the whole link
        assert int(w[w.index("quantum") + 1]) >= GSO_MAX  # a round serves a whole GSO segment
    assert sum(int(w[w.index("rate") + 1].removesuffix("bit")) for w in leaves) <= 100e6
    assert sum(f"bfifo limit {shaping.limit_bytes}" in line for line in lines) == len(leaves)  # 50 ms each
    listener = 39311
    ephemeral = [35278 + 2 * i for i in range(16)]  # connect()'s even ports, as Linux hands them out
    # connections to one listening process, both directions: all apart (bits 1-4 of the even ports differ)
    assert len({classify(lines, e, listener) for e in ephemeral}) == 16
    assert len({classify(lines, listener, e) for e in ephemeral}) == 16
    every = {classify(lines, s, d) for s in range(0, 64, 2) for d in range(0, 64, 2)}
    assert len(every) == FAIR_BUCKETS**2 and "1:2" not in every  # every class reachable; TCP never default
    assert shaping.lines("eth0", "fifo") == [" ".join(shaping.tc_args("ns", "eth0")[3:])]


def test_queue_discipline_is_checked_and_recorded(tmp_path: Path) -> None:
    assert QUEUES == ("fair", "fifo")
    with pytest.raises(ValueError, match="emulate.queue: must be one of fair, fifo, got 'sfq'"):
        shaping_for(1e6).lines("eth0", "sfq")
    with pytest.raises(ConfigError, match="emulate.queue: must be one of fair, fifo"):
        plan(star(2), queue="sfq")
    assert plan(star(2)).queue == "fair" and plan(star(2), queue="fifo").queue == "fifo"
    fifo = Emulation.from_plan(plan(star(2), tag="q", queue="fifo"))
    state.write("q", fifo.to_dict(), tmp_path)
    assert Emulation.load("q", tmp_path).queue == "fifo"
    recorded_before = {k: v for k, v in Emulation.from_plan(plan(star(2), tag="q")).to_dict().items() if k != "queue"}
    assert Emulation.from_dict(recorded_before).queue == "fifo"  # states written before disciplines: tbf FIFOs


def test_emulation_round_trips_through_its_state_file(tmp_path: Path) -> None:
    p = plan(two_tier(2, 2, uplink_gbps=0.1, nic_gbps=0.2), tag="rt")
    emulation = Emulation.from_plan(p)
    state.write("rt", {**emulation.to_dict(), "status": "up"}, tmp_path)
    loaded = Emulation.load("rt", tmp_path)
    assert loaded == emulation and state.tags(tmp_path) == ["rt"]
    assert loaded.exec_prefix("h2") == ["ip", "netns", "exec", "ssim-rt-h2"]
    assert (loaded.address("h2"), loaded.interface("h2"), loaded.host("h2").rack) == ("10.213.0.3", "eth0", "rack1")
    with pytest.raises(EmulationError, match="has no host 'h9'; hosts: h0, h1, h2, h3"):
        loaded.host("h9")
    with pytest.raises(EmulationError, match="no emulation with tag 'zz'.*running: rt"):
        Emulation.load("zz", tmp_path)
    (tmp_path / "bad.json").write_text('{"tag": "other", "namespaces": []}')
    with pytest.raises(EmulationError, match="is not the state of emulation 'bad'"):
        state.read("bad", tmp_path)


def test_state_dir_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(state.ENV, str(tmp_path))
    assert state.state_path("a") == tmp_path / "a.json"
    monkeypatch.delenv(state.ENV)
    assert state.state_path("a") == Path("/run/syncsim-emulate/a.json")


def test_non_root_gets_a_message_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(EmulationError, match="needs root"):
        netns.require_tools()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "name: two racks\ncluster: {topology: two_tier, racks: 2, hosts_per_rack: 2, nic_gbps: 0.2}\n"
        "workload: {model: synthetic, gradient_mb: 1, compute_ms: 1}\npolicies: [{name: ring}]\n"
    )
    assert emulate_cli.main(["up", str(cfg), "--state-dir", str(tmp_path)]) == 3
    assert "needs root" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.json"))  # nothing recorded when nothing could be built
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EmulationError, match="ip and tc not found"):
        netns.require_tools()


def test_cli_parses_and_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="syncsim")
    emulate_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["emulate", "up", "c.yaml", "--tag", "x", "--scale", "0.5"])
    assert (args.emulate_command, args.config, args.tag, args.scale, args.replace) == ("up", "c.yaml", "x", 0.5, False)
    assert args.queue == "fair" and parser.parse_args(["emulate", "up", "c.yaml", "--queue", "fifo"]).queue == "fifo"
    with pytest.raises(SystemExit):
        parser.parse_args(["emulate", "up", "c.yaml", "--queue", "sfq"])  # argparse names the choices
    assert parser.parse_args(["emulate", "down", "--all"]).all
    with pytest.raises(SystemExit):
        parser.parse_args(["emulate", "down", "--tag", "x", "--all"])  # one target at a time
    assert emulate_cli.main(["status", "--state-dir", str(tmp_path)]) == 0
    assert "no emulations recorded" in capsys.readouterr().out
    assert emulate_cli.main(["up", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read config" in capsys.readouterr().err


def test_a_cluster_config_needs_a_tag() -> None:
    with pytest.raises(EmulationError, match="pass tag="):
        with emulated_cluster(config(star(2)).cluster):
            pass
