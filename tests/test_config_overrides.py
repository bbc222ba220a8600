"""`--set KEY=VALUE` overrides and `extends:` base configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.config import load_config
from sim.config.extends import merge
from sim.config.overrides import apply_overrides, parse_override, parse_path
from sim.errors import ConfigError

QUICKSTART = Path(__file__).parent.parent / "configs" / "quickstart.yaml"


def test_paths_name_keys_and_list_items() -> None:
    assert parse_path("cluster.uplink_gbps") == ["cluster", "uplink_gbps"]
    assert parse_path("policies[0].group_size") == ["policies", 0, "group_size"]
    assert parse_path("faults.stragglers[1].ranks[0]") == ["faults", "stragglers", 1, "ranks", 0]
    for bad in ("cluster..nic_gbps", "policies[-1].name", "policies[x]", "1abc", ""):
        with pytest.raises(ConfigError, match="not a config path"):
            parse_path(bad)


def test_values_are_read_as_yaml() -> None:
    assert parse_override("cluster.uplink_gbps=25") == ("cluster.uplink_gbps", 25)
    assert parse_override("workload.model=bert_large") == ("workload.model", "bert_large")
    assert parse_override("policies[0].groups=[2, 4]") == ("policies[0].groups", [2, 4])
    assert parse_override("numerics=null") == ("numerics", None)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_override("cluster.uplink_gbps")


def test_overrides_apply_in_order_to_a_copy() -> None:
    data = {"cluster": {"nic_gbps": 25}, "policies": [{"name": "ring"}]}
    out = apply_overrides(
        data, ["cluster.nic_gbps=10", "cluster.nic_gbps=40", "policies[0].label=r", "numerics.threads=2"]
    )
    assert out == {
        "cluster": {"nic_gbps": 40},
        "policies": [{"name": "ring", "label": "r"}],
        "numerics": {"threads": 2},
    }
    assert data == {"cluster": {"nic_gbps": 25}, "policies": [{"name": "ring"}]}  # the caller's data is untouched


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("policies[5].name=ps", r"--set policies\[5\].name: policies has 1 item\(s\) \(indices 0-0\)"),
        ("cluster[0]=1", "--set cluster\\[0\\]: cluster is not a list"),
        ("cluster.nic_gbps.x=1", "--set cluster.nic_gbps.x: cluster.nic_gbps is int, not a mapping"),
    ],
)
def test_a_path_that_names_nothing_says_why(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        apply_overrides({"cluster": {"nic_gbps": 25}, "policies": [{"name": "ring"}]}, [override])


def test_load_config_with_overrides_validates_the_result() -> None:
    config = load_config(QUICKSTART, ["cluster.nic_gbps=10", "iterations=7", "policies[3].label=servers"])
    assert config.cluster.nic_gbps == 10 and config.iterations == 7
    assert [p.display for p in config.policies][3] == "servers"
    with pytest.raises(ConfigError, match="cluster.nic_gbps: Input should be greater than or equal to"):
        load_config(QUICKSTART, ["cluster.nic_gbps=-3"])


def test_check_and_run_take_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(QUICKSTART), "--set", "iterations=3"]) == 0
    assert "4 buckets x 3 iterations" in capsys.readouterr().out
    assert main(["check", str(QUICKSTART), "--set", "policies[9].name=ring"]) == 2
    assert "--set policies[9].name: policies has 4 item(s)" in capsys.readouterr().err
    out = tmp_path / "out"
    args = ["run", str(QUICKSTART), "--out", str(out), "--quiet", "--no-plot"]
    assert main([*args, "--set", "iterations=2", "--set", "policies=[{name: ring}]"]) == 0
    summary = (out / "summary.csv").read_text()
    assert summary.count("\n") == 2 and "ring" in summary  # one policy, as set


def test_extends_merges_mappings_and_replaces_the_rest(tmp_path: Path) -> None:
    (tmp_path / "bases").mkdir()
    base = yaml.safe_load(QUICKSTART.read_text())
    (tmp_path / "bases" / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "bases" / "middle.yaml").write_text("extends: base.yaml\niterations: 4\ncluster: {nic_gbps: 5}\n")
    (tmp_path / "child.yaml").write_text("extends: bases/middle.yaml\npolicies: [{name: ps}]\ncluster: {racks: 4}\n")
    config = load_config(tmp_path / "child.yaml")
    assert config.iterations == 4 and config.cluster.nic_gbps == 5 and config.cluster.racks == 4
    assert config.cluster.hosts_per_rack == base["cluster"]["hosts_per_rack"]  # merged, not replaced
    assert [p.name for p in config.policies] == ["ps"]  # a list replaces the base's
    assert load_config(tmp_path / "child.yaml", ["iterations=9"]).iterations == 9  # --set applies last


def test_extends_refuses_cycles_and_missing_bases(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("extends: b.yaml\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="extend each other in a cycle"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("extends: [a.yaml]\n")
    with pytest.raises(ConfigError, match="extends: expected the path of a base config file"):
        load_config(tmp_path / "d.yaml")


def test_merge_is_key_by_key() -> None:
    assert merge({"a": {"x": 1, "y": 2}, "l": [1, 2]}, {"a": {"y": 3}, "l": [9]}) == {"a": {"x": 1, "y": 3}, "l": [9]}


def test_set_is_applied_after_extends_so_it_can_index_a_list_only_the_base_defines(tmp_path: Path) -> None:
    # the child names no policies: `policies[1]` exists only once the base is merged in. Applied before
    # `extends:` is resolved, the override would find no list and be refused ("policies has 0 item(s)")
    (tmp_path / "base.yaml").write_text(QUICKSTART.read_text())
    (tmp_path / "child.yaml").write_text("extends: base.yaml\niterations: 3\n")
    config = load_config(tmp_path / "child.yaml", ["policies[1].label=second", "iterations=5"])
    base_policies = yaml.safe_load(QUICKSTART.read_text())["policies"]
    assert [p.name for p in config.policies] == [p["name"] for p in base_policies]  # the base's list, kept
    assert config.policies[1].display == "second", "--set must apply after extends: is resolved"
    assert config.iterations == 5, "--set must win over the file and its base (it applies last)"
