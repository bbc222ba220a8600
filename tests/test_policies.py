"""Policies in-process, without any backend: the ops they plan, their settings, the registry."""

from __future__ import annotations

from importlib import metadata

import pytest
from pydantic import ValidationError

import policies
from policies import Bucket, ClusterView, HostInfo, ModelInfo, RackInfo, SettingError
from policies.ops import AllGather, AllReduce, Group, Pull, Push, ReduceScatter, ServerSpec, groups_by_rank
from policies.registry import create, resolve


def view(racks: int, hosts_per_rack: int, gpus: int, servers: int = 0) -> ClusterView:
    """A hand-built logical view: host i in rack i // hosts_per_rack, ranks packed."""
    hosts, rank_hosts = {}, []
    for i in range(racks * hosts_per_rack):
        ranks = tuple(range(len(rank_hosts), len(rank_hosts) + gpus))
        rank_hosts += [f"h{i}"] * gpus
        hosts[f"h{i}"] = HostInfo(f"h{i}", f"r{i // hosts_per_rack}" if racks > 1 else None, ranks, 1e9, 1e11)
    for s in range(servers):
        hosts[f"ps{s}"] = HostInfo(f"ps{s}", None, (), 1e9, 1e11)
    rack_map = (
        {
            f"r{r}": RackInfo(f"r{r}", tuple(f"h{r * hosts_per_rack + i}" for i in range(hosts_per_rack)), 2e9)
            for r in range(racks)
        }
        if racks > 1
        else {}
    )
    return ClusterView(tuple(rank_hosts), hosts, rack_map, tuple(f"ps{s}" for s in range(servers)))


def program(policy, hook: str, *args) -> list:  # type: ignore[no-untyped-def]
    return [tuple(item) if isinstance(item, (list, tuple)) else item for item in getattr(policy, hook)(*args)]


BUCKET = Bucket(index=2, nbytes=8e6, count=4)
MODEL = ModelInfo(parameter_bytes=32e6, bucket_bytes=(8e6, 8e6, 8e6, 8e6))


def test_ring_all_reduces_each_bucket_over_everyone() -> None:
    ring = policies.Ring()
    ring.bind(view(2, 2, 2), MODEL)
    assert program(ring, "on_gradients", 5, 0, BUCKET) == [AllReduce(Group.of(range(8)), 8e6)]
    assert program(ring, "begin_step", 5, 0) == [] and program(ring, "end_step", 5, 0) == []


def test_no_sync_never_communicates() -> None:
    p = policies.NoSync()
    p.bind(view(1, 4, 1), MODEL)
    assert program(p, "on_gradients", 0, 0, BUCKET) == [] and p.servers() == ()


@pytest.mark.parametrize(
    "level, local, cross",
    [
        ("host", (2, 3), (1, 3, 5, 7)),  # rank 3 sits on h1 with rank 2; cross group: 2nd GPU of each host
        ("rack", (0, 1, 2, 3), (3, 7)),  # rack r0 holds ranks 0-3; cross group: 4th rank of each rack
    ],
)
def test_hierarchical_groups_and_program(level: str, local: tuple, cross: tuple) -> None:
    h = policies.Hierarchical(level=level)
    h.bind(view(2, 2, 2), MODEL)
    g = len(local)
    assert program(h, "on_gradients", 3, 0, BUCKET) == [
        ReduceScatter(Group(local), 8e6),
        AllReduce(Group(cross), 8e6 / g),
        AllGather(Group(local), 8e6),
    ]


def test_groups_by_rank_maps_rows_and_columns_to_one_shared_group_each() -> None:
    """A 2-D layout's groups, each made once: a world-sized group made per rank cost W^2 (a 16,384-GPU
    FSDP run took 9.6 s, 1.7 s with one group)."""
    within, across = groups_by_rank([(0, 1, 2), (3, 4, 5)])
    assert within == {0: Group((0, 1, 2)), 1: Group((0, 1, 2)), 2: Group((0, 1, 2)), 3: Group((3, 4, 5)),
                      4: Group((3, 4, 5)), 5: Group((3, 4, 5))}  # fmt: skip
    assert across == {0: Group((0, 3)), 3: Group((0, 3)), 1: Group((1, 4)), 4: Group((1, 4)), 2: Group((2, 5)),
                      5: Group((2, 5))}  # fmt: skip
    assert within[0] is within[2] and across[1] is across[4]
    world, ones = groups_by_rank([tuple(range(4))])
    assert len({id(g) for g in world.values()}) == 1 and ones[3] == Group((3,))


