"""Hostile configs: every bundled config, one field at a time set to a hostile value, and whole files of
garbage. The property: `syncsim check` exits 0 and the config then runs to completion on a small
iteration budget, or exits 2 with one line per problem naming the field; never a traceback, never a
hang, never code executed.

CI runs a bounded number of examples over the configs that run in about a second. For a longer run
over every bundled config:

    SYNCSIM_FUZZ_EXAMPLES=2000 SYNCSIM_FUZZ_ALL=1 python -m pytest tests/test_config_fuzz.py -p no:randomly
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from helpers import bounded  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sim.api import simulate  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.config import PolicyEntry, parse_config  # noqa: E402
from sim.config.load import read_config  # noqa: E402
from sim.config.overrides import set_path  # noqa: E402
from sim.config.yaml12 import dump  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = int(os.environ.get("SYNCSIM_FUZZ_EXAMPLES", "500"))
# configs that train big zoo models or simulate thousands of flows take seconds each even at 2 iterations
SLOW = {
    "real_zoo_resnet50.yaml",
    "zen_deepfm_8x8.yaml",
    "zen_deepfm_16.yaml",
    "zen_code_opt_2_7b_16x1.yaml",
}
CONFIGS = sorted(
    p
    for p in [*ROOT.glob("configs/*.yaml"), *ROOT.glob("configs/papers/*.yaml")]
    if os.environ.get("SYNCSIM_FUZZ_ALL") or p.name not in SLOW
)
BUDGET = 2  # iterations an accepted config runs
HANG_S = 300  # an example that takes longer than this counts as a hang (a busy CI machine is slow)

NESTED: Any = {"a": [[{"b": [[[{"c": [1, 2, {"d": []}]}]]]}]]}
HOSTILE: list[Any] = [
    float("nan"),
    float("inf"),
    float("-inf"),
    0,
    0.0,
    -1,
    -1e-9,
    1e308,
    10**308,
    2**63,
    True,
    False,
    None,
    "",
    "x",
    "1e3",
    "ünïcødé ✓ 名前",
    "0o10",  # text to YAML 1.1, so safe_dump leaves it unquoted: 8 to YAML 1.2, as syncsim reads it
    "010",
    "1:30",
    "yes",
    "a\nb",
    "../../escape",
    [],
    [1, "two", None],
    {},
    {"unknown_key": 1},
    NESTED,
    # legal-looking edges, so that accepted configs run too
    1,
    2,
    0.5,
    1e-6,
    1e6,
    8,
]
# a field line: `cluster.nic_gbps: ...`, `policies[2].first.shards: ...`, `faults.stragglers[0]: ...`
FIELD_LINE = re.compile(r"^[A-Za-z_][\w]*(\[\d+\])*(\.[\w, ]+(\[\d+\])*)*: \S")


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place a value lives (mappings and lists too), the root excluded."""
    if prefix:
        yield prefix
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _paths(value, (*prefix, i))


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for part in path[:-1]:
        data = data[part]
    data[path[-1]] = value


