"""Your own model from one CPU's profile to 1,024 simulated GPUs (`workload.model: profiled`): the
plan's bytes, buckets, shapes and compute by hand from the profile file, and the refusals that name
the field or the flag."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.api import prepare, simulate
from sim.catalog.zoo import get_model
from sim.cli import main
from sim.compute.profile import ComputeProfile, LayerTime, write_profile
from sim.config import load_config
from sim.errors import ConfigError

torch = pytest.importorskip("torch")

ROOT = Path(__file__).parent.parent
# examples/my_model.py by hand: conv 3->16 3x3, hidden 256->64, head 64->10, each with a bias
SHAPES = {"conv": [[16, 3, 3, 3], [16]], "hidden": [[64, 256], [64]], "head": [[10, 64], [10]]}
PARAMS = {"conv": 16 * 27 + 16, "hidden": 256 * 64 + 64, "head": 64 * 10 + 10}
# what autograd saves at batch 8, fp32, by hand (real/saved_activations.py: once per storage, for the layer
# that saved it first, no weights): conv its input images and the ReLU's output (the pooling saves that
# same output again); hidden its input (the pooled map, 256 values) and its ReLU's output (64); head saves
# that output again and its weight (neither counted), then the cross-entropy: the log-probabilities over
# 10 classes, the targets (int64) and nll_loss's total weight (one fp32 scalar)
SAVED = {
    "conv": 8 * 3 * 32 * 32 * 4 + 8 * 16 * 32 * 32 * 4,
    "hidden": 8 * 256 * 4 + 8 * 64 * 4,
    "head": 8 * 10 * 4 + 8 * 8 + 4,
}
PROFILE_ARGS = ["profile", "my_model:build", "--input", "float32:3x32x32", "--classes", "10", "--batch", "8"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/my_model.py profiled on the CPU at batch 8 (few repeats: the times are not judged)."""
    folder = tmp_path_factory.mktemp("own")
    shutil.copy(ROOT / "examples" / "my_model.py", folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        out = ["--out", "my_model_b8.yaml", "--device", "cpu", "--warmup", "1", "--repeats", "2"]
        try:
            assert main([*PROFILE_ARGS, *out]) == 0
        finally:  # the module was loaded from this copy: another test may load another copy
            sys.modules.pop("my_model", None)
    return folder / "my_model_b8.yaml"


def config(folder: Path, profile: str = "my_model_b8.yaml", **workload: Any) -> Path:
    """1,024 GPUs (16 racks of 8 hosts of 8), ring and powersgd, two iterations of the profiled model."""
    data = {
        "name": "own_1024",
        "iterations": 2,
        "cluster": {
            "topology": "two_tier",
            **{"racks": 16, "hosts_per_rack": 8, "gpus_per_host": 8},
            **{"gpu": "H100", "nic_gbps": 400, "uplink_gbps": 1600},
        },
        "workload": {
            "model": "profiled",
            "profile": profile,
            "batch_size": 8,
            "bucket_mb": 0.04,
            "optimizer_ms": 0.5,
            **workload,
        },
        "policies": [{"name": "ring"}, {"name": "powersgd", "rank": 2}],
    }
    path = folder / "own_1024.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_profile_carries_the_modules_layers_with_their_shapes(measured: Path) -> None:
    raw = yaml.safe_load(measured.read_text())
    assert raw["version"] == 2 and raw["model"] == "my_model:build" and raw["batch_size"] == 8
    assert [row["name"] for row in raw["layers"]] == ["conv", "hidden", "head"]  # forward order
    assert {row["name"]: row["shapes"] for row in raw["layers"]} == SHAPES
    assert {row["name"]: row["params"] for row in raw["layers"]} == PARAMS
    assert raw["params"] == 17_546 == sum(PARAMS.values())
    assert raw["notes"]["input"] == ["float32:3x32x32"]
    assert {row["name"]: row["saved_bytes"] for row in raw["layers"]} == SAVED
    assert raw["saved_bytes"] == sum(SAVED.values()) == 633_220


def test_the_measured_activations_are_the_peak_memorys_with_the_largest_layers_once_more(measured: Path) -> None:
    memory = simulate(load_config(config(measured.parent, bucket_mb=25))).memory
    assert memory["activations_known"].tolist() == [True, True]
    # per sample: the layers' bytes over the profiled batch, plus the largest layer's again (backward's
    # gradient of what it saved, sim/compute/activations.py); memory.csv: that times the micro-batch of 8
    per_sample = (sum(SAVED.values()) + max(SAVED.values())) / 8
    assert memory["activations_bytes"].tolist() == pytest.approx([per_sample * 8] * 2, rel=1e-12)
    assert per_sample * 8 == 633_220 + 622_592
    # the same profile written before saved bytes were measured: its activations are not known
    raw = yaml.safe_load(measured.read_text())
    old = {key: value for key, value in raw.items() if key != "saved_bytes"}
    old["layers"] = [{k: v for k, v in row.items() if k != "saved_bytes"} for row in raw["layers"]]
    (measured.parent / "old.yaml").write_text(yaml.safe_dump(old))
    _, plan = prepare(load_config(config(measured.parent, "old.yaml")))
    assert plan.activation_bytes_per_sample is None  # memory.csv: activations_known false, 0 bytes


def test_a_profiled_model_on_1024_gpus_is_the_profile_by_hand(measured: Path) -> None:
    raw = yaml.safe_load(measured.read_text())
    cfg = load_config(config(measured.parent))
    cluster, plan = prepare(cfg)
    assert cluster.world_size == 1024
    assert plan.params == 17_546 and plan.parameter_bytes == 17_546 * 4 and plan.gradient_bytes == 17_546 * 4
    # backward from the head: head + hidden pass the 40 kB cap and close the first bucket; conv is the last
    assert [b.layers for b in plan.buckets] == [(2, 1), (0,)]
    assert [b.nbytes for b in plan.buckets] == [(650 + 16_448) * 4, 448 * 4]
    assert plan.bucket_shapes == (((10, 64), (10,), (64, 256), (64,)), ((16, 3, 3, 3), (16,)))
    rows = raw["layers"]
    assert [b.backward_s for b in plan.buckets] == [
        rows[2]["backward_s"] + rows[1]["backward_s"],
        rows[0]["backward_s"],
    ]
    measured_s = math.fsum(row["forward_s"] + row["backward_s"] for row in rows)
    # one bucket, which backward closes as it ends: no collective runs beside the compute and stretches it
    # (the NCCL model's overlap slowdown), so each iteration computes exactly what was measured
    result = simulate(load_config(config(measured.parent, bucket_mb=25)))
    assert result.summary["status"].tolist() == ["ok", "ok"]
    ring = result.iterations[result.iterations["policy"] == "ring"]
    assert len(ring) == 2 * 1024
    # forward and backward as profiled, then the optimizer step the workload adds after each iteration
    assert ring["compute_s"].tolist() == pytest.approx([measured_s + 0.5e-3] * len(ring), rel=1e-9)


def test_the_bytes_follow_the_workloads_precision(measured: Path) -> None:
    raw = yaml.safe_load(measured.read_text())
    (measured.parent / "bf16.yaml").write_text(yaml.safe_dump({**raw, "precision": "bf16"}))
    _, plan = prepare(load_config(config(measured.parent, "bf16.yaml", precision="bf16")))
    # 16-bit gradients on the wire, the fp32 master weights for parameter averaging
    assert plan.gradient_bytes == 17_546 * 2 and plan.parameter_bytes == 17_546 * 4


def test_a_profile_that_cannot_stand_for_the_workload_is_one_line_naming_the_field(measured: Path) -> None:
    folder = measured.parent
    with pytest.raises(ConfigError, match="profile: required when model is 'profiled'"):
        load_config(config(folder, profile=None))
    with pytest.raises(
        ConfigError, match=r"workload.profile: measured at batch_size 8; the workload's is 4 \(measure "
    ):
        prepare(load_config(config(folder, batch_size=4)))
    with pytest.raises(ConfigError) as error:
        prepare(load_config(config(folder, batch_size=4)))
    assert "`syncsim profile my_model:build --input float32:3x32x32 --batch 4`" in str(error.value)
    zoo = tuple(LayerTime(layer.name, 1e-4, 2e-4) for layer in get_model("resnet32").layers)
    write_profile(ComputeProfile("resnet32", 8, "fp32", zoo, "test"), folder / "zoo.yaml")
    with pytest.raises(ConfigError, match="a profile of the zoo model 'resnet32' records no layer shapes"):
        prepare(load_config(config(folder, "zoo.yaml")))
    with pytest.raises(
        ConfigError, match="own module 'my_model:build', which stands for the model: set workload.model: "
    ):
        prepare(load_config(config(folder, model="resnet32")))
    raw = yaml.safe_load(measured.read_text())
    raw["layers"][0]["params"] = 449
    (folder / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"layers\[0\].params: expected 448, the values its shapes hold; got 449"):
        prepare(load_config(config(folder, "bad.yaml")))
    raw["layers"][0].update(params=0, shapes=[[16, 0]])
    (folder / "bad.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"layers\[0\].shapes: expected a list of tensor shapes"):
        prepare(load_config(config(folder, "bad.yaml")))
    (folder / "bad.yaml").write_text(yaml.safe_dump({**raw, "layers": []}))
    with pytest.raises(ConfigError, match="layers: none; a version 2 profile lists the module's layers"):
        prepare(load_config(config(folder, "bad.yaml")))


def test_the_profile_command_refuses_flags_that_do_not_fit_the_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = ["--batch", "2", "--out", "p.yaml"]
    assert main(["profile", "resnet32", "--input", "float32:3x32x32", *out]) == 2
    assert "--input: only for your own module" in capsys.readouterr().err
    assert main(["profile", "resnet32", "--classes", "10", *out]) == 2
    assert "--classes: only for your own module" in capsys.readouterr().err
    assert main(["profile", "my_model:build", *out]) == 2
    assert "--input: required for my_model:build" in capsys.readouterr().err
    assert main(["profile", "my_model:build", "--input", "float32:3", *out]) == 2  # no my_model.py here
    assert "my_model:build: no file my_model.py in" in capsys.readouterr().err
    for bad in (["os:build", "--input", "float32:3"], ["my_model:build", "--input", "float32:3x"]):
        with pytest.raises(SystemExit) as stop:  # refused while the command line is parsed
            main(["profile", *bad, *out])
        assert stop.value.code == 2
    assert not (tmp_path / "p.yaml").exists()


def test_the_real_backend_says_it_cannot_train_a_profiled_module(
    measured: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from real.timing_run import with_timing_numerics

    with pytest.raises(ConfigError, match="^numerics: the real backend trains a zoo model or a numerics: section's"):
        with_timing_numerics(load_config(config(measured.parent)))
    assert main(["calibrate", str(config(measured.parent)), "--out", str(measured.parent / "cal.yaml")]) == 2
    assert "workload.model: calibration profiles the workload's zoo model on every rank" in capsys.readouterr().err