def test_hierarchical_auto_level() -> None:
    multi, single, flat = policies.Hierarchical(), policies.Hierarchical(), policies.Hierarchical()
    multi.bind(view(2, 2, 2), MODEL)
    single.bind(view(2, 2, 1), MODEL)
    flat.bind(view(1, 4, 1), MODEL)
    assert (multi.level, single.level, flat.level) == ("host", "rack", "host")


def test_hierarchical_level_the_cluster_lacks() -> None:
    with pytest.raises(SettingError) as info:
        policies.Hierarchical(level="rack").bind(view(1, 4, 2), MODEL)
    assert info.value.field == "level" and "allowed here: auto, host" in str(info.value)


def test_ps_colocated_splits_buckets_over_shards() -> None:
    ps = policies.ParameterServer(shards=2)
    ps.bind(view(1, 4, 1), MODEL)
    assert [s.host for s in ps.servers()] == ["h0", "h1"]
    assert all(isinstance(s, ServerSpec) and s.sync for s in ps.servers())
    assert program(ps, "on_gradients", 1, 0, BUCKET) == [(Push(0, 4e6, key=2), Push(1, 4e6, key=2))]
    # the next step reads the bucket back as forward needs it; step 0 starts from initial parameters
    assert program(ps, "on_forward", 1, 0, BUCKET) == []
    assert program(ps, "on_forward", 1, 5, BUCKET) == [(Pull(0, 4e6, key=2), Pull(1, 4e6, key=2))]


def test_ps_placements() -> None:
    auto = policies.ParameterServer()
    auto.bind(view(1, 3, 2), MODEL)
    assert [s.host for s in auto.servers()] == ["h0", "h1", "h2"]
    dedicated = policies.ParameterServer(placement="dedicated", shards=3)
    dedicated.bind(view(1, 2, 1, servers=2), MODEL)
    assert [s.host for s in dedicated.servers()] == ["ps0", "ps1", "ps0"]
    named = policies.ParameterServer(hosts=["h1"], apply_ms_per_mb=2.0)
    named.bind(view(1, 2, 1), MODEL)
    assert [(s.host, s.apply_s_per_mb) for s in named.servers()] == [("h1", 0.002)]
    with pytest.raises(SettingError, match="placement: 'dedicated' needs server-only hosts"):
        policies.ParameterServer(placement="dedicated").bind(view(1, 2, 1), MODEL)


def test_settings_are_validated_and_frozen() -> None:
    with pytest.raises(ValidationError, match="level"):
        policies.Hierarchical(level="pod")
    h = policies.Hierarchical(level="rack")
    with pytest.raises(ValidationError, match="frozen"):
        h.settings.level = "host"  # type: ignore[misc]
    assert repr(h) == "Hierarchical(wire=None, block=32, level='rack')"


def test_state_dict_round_trip_for_stateless_policies() -> None:
    ring = policies.Ring()
    assert ring.state_dict() == {}
    ring.load_state_dict({})
    with pytest.raises(ValueError, match="keeps no state"):
        ring.load_state_dict({"step": 3})


def test_registry_names_paths_and_errors() -> None:
    assert set(policies.available()) >= {"ps", "ring", "hierarchical", "no_sync"}
    assert resolve("ring") is policies.Ring
    assert resolve("policies.hierarchical:Hierarchical") is policies.Hierarchical
    assert create("ps", {"shards": 3}).settings.shards == 3
    with pytest.raises(
        SettingError, match=f"unknown policy 'rign'; allowed: {', '.join(sorted(policies.available()))}"
    ):
        resolve("rign")
    with pytest.raises(SettingError, match="is not a subclass of policies.base.Policy"):
        resolve("custom_policies:LaxSettings")


def test_third_party_policy_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """A package that declares `[project.entry-points."syncsim.policies"]` is found by name."""
    ep = metadata.EntryPoint("interleaved", "custom_policies:InterleavedRings", "syncsim.policies")
    real = metadata.entry_points

    def fake(**kwargs):  # type: ignore[no-untyped-def]
        return [ep] if kwargs.get("group") == "syncsim.policies" else real(**kwargs)

    monkeypatch.setattr(metadata, "entry_points", fake)
    assert "interleaved" in policies.available()
    assert resolve("interleaved").__name__ == "InterleavedRings"
    assert resolve("custom_policies:InterleavedRings").__name__ == "InterleavedRings"  # its value, too


