"""Bounded reads: a config, its `extends:` bases and a `workload.profile` are regular files under a size
cap, refused by field before anything is read (issue 32: `/dev/zero` grew `check` to gigabytes)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sim.cli import main
from sim.compute.profile import MAX_BYTES as PROFILE_BYTES
from sim.config import load_config
from sim.config.reading import read_bounded
from sim.config.yaml_io import MAX_BYTES as CONFIG_BYTES
from sim.errors import ConfigError

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
ZERO = Path("/dev/zero")
needs_dev_zero = pytest.mark.skipif(not ZERO.exists(), reason="no /dev/zero here")
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")


@pytest.fixture(autouse=True)
def no_hang() -> Iterator[None]:
    """A read that blocks (a FIFO opened without a writer) fails the test instead of hanging the suite."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError("the read blocked")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def child(tmp_path: Path, base: str | Path) -> Path:
    path = tmp_path / "child.yaml"
    path.write_text(f"extends: {base}\niterations: 2\n")
    return path


def profiled(tmp_path: Path, profile: str | Path) -> Path:
    data = {
        "cluster": {"topology": "star", "hosts": 2, "gpu": "V100", "nic_gbps": 25},
        "workload": {"model": "resnet32", "batch_size": 4, "profile": str(profile)},
        "policies": [{"name": "ring"}],
    }
    path = tmp_path / "profiled.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def sparse_file(path: Path, size: int) -> Path:
    """A file of `size` bytes that takes no disk (a hole), to go over a cap without writing it."""
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def check_error(config: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    start = time.perf_counter()
    code = main(["check", str(config)])
    return code, capsys.readouterr().err, time.perf_counter() - start


@needs_dev_zero
def test_extends_dev_zero_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, seconds = check_error(child(tmp_path, ZERO), capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "extends: /dev/zero is not a regular file (a character device)" in err, err
    assert seconds < 60.0  # only tells "at once" from "never" (the old reader never returned), past any load


@needs_dev_zero
def test_profile_dev_zero_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, seconds = check_error(profiled(tmp_path, ZERO), capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "workload.profile: /dev/zero is not a regular file (a character device)" in err, err
    assert seconds < 60.0


@needs_dev_zero
def test_the_config_itself_must_be_a_regular_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="^config: /dev/zero is not a regular file"):
        load_config(ZERO)
    with pytest.raises(ConfigError, match=r"^config: .* is not a regular file \(a directory\)"):
        load_config(tmp_path)


@needs_fifo
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"^extends: .*pipe.yaml is not a regular file \(a FIFO\)"):
        load_config(child(tmp_path, fifo))
    with pytest.raises(ConfigError, match=r"^workload.profile: .*pipe.yaml is not a regular file \(a FIFO\)"):
        from sim.api import prepare

        prepare(load_config(profiled(tmp_path, fifo)))


def test_files_over_the_caps_are_refused_naming_the_field_and_the_cap(tmp_path: Path) -> None:
    big_base = sparse_file(tmp_path / "base.yaml", CONFIG_BYTES + 1)
    with pytest.raises(
        ConfigError, match=r"^extends: .*base.yaml: 10,000,001 bytes, over the 10 MB limit for a config"
    ):
        load_config(child(tmp_path, big_base))
    big_config = sparse_file(tmp_path / "huge.yaml", 3 * CONFIG_BYTES)
    with pytest.raises(ConfigError, match=r"^config: .*huge.yaml: 30.0 MB, over the 10 MB limit for a config"):
        load_config(big_config)
    big_profile = sparse_file(tmp_path / "p.yaml", 5 * PROFILE_BYTES)
    with pytest.raises(ConfigError, match=r"^workload.profile: .*p.yaml: 10.0 MB, over the 2 MB limit for a profile"):
        from sim.api import prepare

        prepare(load_config(profiled(tmp_path, big_profile)))


def test_a_file_at_the_cap_is_read_whole_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, "f", 100) == b"x" * 100
    with pytest.raises(ConfigError, match=r"^f: .*: 100 bytes, over the 99 bytes limit for a file"):
        read_bounded(path, "f", 99)
    with pytest.raises(FileNotFoundError):  # the caller words a missing file as it words its other read errors
        read_bounded(tmp_path / "missing", "f", 100)


def test_a_normal_config_and_base_still_load() -> None:
    assert load_config(QUICKSTART).policies


# ---- YAML 1.2 wherever a config is read (issue 45): files, bases and --set values alike -------------------

STAR = "cluster: {topology: star, hosts: %s}\nworkload: {model: synthetic, gradient_mb: 1, compute_ms: 1}\n"
STAR += "policies: [{name: ring}]\n"