def check(path: Path, *args: str) -> tuple[int, list[str]]:
    """`syncsim check PATH [ARGS]` in-process: exit code and the error lines (header and indent removed;
    an argument error is one line, kept whole)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), bounded(HANG_S):
        code = main(["check", str(path), *args])
    said = err.getvalue().splitlines()
    if said and "argument error" in said[0]:
        return code, said
    return code, [line.strip() for line in said[1:]]


def assert_refused_by_field(code: int, lines: list[str], what: str) -> None:
    assert code == 2, f"{what}: exit {code}"
    assert lines, f"{what}: exit 2 without a message"
    for line in lines:
        assert FIELD_LINE.match(line), f"{what}: a line that names no field: {line!r}"
        assert "Traceback" not in line


def run_small(path: Path, what: str) -> None:
    data = read_config(path)  # as `check` read it: `1e3` a number (a string to plain PyYAML), `extends:` merged
    data["iterations"] = min(data.get("iterations", 10), BUDGET)
    if data.get("warmup_iterations") is not None:  # must leave an iteration to summarise
        data["warmup_iterations"] = min(data["warmup_iterations"], BUDGET - 1)
    with bounded(HANG_S):
        result = simulate(data)
    assert not result.errors, f"{what}: accepted by check, then failed: {result.errors}"
    assert len(result.summary) == len(data["policies"])


def _drawn_config(data: st.DataObject) -> tuple[Path, dict[str, Any]]:
    """A bundled config drawn for fuzzing, as data; the fuzzed copy lives elsewhere, so an `extends:`
    base is named by its absolute path."""
    source = data.draw(st.sampled_from(CONFIGS), label="config")
    config = yaml.safe_load(source.read_text())
    if isinstance(config.get("extends"), str):
        config["extends"] = str((source.parent / config["extends"]).resolve())
    transformer = config.get("workload", {}).get("transformer")
    if isinstance(transformer, dict) and isinstance(transformer.get("hf_config"), str):  # likewise its config.json
        transformer["hf_config"] = str((source.parent / transformer["hf_config"]).resolve())
    return source, config


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_one_hostile_field_is_refused_by_name_or_runs(data: st.DataObject, tmp_path: Path) -> None:
    source, config = _drawn_config(data)
    path = data.draw(st.sampled_from(list(_paths(config))), label="path")
    if data.draw(st.booleans(), label="add a key instead") and isinstance(_get(config, path), dict):
        value = data.draw(st.sampled_from(HOSTILE), label="value")
        _get(config, path)["surprise_key"] = value
    else:
        value = data.draw(st.sampled_from(HOSTILE), label="value")
        _set(config, path, value)
    target = tmp_path / "fuzzed.yaml"
    target.write_text(yaml.safe_dump(config, allow_unicode=True))
    what = f"{source.name} {'.'.join(map(str, path))} = {value!r}"
    code, lines = check(target)
    if code == 0:
        run_small(target, what)
    else:
        assert_refused_by_field(code, lines, what)


def _get(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        data = data[part]
    return data


GARBAGE: dict[str, bytes] = {
    "binary": bytes(range(256)) * 4,
    "invalid utf-8": b"name: caf\xe9\ncluster: {topology: star, hosts: 2}\n",
    "utf-16": "name: x\n".encode("utf-16"),
    "python object tag": b"name: !!python/object/apply:os.system ['touch {marker}']\n",
    "python name tag": b"cluster: !!python/name:os.system\n",
    "alias bomb": b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
    + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n".encode()
        for i in range(8)
    ),
    "self-referencing alias": b"policies: &p [*p]\n",
    "duplicate keys": b"cluster: {topology: star, hosts: 2}\ncluster: {topology: star, hosts: 4}\n",
    "deep nesting": b"a: " + b"[" * 50_000 + b"]" * 50_000 + b"\n",
    "empty": b"",
    "only a comment": b"# nothing here\n",
    "a list": b"- 1\n- 2\n",
    "a scalar": b"42\n",
    "tabs": b"cluster:\n\ttopology: star\n",
    "nul bytes": b"name: a\x00b\n",
    "unclosed": b"cluster: {topology: star\n",
    "huge": b"name: x\n" + b"#" * 11_000_000 + b"\n",
    # round 4 (issue 45): tags whose content PyYAML could not build ended as Python tracebacks
    "int tag on text": b"iterations: !!int abc\n",
    "bool tag": b"simulation: {trace: !!bool maybe}\n",
    "float tag": b"name: !!float 1:ab\n",
    "timestamp tag": b"name: !!timestamp x\n",
    "set tag": b"name: !!set [1]\n",
    "huge integer": b"iterations: " + b"9" * 10_000 + b"\n",
    "self merge": b"cluster: &c {<<: *c}\n",
    "merge of a number": b"cluster: {<<: 3}\n",
    "merge bomb": b"k0: &k0 {x0: 0}\n"
    + b"".join(f"k{i}: &k{i} {{<<: *k{i - 1}, x{i}: {i}}}\n".encode() for i in range(1, 1500)),
}


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_files_end_in_one_clear_line(kind: str, tmp_path: Path) -> None:
    marker = tmp_path / "code-ran"
    path = tmp_path / "garbage.yaml"
    path.write_bytes(GARBAGE[kind].replace(b"{marker}", str(marker).encode()))
    code, lines = check(path)
    assert code == 2, kind
    assert lines and all("Traceback" not in line for line in lines)
    assert len(lines) == 1 or all(FIELD_LINE.match(line) for line in lines), lines
    assert not marker.exists(), "a YAML tag executed code"


# YAML text a config's value may be written as: YAML 1.1's forms (octal, base 60, yes/no, dates), YAML 1.2's,
# tags, merge keys; each as a file's value and as a `--set` value (issue 45)
HOSTILE_TEXT: list[str] = [
    "010",
    "0o10",
    "0x10",
    "+4",
    "1:30",
    "1_000",
    "0b11",
    "yes",
    "off",
    "On",
    "2024-01-01",
    "1e3",
    ".NaN",
    "-.inf",
    "~",
    "=",
    "<<",
    "!!int abc",
    "!!int 1:30",
    "!!float x",
    "!!bool maybe",
    "!!null x",
    "!!timestamp 2001-12-14",
    "!!binary AAAA",
    "!!set {a}",
    "!!omap [{a: 1}]",
    "!!str 010",
    "!local x",
    "!!python/name:os.system",
    "{<<: [{hosts: 2}, {hosts: 4}]}",
    "{<<: 3}",
    "[!!int x]",
    "!!int " + "9" * 5000,
]
PLACEHOLDER = "hostile_placeholder_45"


def _dotted(path: tuple[Any, ...]) -> Optional[str]:
    """A value's path as `--set` names it (`policies[0].name`), or None where a key is no identifier."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and part.isidentifier():
            out += f".{part}" if out else part
        else:
            return None
    return out