def test_a_plugin_beside_the_config_loads_without_pythonpath(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`name: module:Class` with module.py next to the config file (or in the working directory)."""
    import sys

    import yaml

    from sim.api import simulate
    from sim.config import load_config

    folder = tmp_path / "experiment"
    folder.mkdir()
    (folder / "beside_policies.py").write_text(
        "from policies.ring import Ring\n\n\nclass SlowRing(Ring):\n    name = 'slow_ring'\n"
    )
    cfg = {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 4, "nic_gbps": 25},
        "workload": {"model": "synthetic", "gradient_mb": 10, "compute_ms": 5},
        "policies": [{"name": "beside_policies:SlowRing"}],
    }
    (folder / "c.yaml").write_text(yaml.safe_dump(cfg))
    monkeypatch.chdir(tmp_path)  # not the config's folder
    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # the plug-in's module: forgotten afterwards
    result = simulate(load_config(folder / "c.yaml"))
    assert result.summary["status"].tolist() == ["ok"]
    assert result.summary["name"].tolist() == ["beside_policies:SlowRing"]
    assert result.summary["policy"].tolist() == ["slow_ring"]  # labelled by its class's name, not the path
    assert str(folder.resolve()) not in sys.path  # the file is run, its folder is not importable


def test_a_plugin_in_the_working_directory_loads(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import sys

    from policies.registry import create, label_of

    (tmp_path / "cwd_policies.py").write_text("from policies.ring import Ring\n\n\nclass MyRing(Ring):\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".")])
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    assert type(create("cwd_policies:MyRing")).__name__ == "MyRing"
    # it sets no name of its own: labelled by its class name, not by the `ring` it inherits
    assert label_of("cwd_policies:MyRing") == "MyRing" and label_of("ring") == "ring"
    assert label_of("policies.ring:Ring") == "ring" and label_of("absent_policies:X") == "absent_policies:X"
    with pytest.raises(SettingError, match="cannot load policy 'absent_policies:X': no file absent_policies.py"):
        create("absent_policies:X")


@pytest.mark.parametrize(
    "name, why",
    [
        ("this:s", "no file this.py in the working directory or beside the config"),
        ("antigravity:Policy", "no file antigravity.py"),
        ("made_up_module_xyz:Policy", "no file made_up_module_xyz.py"),
        ("..evil:Policy", "'..evil' is not a file's name"),
        ("os.path:join", "'os.path' is not a file's name"),
        ("../evil:Policy", "'../evil' is not a file's name"),
        ("/tmp/evil:Policy", "'/tmp/evil' is not a file's name"),
    ],
)
def test_a_name_never_imports_an_installed_module(name: str, why: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a file beside the config or in the working directory, or an entry point, is loaded for a
    `module:Class`: `this:s` would print the Zen of Python, `subprocess:run` import subprocess."""
    import sys

    for module in ("this", "antigravity", "made_up_module_xyz"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(SettingError, match="cannot load policy") as caught:
        resolve(name)
    assert why in str(caught.value) and "allowed: a registered name" in str(caught.value)
    assert "\n" not in str(caught.value)
    assert not {"this", "antigravity", "made_up_module_xyz"} & set(sys.modules)


def test_a_refused_plugin_is_one_line_naming_the_entry() -> None:
    from sim.config.load import policy_problems

    lines = policy_problems([{"name": "ring"}, {"name": "this:s"}, {"name": "subprocess:run"}])
    assert [line.split(":")[0] for line in lines] == ["policies[1].name", "policies[2].name"]
    assert "no file subprocess.py in the working directory or beside the config" in lines[1]


def test_two_entries_of_one_plugin_class_need_labels() -> None:
    """Both would be labelled by the class's name, `interleaved_rings`: the second is refused."""
    from sim.config.load import policy_problems

    entry = {"name": "custom_policies:InterleavedRings"}
    assert policy_problems([entry, entry]) == [
        "policies[1].label: duplicate label 'interleaved_rings'; give each entry a unique label"
    ]
    assert policy_problems([entry, {**entry, "label": "second"}]) == []


def test_a_plugin_file_does_not_shadow_an_imported_module(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "json.py").write_text("raise SystemExit('must not run')\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SettingError, match="would shadow the module 'json' already imported; rename the file"):
        resolve("json:Policy")


def test_installed_entry_points_are_scanned_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scanning every package's metadata costs milliseconds: lookups after the first reuse the scan."""
    real = metadata.entry_points
    calls = []

    def counting(**kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(metadata, "entry_points", counting)
    for _ in range(3):
        policies.available()
        with pytest.raises(SettingError):
            resolve("no_such_policy_name")
    assert len(calls) == 1
