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
import io
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from sim.api import simulate  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.config.load import read_config  # noqa: E402

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


@contextlib.contextmanager
def _bounded(seconds: int) -> Iterator[None]:
    def hang(signum: int, frame: Any) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check(path: Path) -> tuple[int, list[str]]:
    """`syncsim check PATH` in-process: exit code and the error lines (header and indent removed)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()), _bounded(HANG_S):
        code = main(["check", str(path)])
    lines = [line.strip() for line in err.getvalue().splitlines()[1:]]
    return code, lines


def assert_refused_by_field(code: int, lines: list[str], what: str) -> None:
    assert code == 2, f"{what}: exit {code}"
    assert lines, f"{what}: exit 2 without a message"
    for line in lines:
        assert FIELD_LINE.match(line), f"{what}: a line that names no field: {line!r}"
        assert "Traceback" not in line


def run_small(path: Path, what: str) -> None:
    data = read_config(path)  # as `check` read it: `1e3` a number (a string to plain PyYAML), `extends:` merged
    data["iterations"] = min(data.get("iterations", 10), BUDGET)
    with _bounded(HANG_S):
        result = simulate(data)
    assert not result.errors, f"{what}: accepted by check, then failed: {result.errors}"
    assert len(result.summary) == len(data["policies"])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_one_hostile_field_is_refused_by_name_or_runs(data: st.DataObject, tmp_path: Path) -> None:
    source = data.draw(st.sampled_from(CONFIGS), label="config")
    config = yaml.safe_load(source.read_text())
    if isinstance(config.get("extends"), str):  # the fuzzed copy lives elsewhere: its base, by absolute path
        config["extends"] = str((source.parent / config["extends"]).resolve())
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


@settings(max_examples=max(20, EXAMPLES // 4), deadline=None, derandomize=True)
@given(raw=st.binary(max_size=400) | st.text(max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_random_bytes_never_crash_check(raw: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("bytes") / "random.yaml"
    path.write_bytes(raw)
    code, lines = check(path)
    assert code == 2 and lines