@settings(
    max_examples=max(30, EXAMPLES // 8),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_one_hostile_yaml_form_in_a_file_or_set_is_refused_by_name_or_runs(data: st.DataObject, tmp_path: Path) -> None:
    source, config = _drawn_config(data)
    path = data.draw(st.sampled_from([p for p in _paths(config) if p != ("extends",)]), label="path")
    raw = data.draw(st.sampled_from(HOSTILE_TEXT), label="text")
    dotted = _dotted(path)
    target = tmp_path / "fuzzed.yaml"
    if dotted is not None and data.draw(st.booleans(), label="as --set"):
        target.write_text(yaml.safe_dump(config, allow_unicode=True))
        args: tuple[str, ...] = ("--set", f"{dotted}={raw}")
    else:
        _set(config, path, PLACEHOLDER)
        target.write_text(yaml.safe_dump(config, allow_unicode=True).replace(PLACEHOLDER, raw))
        args = ()
    what = f"{source.name} {'.'.join(map(str, path))} = {raw[:40]!r} {args[:1]}"
    code, lines = check(target, *args)
    if code == 0:
        if args:  # run what check accepted: the file with the override applied
            overridden = tmp_path / "overridden.yaml"
            overridden.write_text(dump(read_config(target, args[1:]), allow_unicode=True))
            target = overridden
        run_small(target, what)
    elif args and lines and "argument error" in lines[0]:
        assert code == 2 and len(lines) == 1 and f"--set '{dotted}=" in lines[0], (what, lines)
    else:
        assert_refused_by_field(code, lines, what)


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None, derandomize=True)
@given(raw=st.binary(max_size=400) | st.text(max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_random_bytes_never_crash_check(raw: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("bytes") / "random.yaml"
    path.write_bytes(raw)
    code, lines = check(path)
    assert code == 2 and lines


# ---- accepted fields that change nothing ------------------------------------------------------------
# Every field of the schema a small base config accepts is set to other valid values, one field at a time,
# and the run's summary and iterations tables compared with the base's. A field that is accepted and
# changes nothing on every base is silent nonsense (as `on_s` without `off_s` was), unless ALLOWED says
# why that is by design. Each field is tried on the bases in order and stops at the first change, so the
# whole pass is a few dozen two- or three-iteration runs.

BASE_CLUSTER = {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 2, "uplink_gbps": 10.0}
EFFECT_BASES: dict[str, dict[str, Any]] = {
    # synthetic, NCCL network model, bucketed layers, jitter, every kind of fault and background flow
    "synthetic": {
        "iterations": 2,
        "cluster": {**BASE_CLUSTER, "server_hosts": 1},
        "workload": {
            "model": "synthetic",
            "gradient_mb": 20.0,
            "compute_ms": 5.0,
            "bucket_mb": 8.0,
            "synthetic_layers": 4,
            "compute_jitter": 0.1,
        },
        "policies": [{"name": "ring"}, {"name": "ps", "placement": "dedicated"}],
        "faults": {
            "slow_workers": [{"ranks": [1], "compute_factor": 2.0}],
            "stragglers": [
                {"ranks": [2], "compute_factor": 3.0, "start_s": 0.0, "duration_s": 0.2},
                {"uplinks": "all", "bandwidth_factor": 0.5, "every_s": 0.02, "count": 1, "duration_s": 0.01},
                {"ranks": [5, 6], "delay_ms": 2.0, "start_s": 0.0, "duration_s": 0.1},  # rpc: twice between them
            ],
        },
        "background": [
            {"uplinks": ["rack0"], "fraction": 0.5, "start_s": 0.01, "duration_s": 0.2, "on_s": 0.01, "off_s": 0.01},
            {"hosts": ["h0", "h3"], "gbps": 5.0},
        ],
        "simulation": {"trace": False},
    },
    # a zoo model's compute model, small buckets (NCCL's LL protocols), a slow input pipeline
    "zoo": {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2, "gpus_per_host": 2, "gpu": "A100"},
        "workload": {
            "model": "resnet32",
            "batch_size": 64,
            "bucket_mb": 0.05,
            "input_samples_s": 2e3,
            "optimizer_ms": 1.0,  # an optimizer step for accumulation_steps to space out
        },
        "policies": [{"name": "ring"}],
        "simulation": {"trace": False},
    },
    # sparse gradients: synthetic embedding tables, on the ideal network (collective_model applies there)
    "tables": {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 4},
        "workload": {
            "model": "synthetic",
            "gradient_mb": 8.0,
            "compute_ms": 1.0,
            "synthetic_layers": 2,
            "sparsity": {"lookups": 2000, "embedding_dim": 16, "zipf_s": 1.0},
        },
        "policies": [{"name": "zen"}, {"name": "sparse_allgather"}, {"name": "ring"}],
        "simulation": {"trace": False, "network_model": "ideal"},
    },
    # top-k sparsified dense tensors, NCCL's LL protocol (its slice: steps inside a host)
    "topk": {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2, "gpus_per_host": 2},
        "workload": {
            "model": "synthetic",
            "gradient_mb": 8.0,
            "compute_ms": 1.0,
            "synthetic_layers": 2,
            "sparsity": {"topk": 0.05, "dense_below": 10},
        },
        "policies": [{"name": "zen"}, {"name": "ring"}],
        "simulation": {"trace": False, "nccl": {"protocol": "ll"}},
    },
    # a policy with local ops (DiLoCo's outer step), which cluster.host_memory_gbs moves to the host's CPU
    "local ops": {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2},
        "workload": {"model": "synthetic", "gradient_mb": 8.0, "compute_ms": 1.0},
        "policies": [{"name": "diloco", "period": 1}],
        "simulation": {"trace": False, "network_model": "ideal"},
    },
    # a decoder-only model by its numbers (learned positions, so that max_positions sizes a table)
    "transformer": {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2},
        "workload": {
            "model": "transformer",
            "batch_size": 2,
            "transformer": {
                "layers": 1,
                "hidden": 32,
                "heads": 4,
                "kv_heads": 2,
                "mlp": "swiglu",
                "mlp_width": 64,
                "norm": "rmsnorm",
                "positions": "learned",
                "vocab": 100,
                "seq_len": 16,
                "max_positions": 32,
                "tied_embeddings": False,
                "bias": False,
            },
        },
        "policies": [{"name": "ring"}],
        "simulation": {"trace": False},
    },
    # a zoo model's own embedding tables (sparsity.embeddings: false makes them dense), a sparse policy
    "zoo tables": {
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2},
        "workload": {"model": "deepfm", "batch_size": 64},
        "policies": [{"name": "sparse_allgather"}],
        "simulation": {"trace": False},
    },
}
# fields that by design change nothing in a small run's summary and iterations tables
ALLOWED: dict[str, str] = {
    "name": "names the output folder only",
    "simulation.trace": "whether trace.json is written",
    "simulation.trace_max_events": "events kept in trace.json",
    "simulation.utilization_samples": "samples of the links' utilisation table, not the summary",
    "simulation.utilization_interval_ms": "sampling interval of the links' utilisation table",
    "simulation.stall_timeout_s": "acts only on a deadlock, which a valid run never reaches",
    "simulation.max_estimated_wall_s": "a limit checked before the run",
    "simulation.max_estimated_memory_mb": "a limit checked before the run",
    "simulation.host_symmetry": "how the run is simulated, not what it answers: one host copied or every rank "
    "simulated gives the same tables (tests/test_symmetry.py)",
    "simulation.check_memory": "refuses, before the run, a config that cannot fit; a run that fits is the same "
    "(tests/test_memory.py)",
    "workload.accumulation_sync": "acts only with accumulation_steps > 1 (tests/test_worker.py)",
    "calibration.repeats": "read by `syncsim calibrate` only",
    "calibration.statistic": "read by `syncsim calibrate` only",
    "calibration.uplink_bytes": "read by `syncsim calibrate` only",
    "calibration.max_bytes": "read by `syncsim calibrate` only",
    "calibration.bandwidth_factor": "read by `syncsim calibrate` only",
    "simulation.nccl.constants.nvls_kb": "NVLS runs only inside an NVSwitch host of H100-class GPUs",
    "workload.input_prefetch_batches": "the queue's depth matters only when loaders and GPUs vary around each "
    "other's rate, over more iterations (tests/test_input_pipeline.py)",
}
# accepted fields this pass found without effect, reported rather than fixed here (issue 32's note)
KNOWN_SILENT: dict[str, str] = {}  # sparsity.embeddings under lookups: now refused (tests/test_config.py)
# fields no base can take, and where they are tested instead
NOT_HERE: dict[str, str] = {
    "workload.profile": "needs a measured profile file: tests/test_profile.py",
    "workload.transformer": "unset but for model transformer (refused elsewhere); the transformer base varies its keys",
    "workload.transformer.hf_config": "needs a config.json file: tests/test_config_transformer.py",
    "numerics": "trains a model: tests/test_numerics_*.py",
    "policies": "each policy's own settings: tests/test_policies.py and the policy's tests",
    "cluster.topology": "picks the section's shape, so its other keys change with it: tests/test_topology.py",
}
# values to try where doubling and halving the current one cannot say (an unset field, a name, a list)
TRY: dict[str, list[Any]] = {
    "warmup_iterations": [1],
    "cluster.gpu": ["P100", "A100"],
    "cluster.intra_host_gbps": [5.0],
    "cluster.host_memory_gbs": [1.0],
    "cluster.server_nic_gbps": [1.0],
    "cluster.uplink_gbps": [2.0],
    "workload.model": ["bert_base", "wrn26_10"],
    "workload.efficiency": [0.01],
    "workload.input_samples_s": [100.0],
    "workload.sparsity.dense_below": [10**7],
    "workload.sparsity.zipf_s": [0.0, 2.0],
    "workload.sparsity.hot_rows": ["first", "scattered"],
    "workload.sparsity.topk": [0.5],
    "workload.sparsity.lookups": [10],
    "simulation.nccl.constants.ll_kb": [1.0, 1000.0],
    "simulation.nccl.constants.ll128_kb": [1.0, 1000.0],
    "simulation.nccl.constants.simple_kb": [1.0, 10000.0],
    "simulation.nccl.constants.nvls_kb": [1.0],
    "simulation.nccl.constants.launch_us": [500.0],
    "simulation.nccl.constants.step_scale": [100.0],
    "simulation.nccl.constants.network_kb": [1.0, 10000.0],
    "simulation.nccl.constants.network_scale": [100.0],
    "faults.slow_workers[].ranks": [[0]],
    "faults.stragglers[].ranks": [[0, 1]],
    "faults.stragglers[].uplinks": [["rack1"]],
    "background[].hosts": [["h1", "h2"]],
    "background[].uplinks": ["all"],
    "background[].duration_s": [0.001],
    "background[].on_s": [0.001],
    "background[].off_s": [0.05],
}