def star_file(tmp_path: Path, hosts: str = "2", extra: str = "", name: str = "star.yaml") -> Path:
    path = tmp_path / name
    path.write_text(STAR % hosts + extra)
    return path


@pytest.mark.parametrize(("written", "hosts"), [("010", 10), ("0o10", 8), ("0x10", 16), ("+4", 4)])
def test_integers_are_read_as_yaml_1_2_in_a_file_a_base_and_set(written: str, hosts: int, tmp_path: Path) -> None:
    assert load_config(star_file(tmp_path, written)).cluster.hosts == hosts  # YAML 1.1 would read 010 as 8
    base = star_file(tmp_path, written)
    (tmp_path / "child.yaml").write_text(f"extends: {base.name}\niterations: 2\n")
    assert load_config(tmp_path / "child.yaml").cluster.hosts == hosts
    assert load_config(star_file(tmp_path), [f"cluster.hosts={written}"]).cluster.hosts == hosts


@pytest.mark.parametrize(
    ("line", "override", "field", "kind"),
    [
        ("iterations: 1:30\n", "iterations=1:30", "iterations", "a number"),  # 1.1 would run 90 iterations
        ("iterations: 1_000\n", "iterations=1_000", "iterations", "a number"),
        ("iterations: 0b11\n", "iterations=0b11", "iterations", "a number"),
        ("simulation: {trace: off}\n", "simulation.trace=off", "simulation.trace", "a boolean"),
        ("simulation: {trace: yes}\n", "simulation.trace=yes", "simulation.trace", "a boolean"),
    ],
)
def test_yaml_1_1_forms_are_text_refused_by_the_field(
    line: str, override: str, field: str, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written, plain = star_file(tmp_path, extra=line, name="written.yaml"), star_file(tmp_path)
    for args in ([str(written)], [str(plain), "--set", override]):
        assert main(["check", *args]) == 2
        lines = [x.strip() for x in capsys.readouterr().err.splitlines()[1:]]
        assert len(lines) == 1 and lines[0].startswith(f"{field}: Input should be a valid"), lines
        assert f"{kind} in YAML 1.1 only; syncsim reads YAML 1.2, where it is text" in lines[0]


def test_set_reads_1e3_as_a_number_as_a_file_does(tmp_path: Path) -> None:
    config = load_config(star_file(tmp_path), ["simulation.nccl.constants.launch_us=1e1"])  # 1.1: the text '1e1'
    assert config.simulation.nccl.constants.launch_us == 10.0


def test_a_merge_key_list_takes_the_first_mapping_s_value(tmp_path: Path) -> None:
    text = STAR.replace(
        "cluster: {topology: star, hosts: %s}", "cluster: {topology: star, <<: [{hosts: 2}, {hosts: 4}]}"
    )
    path = tmp_path / "merged.yaml"
    path.write_text(text)
    assert load_config(path).cluster.hosts == 2  # PyYAML 6.0.4's own merge gave 4
    path.write_text(text.replace("star, <<", "star, hosts: 3, <<"))
    assert load_config(path).cluster.hosts == 3  # a key written in the mapping wins over merged ones


def test_a_bad_tag_in_a_config_names_its_field_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(star_file(tmp_path, "!!int many"))]) == 2
    lines = [x.strip() for x in capsys.readouterr().err.splitlines()[1:]]
    assert len(lines) == 1 and lines[0].startswith("cluster.hosts: !!int 'many' is not a YAML 1.2 integer"), lines
    assert "star.yaml, line 1)" in lines[0]


@pytest.mark.parametrize("field", ["extends", "workload.profile"])
def test_a_symlink_to_itself_is_one_line_naming_the_field_and_the_path(
    field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop.name)  # points at itself
    config = child(tmp_path, loop.name) if field == "extends" else profiled(tmp_path, loop.name)
    assert main(["check", str(config)]) == 2
    lines = [x.strip() for x in capsys.readouterr().err.splitlines()[1:]]
    assert len(lines) == 1 and lines[0].startswith(f"{field}: "), lines
    assert f"{loop}: its symbolic links loop" in lines[0]


def test_a_path_with_a_nul_character_is_one_line_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """os refuses a NUL byte in a path with a ValueError from deep inside; the config says which field."""
    config = profiled(tmp_path, "a\0b.yaml")
    assert main(["check", str(config)]) == 2
    lines = [x.strip() for x in capsys.readouterr().err.splitlines()[1:]]
    assert len(lines) == 1 and lines[0].startswith("workload.profile: '"), lines
    assert lines[0].endswith("a\\x00b.yaml': a path cannot hold a NUL character"), lines
