"""`syncsim calibrate`'s knobs: flags (or the config's `calibration:` section) reach the measurement
through the launcher and each rank's process; bad flags are one line naming the flag, exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

torch = pytest.importorskip("torch")

import real.calibrate.run  # noqa: E402
import real.calibrate.session  # noqa: E402
import real.launch  # noqa: E402
from real.__main__ import run  # noqa: E402
from real.calibrate.profiled import ProfileSpec  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.config import load_config  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

ZOO = {
    "name": "zoo",
    "cluster": {"topology": "star", "hosts": 2, "nic_gbps": 25},
    "workload": {"model": "resnet32", "batch_size": 4, "efficiency": 0.4},
    "policies": [{"name": "ring"}],
}


def config_file(folder: Path, **extra: Any) -> Path:
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump({**ZOO, **extra}))
    return path


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--repeats", "20000"], "--repeats: Input should be less than or equal to 10000 (got 20000)"),
        (["--statistic", "avg"], "--statistic: Input should be 'median', 'mean' or 'min' (got 'avg')"),
        (["--uplink-bytes", "10"], "--uplink-bytes: Input should be greater than or equal to 4096 (got 10)"),
        (["--uplink-bytes", "8192", "--max-bytes", "4096"], "--uplink-bytes: 8192 exceeds max_bytes (4096)"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], line: str
) -> None:
    assert main(["calibrate", str(config_file(tmp_path)), "--out", str(tmp_path / "c.yaml"), *flags]) == 2
    assert capsys.readouterr().err == f"syncsim calibrate: argument error: {line}\n"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_nccl_without_cuda_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", str(config_file(tmp_path)), "--out", "c.yaml", "--backend", "nccl"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("syncsim calibrate: argument error: --backend: 'nccl' needs a CUDA device")
    assert err.count("\n") == 1


def test_the_config_section_is_validated_by_field(tmp_path: Path) -> None:
    assert load_config(config_file(tmp_path)).calibration.statistic == "median"
    with pytest.raises(ConfigError, match="calibration.repeats"):
        load_config(config_file(tmp_path, calibration={"repeats": 0}))


def test_flags_reach_the_measurement_through_launcher_and_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = config_file(tmp_path, calibration={"repeats": 7, "bandwidth_factor": 30})
    launched: dict[str, Any] = {}

    def fake_launch(config_path: Path, out: Path, *args: Any, **kwargs: Any) -> real.launch.Outcome:
        launched.update(kwargs, config=config_path, out=out)
        return real.launch.Outcome(codes={0: 0})

    monkeypatch.setattr(real.launch, "launch", fake_launch)
    flags = ["--repeats", "3", "--statistic", "min", "--uplink-bytes", "65536", "--max-bytes", "1048576"]
    assert main(["calibrate", str(config), "--out", str(tmp_path / "c.yaml"), *flags]) == 0
    overrides = launched["overrides"]
    assert overrides == [
        "calibration.repeats=3",
        "calibration.statistic=min",
        "calibration.uplink_bytes=65536",
        "calibration.max_bytes=1048576",
    ]
    assert launched["calibrate"] is True

    measured: dict[str, Any] = {}

    class NoGroup:
        def init_process_group(self, *args: Any, **kwargs: Any) -> None:
            pass

        def destroy_process_group(self) -> None:
            pass

    def fake_calibrate(*args: Any, **kwargs: Any) -> None:
        measured.update(kwargs, task=args[4])

    monkeypatch.setattr(real.calibrate.session, "dist", NoGroup())
    monkeypatch.setattr(real.calibrate.run, "calibrate", fake_calibrate)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    argv = [str(config), "--out", str(tmp_path / "c.yaml"), "--calibrate", "--backend", "gloo"]
    assert run(argv + [arg for o in overrides for arg in ("--set", o)]) == 0
    assert (measured["repeats"], measured["statistic"]) == (3, "min")
    assert (measured["uplink_bytes"], measured["max_bytes"], measured["bandwidth_factor"]) == (65536, 1 << 20, 30)
    assert measured["profile"] == ProfileSpec("resnet32", 4, "fp32") and measured["task"] is None
    assert run(argv) == 0 and measured["repeats"] == 7 and measured["uplink_bytes"] is None  # the config's
    assert measured["precision"] == "fp32"  # compute is timed in the workload's precision, as it trains
    assert run(argv + ["--set", "workload.precision=fp16"]) == 0 and measured["precision"] == "fp16"
    assert measured["profile"] == ProfileSpec("resnet32", 4, "fp16")