def _leaves(model: Any, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, path with list indices dropped, current value) of every leaf field of a validated config."""
    from pydantic import BaseModel

    for name in type(model).model_fields:
        value, path = getattr(model, name), f"{prefix}{name}"
        if isinstance(value, BaseModel) and not isinstance(value, PolicyEntry):
            yield from _leaves(value, path + ".")
        elif isinstance(value, list) and all(isinstance(v, BaseModel) for v in value):  # a base without
            for i, item in enumerate(value):  # entries (faults, background) leaves them to one with them
                yield from _leaves(item, f"{path}[{i}].") if not isinstance(item, PolicyEntry) else iter(())
        else:
            yield path, re.sub(r"\[\d+\]", "[]", path), value


def _others(key: str, value: Any, annotation: Any) -> list[Any]:
    """Other valid-looking values of a field: its literal options, the flipped bool, double and half."""
    if key in TRY:
        return [v for v in TRY[key] if v != value]
    options = _literals(annotation)
    if options:
        return [o for o in dict.fromkeys(options) if o != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value * 2, value + 1] if value else [1, 2]
    if isinstance(value, float):
        return [value * 2, value / 2] if value else [0.5, 0.1]
    return []


def _literals(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) is typing.Literal:
        return list(typing.get_args(annotation))
    return [a for arg in typing.get_args(annotation) for a in _literals(arg)]


def _field_annotation(config: Any, path: str) -> Any:
    node: Any = config
    for part in re.sub(r"\[\d+\]", "", path).split(".")[:-1]:
        node = getattr(node, part)
        if isinstance(node, list):
            node = node[0]
    return type(node).model_fields[path.rsplit(".", 1)[-1]].annotation


def _tables(data: dict[str, Any]) -> Optional[tuple[str, str]]:
    """The summary and iterations tables of a run, or None where the config is refused."""
    try:
        result = simulate(data)
    except ConfigError:
        return None
    assert not result.errors, result.errors
    return result.summary.to_csv(index=False), result.iterations.to_csv(index=False)


@pytest.mark.slow
def test_every_accepted_field_changes_the_results() -> None:
    outcome: dict[str, str] = {}  # key (path, indices dropped) -> changed | no effect | refused | no value
    for base_name, base in EFFECT_BASES.items():
        config = parse_config(copy.deepcopy(base))
        reference = _tables(copy.deepcopy(base))
        assert reference is not None, base_name
        for path, key, value in _leaves(config):
            skip = {**ALLOWED, **NOT_HERE, **KNOWN_SILENT}
            if outcome.get(key) == "changed" or key in skip or key.split(".")[0] in skip:
                continue
            others = _others(key, value, _field_annotation(config, path))
            if not others:
                outcome.setdefault(key, "no value to try")
                continue
            for other in others:
                data = copy.deepcopy(base)
                set_path(data, path, other)
                tables = _tables(data)
                if tables is None:
                    outcome.setdefault(key, "refused")
                elif tables != reference:
                    outcome[key] = "changed"
                    break
                else:
                    outcome[key] = f"no effect on {base_name} ({path}: {value!r} -> {other!r})"
    silent = {key: why for key, why in outcome.items() if why.startswith("no effect")}
    assert not silent, "accepted fields that change nothing (fix, or add to ALLOWED with a reason):\n" + "\n".join(
        f"{key}: {why}" for key, why in silent.items()
    )
    untried = sorted(key for key, why in outcome.items() if why in ("refused", "no value to try"))
    assert not untried, f"fields no base could vary (give TRY values, or a base that takes them): {untried}"
    assert sum(why == "changed" for why in outcome.values()) >= 50
