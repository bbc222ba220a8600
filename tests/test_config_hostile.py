"""Each hostile input a user reported, refused at `check` time by name; every problem in one pass; the
messages say what happens (the fuzzer in tests/test_config_fuzz.py generalises these)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import synthetic

from sim.api import prepare, simulate
from sim.cli import main
from sim.config import parse_config
from sim.errors import ConfigError

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def quickstart() -> dict[str, Any]:
    return yaml.safe_load(QUICKSTART.read_text())


def check_lines(tmp_path: Path, text: str | bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    path = tmp_path / "c.yaml"
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    code = main(["check", str(path)])
    return code, [line.strip() for line in capsys.readouterr().err.splitlines()[1:]]


@pytest.mark.parametrize(
    "key, written, field",
    [
        ("link_latency_us", "1e400", "cluster.link_latency_us: Input should be a finite number"),
        ("nic_gbps", ".inf", "cluster.nic_gbps: Input should be a finite number"),
        ("nic_gbps", ".nan", "cluster.nic_gbps: Input should be a finite number"),
        ("nic_gbps", "1e308", "cluster.nic_gbps: Input should be less than or equal to 1000000"),
        ("racks", "true", "cluster.racks: Input should be a valid integer (got True)"),
        ("racks", "'4'", "cluster.racks: Input should be a valid integer (got '4')"),
    ],
)
def test_non_finite_and_coerced_cluster_values_are_refused(
    key: str, written: str, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, found = re.subn(rf"^  {key}: .*$", f"  {key}: {written}", QUICKSTART.read_text(), count=1, flags=re.M)
    assert found == 1
    code, lines = check_lines(tmp_path, text, capsys)
    assert code == 2
    assert any(line.startswith(field) for line in lines), lines


def test_hosts_true_is_not_one_host() -> None:
    data = quickstart()
    data["cluster"] = {"topology": "star", "hosts": True}
    with pytest.raises(ConfigError, match=r"cluster.hosts: Input should be a valid integer \(got True\)"):
        parse_config(data)


def test_infinite_workload_and_policy_values_are_refused_by_name() -> None:
    data = quickstart()
    data["workload"]["compute_jitter"] = float("inf")
    data["policies"] = [{"name": "ps", "apply_ms_per_mb": float("inf")}]
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    lines = str(info.value).splitlines()
    assert "workload.compute_jitter: Input should be a finite number (got inf)" in lines
    assert "policies[0].apply_ms_per_mb: should be a finite number (got inf)" in lines


def test_a_plug_in_with_plain_pydantic_settings_cannot_take_inf() -> None:
    data = quickstart()
    data["policies"] = [{"name": "custom_policies:LaxSettingsPolicy", "scale": float("inf")}]
    with pytest.raises(ConfigError, match=r"policies\[0\]\.scale: should be a finite number"):
        parse_config(data)


def test_every_bad_policy_and_section_is_reported_in_one_pass() -> None:
    data = quickstart()
    data["cluster"]["nic_gbps"] = float("nan")
    data["policies"] = [
        {"name": "ring"},
        {"name": "ps", "shards": 0, "apply_ms_per_mb": -1},
        {"name": "ds_sync", "group_size": "many"},
        {"name": "nonexistent"},
        {"name": "ring"},
    ]
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("cluster.nic_gbps: Input should be a finite number")
    fields = [line.partition(": ")[0] for line in lines[1:]]
    assert fields == [
        "policies[1].shards",
        "policies[1].apply_ms_per_mb",
        "policies[2].group_size",
        "policies[3].name",
        "policies[4].label",
    ]


def test_policies_that_do_not_fit_the_cluster_are_all_reported() -> None:
    data = quickstart()
    data["policies"] = [{"name": "ps", "hosts": ["nowhere"]}, {"name": "ps", "placement": "dedicated", "label": "d"}]
    data["faults"] = {"slow_workers": [{"ranks": [999], "compute_factor": 2}]}
    with pytest.raises(ConfigError) as info:
        prepare(parse_config(data))
    fields = [line.partition(": ")[0] for line in str(info.value).splitlines()]
    assert fields == ["faults.slow_workers[0].ranks", "policies[0].hosts", "policies[1].placement"]


def test_a_file_that_is_not_utf8_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check_lines(tmp_path, QUICKSTART.read_bytes().replace(b"quickstart", b"quick\xffstart"), capsys)
    assert code == 2
    assert len(lines) == 1 and "not UTF-8 text (byte 0xff at offset" in lines[0]


def test_a_key_given_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = check_lines(tmp_path, QUICKSTART.read_text() + "iterations: 5\n", capsys)
    assert code == 2 and "key 'iterations' is given twice" in lines[0]


def test_the_name_cannot_leave_the_results_folder() -> None:
    data = quickstart()
    data["name"] = "../../etc"
    with pytest.raises(ConfigError, match=r"^name: '\.\./\.\./etc' names the output folder"):
        parse_config(data)


def test_a_stall_timeout_shorter_than_one_compute_step_is_refused() -> None:
    data = synthetic({"topology": "star", "hosts": 2}, [{"name": "ring"}], 1.0, compute_ms=5000.0)
    data["simulation"]["stall_timeout_s"] = 2.0
    with pytest.raises(ConfigError, match=r"simulation.stall_timeout_s: 2 s is shorter than one iteration's compute"):
        prepare(parse_config(data))


def test_a_transfer_longer_than_the_stall_timeout_is_not_a_deadlock() -> None:
    # 10 MB over a 1 Mbit/s NIC: the ring all-reduce of 2 ranks takes 80 s, the stall timeout is 5 s
    data = synthetic({"topology": "star", "hosts": 2, "nic_gbps": 0.001}, [{"name": "ring"}], 10.0)
    data["simulation"]["stall_timeout_s"] = 5.0
    (run,) = simulate(data).runs
    assert run.error is None
    assert run.sim_time_s == pytest.approx(10e6 / (0.001e9 / 8), rel=1e-3)  # 2(p-1)/p n / B with p = 2


def test_a_fault_after_the_runs_end_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = quickstart()
    data["iterations"] = 2
    data["faults"] = {"stragglers": [{"ranks": [0], "compute_factor": 2, "start_s": 1e6, "duration_s": 1}]}
    path = tmp_path / "late.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["run", str(path), "--out", str(tmp_path / "out"), "--quiet", "--no-plot"]) == 0
    err = capsys.readouterr().err
    assert "note: faults.stragglers[0].start_s: 1e+06 s is after the end of the run of no_sync, ring" in err
    assert "it never acted there" in err


def test_real_without_torch_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert main(["real", str(ROOT / "configs" / "real_2x2_digits.yaml"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    # PyTorch's CPU wheel, as the README installs it (not PyPI's multi-GB CUDA build), and the CUDA build named for GPUs
    cpu = "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
    assert f"torch is not installed; install it with: {cpu}" in err and "CUDA build" in err
    assert "Traceback" not in err


def test_a_wrong_nproc_is_refused_before_anything_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    config = ROOT / "configs" / "real_2x2_digits.yaml"
    assert main(["real", str(config), "--nproc", "3", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--nproc: the config's cluster has 4 GPUs" in err and "starting" not in err


def test_check_notes_a_bucket_larger_than_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = quickstart()
    data["workload"]["bucket_mb"] = 1000
    path = tmp_path / "one_bucket.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "102.2 MB of gradients in 1 bucket," in out
    assert "note: workload.bucket_mb: 1000 MB is more than the model's 102.2 MB of gradients" in out


def test_hops_of_a_second_are_slow_not_deadlocked() -> None:
    # 1 s per link (the largest latency allowed), 2 links per path: a ring step takes 2 s, an iteration
    # 2(p-1) steps = 12 s, more than the 5 s stall timeout; finished steps count as progress
    data = synthetic({"topology": "star", "hosts": 4, "link_latency_us": 1e6}, [{"name": "ring"}], 1.0, iterations=2)
    data["simulation"]["stall_timeout_s"] = 5.0
    (run,) = simulate(data).runs
    assert run.error is None
    closed_form = 2 * 3 * 2.0 + 2 * 3 / 4 * 1e6 / (25e9 / 8)  # 2(p-1) alpha + 2(p-1)/p n/B
    assert run.sim_time_s == pytest.approx(2 * closed_form, rel=1e-3)


def test_numpy_scalars_from_a_notebook_validate_as_their_yaml_would() -> None:
    import numpy as np

    data = quickstart()
    data["cluster"]["racks"] = np.int64(2)
    data["cluster"]["nic_gbps"] = np.float32(25.0)
    data["faults"] = {"slow_workers": [{"ranks": list(np.arange(2)), "compute_factor": np.float64(2.0)}]}
    config = parse_config(data)
    assert config.cluster.racks == 2 and type(config.cluster.racks) is int
    assert config.faults.slow_workers[0].ranks == [0, 1]
    data["cluster"]["racks"] = np.bool_(True)  # still not a count
    with pytest.raises(ConfigError, match=r"cluster.racks: Input should be a valid integer \(got True\)"):
        parse_config(data)


# ---- round 4 (issue 45): every number of the schema has a physical upper bound --------------------------


def _upper_bounded(parts: list[Any]) -> bool:
    from annotated_types import Le, Lt

    flat = [p for part in parts for p in (getattr(part, "metadata", None) or [part])]
    return any(isinstance(p, (Le, Lt)) for p in flat)


def _numbers(annotation: Any, metadata: list[Any], path: str) -> Any:
    """(path, has an upper bound) for every int or float a config can hold under `annotation`."""
    from typing import Annotated, Literal, get_args, get_origin

    from pydantic import BaseModel

    from sim.config import PolicyEntry

    origin = get_origin(annotation)
    if origin is Annotated:
        base, *more = get_args(annotation)
        yield from _numbers(base, [*metadata, *more], path)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation is not PolicyEntry:  # a policy's settings are its own (tests/test_policies.py)
            for name, field in annotation.model_fields.items():
                yield from _numbers(field.annotation, list(field.metadata), f"{path}.{name}".lstrip("."))
    elif annotation in (int, float):
        yield path, _upper_bounded(metadata)
    elif origin is not Literal:
        for arg in get_args(annotation):  # Optional, Union, list, tuple
            yield from _numbers(arg, metadata, path + ("[]" if origin in (list, tuple) else ""))


def test_every_number_in_the_schema_has_an_upper_bound() -> None:
    from sim.config.schema import Config

    found = dict(_numbers(Config, [], ""))
    assert len(found) > 80 and "simulation.nccl.constants.launch_us" in found  # the walk reaches the sections
    unbounded = sorted(path for path, bounded in found.items() if not bounded)
    assert not unbounded, f"numbers without an upper bound (a value no machine has would run): {unbounded}"


# ---- round 4 (issue 45): what was reported, each as `syncsim check` says it ------------------------------

ROUND4_BASE = "workload: {model: synthetic, gradient_mb: 1, compute_ms: 1}\npolicies: [{name: ring}]\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # YAML 1.1 read `010` as 8 hosts; YAML 1.2, which docs/config.md promises, as 10
        ("cluster: {topology: star, hosts: 010}\n", "ok - 10 GPUs on 10 hosts"),
        ("cluster: {topology: star, hosts: 0o10}\n", "ok - 8 GPUs on 8 hosts"),
        # of a merged list the first mapping wins (PyYAML's own merge let the last, 4, win)
        ("cluster: {topology: star, <<: [{hosts: 2}, {hosts: 4}]}\n", "ok - 2 GPUs on 2 hosts"),
    ],
)
def test_yaml_1_2_numbers_and_merge_lists_run_as_written(
    text: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yaml").write_text(text + ROUND4_BASE)
    assert main(["check", str(tmp_path / "c.yaml")]) == 0
    assert said in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("iterations: 1:30\n", "iterations: Input should be a valid integer (got '1:30', a number in YAML 1.1 only"),
        ("simulation: {trace: no}\n", "simulation.trace: Input should be a valid boolean (got 'no', a boolean in"),
        ("simulation: {nccl: {constants: {launch_us: 1e308}}}\n",
         "simulation.nccl.constants.launch_us: Input should be less than or equal to 1000000"),
        ("simulation: {nccl: {constants: {simple_kb: 1e7}}}\n",
         "simulation.nccl.constants.simple_kb: Input should be less than or equal to 1000000"),
        ("iterations: !!int ten\n", "iterations: !!int 'ten' is not a YAML 1.2 integer"),
        ("name: !!set {a}\n", "name: the tag !!set is not plain data"),
    ],
)  # fmt: skip
def test_round_4_inputs_are_one_line_naming_the_field(
    text: str, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines = check_lines(tmp_path, "cluster: {topology: star, hosts: 2}\n" + ROUND4_BASE + text, capsys)
    assert code == 2 and len(lines) == 1 and lines[0].startswith(line), lines


def test_extends_a_symlink_to_itself_is_one_line_naming_extends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "self.yaml").symlink_to("self.yaml")
    code, lines = check_lines(tmp_path, "extends: self.yaml\n", capsys)
    assert code == 2 and lines == [f"extends: {tmp_path / 'self.yaml'}: its symbolic links loop; name the file "
                                   f"itself (named in {tmp_path / 'c.yaml'})"]  # fmt: skip
