"""The `multi_datacenter` topology's config (sim/config/datacenters.py, sim/config/wan.py): every field
bounded and refused by name with what is allowed, and bandwidth traces read like profiles are."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
import yaml
from helpers import synthetic

from sim.api import prepare
from sim.cli import main
from sim.config import dump_config, parse_config
from sim.config.wan import MAX_TRACE_BYTES, read_trace
from sim.errors import ConfigError

BASE = {
    "topology": "multi_datacenter",
    "datacenters": [
        {"name": "east", "topology": "star", "hosts": 2},
        {"name": "west", "topology": "two_tier", "racks": 2, "hosts_per_rack": 1},
    ],
    "wan": {"bandwidth_gbps": 1, "rtt_ms": 50},
}


def problems(change) -> str:  # type: ignore[no-untyped-def]
    cluster = copy.deepcopy(BASE)
    change(cluster)
    with pytest.raises(ConfigError) as err:
        parse_config(synthetic(cluster, [{"name": "ring"}]))
    return str(err.value)


def test_the_base_config_is_valid_and_datacenters_take_the_clusters_keys() -> None:
    cluster = {**copy.deepcopy(BASE), "nic_gbps": 40, "gpus_per_host": 2}
    cluster["datacenters"][1]["nic_gbps"] = 10
    config = parse_config(synthetic(cluster, [{"name": "ring"}]))
    east, west = config.cluster.datacenters
    assert (east.nic_gbps, east.gpus_per_host, west.nic_gbps, west.gpus_per_host) == (40, 2, 10, 2)
    assert config.cluster.gpu_total == 8
    unnamed = copy.deepcopy(BASE)
    for dc in unnamed["datacenters"]:
        del dc["name"]
    assert parse_config(synthetic(unnamed, [{"name": "ring"}])).cluster.names == ["dc0", "dc1"]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["wan"].update(rtt_ms=0), "cluster.wan.rtt_ms: Input should be greater than 0"),
        (lambda c: c["wan"].update(rtt_ms=2001), "cluster.wan.rtt_ms: Input should be less than or equal to 2000"),
        (lambda c: c["wan"].update(bandwidth_gbps=0), "cluster.wan.bandwidth_gbps: Input should be greater"),
        (
            lambda c: c["wan"].update(connection_window_mb=2000),
            "cluster.wan.connection_window_mb: Input should be less",
        ),
        (lambda c: c["wan"].update(connection_window_mb=1, connections=0), "cluster.wan.connections: Input should be"),
        (lambda c: c["wan"].update(connection_window_mb=1, connections=1025), "cluster.wan.connections: Input should"),
        (lambda c: c["wan"].update(connections=4), "cluster.wan.connections: applies only with connection_window_mb"),
        (lambda c: c["wan"].update(bandwidth_trace=""), "cluster.wan.bandwidth_trace: a file path of 1 to 4096"),
        (lambda c: c["wan"].update(latency_ms=1), "cluster.wan: unknown key latency_ms; allowed keys: bandwidth_gbps"),
        (lambda c: c["wan"].pop("rtt_ms"), "cluster.wan.rtt_ms: required"),
        (lambda c: c.pop("wan"), "cluster.wan: required"),
        (lambda c: c["datacenters"].pop(), "cluster.datacenters: List should have at least 2 items"),
        (
            lambda c: c["datacenters"][0].update(gpu="A100"),
            "cluster.datacenters[0].gpu: 'A100' differs from cluster.gpu",
        ),
        (
            lambda c: c["datacenters"][1].update(placement="random"),
            "cluster.datacenters[1].placement: 'random' differs",
        ),
        (lambda c: c["datacenters"][0].update(name="a.b"), "cluster.datacenters[0].name: 'a.b': a letter, then"),
        (lambda c: c["datacenters"][1].update(name="east"), "cluster.datacenters[1].name: 'east' is the name of"),
        (lambda c: c["datacenters"][0].update(topology="multi_datacenter"), "allowed: star, two_tier, custom"),
        (lambda c: c["datacenters"][0].update(racks=2), "cluster.datacenters[0]: unknown key racks; allowed keys:"),
        (lambda c: c.update(server_hosts=1), "cluster.server_hosts: set it per datacenter"),
        (
            lambda c: c["wan"].update(links=[{"a": "east", "b": "south"}]),
            "wan.links[0]: unknown datacenter 'south'; allowed: east, west",
        ),  # fmt: skip
        (lambda c: c["wan"].update(links=[{"a": "east", "b": "east"}]), "cluster.wan.links[0]: joins 'east' to itself"),
        (
            lambda c: c["wan"].update(links=[{"a": "east", "b": "west"}, {"a": "west", "b": "east"}]),
            "cluster.wan.links[1]: wan.links[0] already joins 'west' and 'east'",
        ),
        (
            lambda c: (
                c["datacenters"].append({"name": "far", "topology": "star", "hosts": 1})
                or c["wan"].update(links=[{"a": "east", "b": "west"}])
            ),
            "cluster.wan.links: no WAN route joins 'east' and 'far'",
        ),
        (
            lambda c: c["wan"].update(links=[{"a": "east", "b": "west", "connections": 2}]),
            "cluster.wan.links[0].connections: applies only with connection_window_mb",
        ),
    ],
)
def test_bad_fields_are_refused_by_name(change, message: str) -> None:  # type: ignore[no-untyped-def]
    assert message in problems(change)


def custom_datacenter(**extra: object) -> dict:
    nodes = [{"name": "s0", "kind": "switch"}, {"name": "s1", "kind": "switch"}, {"name": "h0", "kind": "host"}]
    links = [{"a": "h0", "b": "s0"}, {"a": "s0", "b": "s1"}]
    return {"name": "west", "topology": "custom", "nodes": nodes, "links": links, **extra}


def test_a_custom_datacenter_names_its_gateway_among_its_switches() -> None:
    assert "cluster.datacenters[1].gateway: required where a datacenter has several switches; allowed: s0, s1" in (
        problems(lambda c: c["datacenters"].__setitem__(1, custom_datacenter()))
    )
    assert "gateway: 'h0' is not one of its switches; allowed: s0, s1" in problems(
        lambda c: c["datacenters"].__setitem__(1, custom_datacenter(gateway="h0"))
    )
    cluster = copy.deepcopy(BASE)
    cluster["datacenters"][1] = custom_datacenter(gateway="s1")
    built, _ = prepare(parse_config(synthetic(cluster, [{"name": "ring"}])))
    assert built.graph.has_edge("west.s1", "west") and not built.graph.has_edge("west.s0", "west")
    assert built.view.rack_of(2) == "west"  # a host that names no rack is in its datacenter's


def test_the_resolved_config_reads_back() -> None:
    # config.yaml beside the results repeats every default in every datacenter (gpu and placement too)
    cluster = copy.deepcopy(BASE)
    cluster["gpu"] = "A100"
    cluster["wan"]["links"] = [{"a": "east", "b": "west", "rtt_ms": 20}]
    config = parse_config(synthetic(cluster, [{"name": "ring"}]))
    assert parse_config(yaml.safe_load(dump_config(config))) == config
    assert [dc.gpu for dc in config.cluster.datacenters] == ["A100", "A100"]


# ----------------------------------------------------------------------------- traces
def trace_problem(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "trace.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError) as err:
        read_trace(str(path), "cluster.wan.bandwidth_trace")
    assert str(err.value).startswith(f"cluster.wan.bandwidth_trace: {path}")
    return str(err.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("0,1\n", "the first line must be the header `time_s,gbps`"),
        ("time_s,gbps\n", "no rows after the header"),
        ("time_s,gbps\n0,1\n2,1\n1,1\n", "line 4: time_s 1 is not after the previous row's 2"),
        ("time_s,gbps\n0,1\n0,2\n", "line 3: time_s 0 is not after the previous row's 0"),
        ("time_s,gbps\nnan,1\n", "line 2: time_s must be a number from 0 to 1e+09"),
        ("time_s,gbps\n-1,1\n", "line 2: time_s must be a number"),
        ("time_s,gbps\n0,inf\n", "line 2: gbps must be a number from 0.001 to 1e+06"),
        ("time_s,gbps\n0,0\n", "line 2: gbps must be a number from 0.001"),
        ("time_s,gbps\n0,1,2\n", "line 2: time_s must be a number"),
        ("time_s,gbps\n0,fast\n", "line 2: time_s must be a number"),
        (b"time_s,gbps\n\xff\n", "not UTF-8 text"),
        ("time_s,gbps\n" + "x" * (MAX_TRACE_BYTES + 1), "over the 2 MB limit for a bandwidth trace"),
    ],
)
def test_bad_traces_are_refused_with_the_field_and_line(tmp_path: Path, text: str | bytes, message: str) -> None:
    assert message in trace_problem(tmp_path, text)


def test_a_trace_that_is_not_a_regular_file_or_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a regular file \\(a directory\\)"):
        read_trace(str(tmp_path), "cluster.wan.bandwidth_trace")
    with pytest.raises(ConfigError, match="cannot read it"):
        read_trace(str(tmp_path / "absent.csv"), "cluster.wan.bandwidth_trace")


def test_comments_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("# measured\n\ntime_s, gbps\n0,1\n# dip\n 2.5 , 0.25 \n")
    assert read_trace(str(path), "f") == ((0.0, 2.5), (1.0, 0.25))


def test_check_reads_the_trace_beside_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = copy.deepcopy(BASE)
    cluster["wan"]["links"] = [{"a": "east", "b": "west", "bandwidth_trace": "bad.csv"}]
    (tmp_path / "bad.csv").write_text("time_s,gbps\n1,1\n1,2\n")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(synthetic(cluster, [{"name": "ring"}])))
    cwd = os.getcwd()
    try:
        os.chdir("/")  # the path is relative to the config file, not to the working directory
        assert main(["check", str(tmp_path / "c.yaml")]) == 2
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err
    assert f"cluster.wan.links[0].bandwidth_trace: {tmp_path / 'bad.csv'}: line 3: time_s 1 is not after" in err
