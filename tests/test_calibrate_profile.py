"""A calibration of a zoo workload carries its measured compute profile: the profile is written
beside the calibrated config, `workload.profile` names it, and the simulator run of that config
computes exactly the profile's times. The last test runs `syncsim calibrate`'s launcher for real
(two gloo processes on loopback, resnet32 profiled on the CPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_calibrate_fit import racks_of, synth

from real.calibrate import fit_report, write_calibrated_config
from real.calibrate.rows import Measurements
from sim.api import simulate
from sim.catalog.zoo import get_model
from sim.compute.profile import ComputeProfile, LayerTime, read_profile
from sim.config import load_config

BASE = {
    "name": "zoo-calibrated",
    "iterations": 3,
    "cluster": {"topology": "star", "hosts": 4, "gpu": "A100"},
    "workload": {"model": "resnet32", "batch_size": 4, "efficiency": 0.4, "bucket_mb": 0.2},
    "policies": [{"name": "ring"}, {"name": "no_sync"}],
}


def fake_profile() -> ComputeProfile:
    layers = tuple(
        LayerTime(layer.name, 1e-4 * (i + 1), 2e-4 + 1e-5 * i) for i, layer in enumerate(get_model("resnet32").layers)
    )
    return ComputeProfile("resnet32", 4, "fp32", layers, "test device", {"ranks": 4})


def test_the_profile_is_written_referenced_and_simulated_exactly(tmp_path: Path) -> None:
    m = synth(racks_of(2, 2), uplink_gbps=5)
    report = fit_report(Measurements(**{**m.__dict__, "gradient_bytes": None, "batch": 4, "profile": fake_profile()}))
    profile = fake_profile()
    assert report.workload == {"model": "resnet32", "batch_size": 4, "precision": "fp32"}
    assert report.compute.value == pytest.approx(profile.forward_s + profile.backward_s)
    assert "compute resnet32 profile" in report.summary()
    path = write_calibrated_config(report, BASE, tmp_path / "out" / "calibrated.yaml")
    written = yaml.safe_load(path.read_text())["workload"]
    assert written["profile"] == "calibrated.profile.yaml" and "efficiency" not in written
    assert written["bucket_mb"] == 0.2 and written["model"] == "resnet32"
    assert read_profile(tmp_path / "out" / "calibrated.profile.yaml").layers == profile.layers
    config = load_config(path)  # from another folder: the profile is found beside the config
    assert config.workload.profile == str((tmp_path / "out" / "calibrated.profile.yaml").resolve())
    iterations = simulate(config).iterations
    assert iterations["compute_s"].tolist() == pytest.approx(
        [profile.forward_s + profile.backward_s] * len(iterations), rel=1e-9
    )


def test_a_synthetic_workload_keeps_todays_calibrated_compute() -> None:
    report = fit_report(synth(racks_of(2, 2), uplink_gbps=5))
    assert report.profile is None and report.workload["model"] == "synthetic"
    assert report.workload["compute_ms"] == 20.0  # synth's noiseless 20 ms a step, rounded to 6 digits


def test_profile_spec_follows_what_the_real_backend_trains() -> None:
    pytest.importorskip("torch")
    from real.calibrate.profiled import ProfileSpec, profile_spec
    from sim.config import parse_config

    assert profile_spec(parse_config(BASE)) == ProfileSpec("resnet32", 4, "fp32")
    digits = {"dataset": "digits", "model": "mlp", "hidden": [8], "global_batch": 16}
    assert profile_spec(parse_config({**BASE, "numerics": digits})) is None  # trains the mlp: lockstep compute
    synthetic = {"model": "synthetic", "gradient_mb": 1, "compute_ms": 2}
    assert profile_spec(parse_config({**BASE, "workload": synthetic})) is None


@pytest.mark.slow
def test_calibrate_a_zoo_workload_on_loopback_end_to_end(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from real.launch import launch

    base = {**BASE, "cluster": {"topology": "star", "hosts": 2, "gpu": "A100"}, "calibration": {"repeats": 2}}
    config = tmp_path / "zoo.yaml"
    config.write_text(yaml.safe_dump(base))
    out = tmp_path / "cal" / "calibrated.yaml"
    outcome = launch(config, out, timeout_s=60, calibrate=True, overrides=["calibration.statistic=min"])
    assert outcome.ok, outcome.failed
    calibrated = load_config(out)
    profile = read_profile(calibrated.workload.profile)
    assert profile.model == "resnet32" and profile.batch_size == 4 and profile.notes["ranks"] == 2
    assert calibrated.workload.efficiency is None and calibrated.calibration.statistic == "min"
    assert (out.parent / "calibrated.computes.csv").exists()
    compute_s = simulate(calibrated).iterations["compute_s"]
    assert compute_s.tolist() == pytest.approx([profile.forward_s + profile.backward_s] * len(compute_s), rel=1e-9)
