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
    with pytest.raises(ConfigError, match=r"^workload.profile: .*p.yaml: 80.0 MB, over the 16 MB limit for a profile"):
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
