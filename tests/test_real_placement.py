"""Where a real rank's tensors live (real/backends.py, real/placement.py), and the refusal of NCCL on
a machine without CUDA. The CUDA side is in tests/test_real_gpu.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from real.backends import training_device  # noqa: E402
from real.placement import host_copy, on_host, optimizer_on, task_on  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.numerics.optim import FlatOptimizer  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without CUDA")


@no_cuda
def test_a_rank_trains_on_the_cpu_without_cuda() -> None:
    assert training_device(0) == training_device(5) == torch.device("cpu")
    task = Task(NumericsConfig(model="mlp", hidden=[8]), seed=0)
    assert task_on(task, torch.device("cpu")) is task  # nothing copied where nothing moves
    optimizer = FlatOptimizer(NumericsConfig(model="mlp").optimizer.model_copy(update={"momentum": 0.9}), 1, 10)
    assert optimizer_on(optimizer, torch.device("cpu")).buffer.device.type == "cpu"


def test_host_copies_are_copies_on_the_host() -> None:
    x = torch.arange(4.0)
    copied, same = host_copy(x), on_host(x)
    x += 1
    assert torch.equal(copied, torch.arange(4.0)) and same is not copied and torch.equal(same, x)


def test_a_task_on_the_meta_device_moves_data_module_and_initial_only() -> None:
    """`task_on` on a device other than the CPU (the meta device stands in for a GPU here): the copy's
    tensors moved, the host task untouched for rank 0's evaluation."""
    task = Task(NumericsConfig(model="cnn", dataset="digits"), seed=0)
    placed = task_on(task, torch.device("meta"))
    assert placed is not task and placed.size == task.size and placed.tensor_sizes == task.tensor_sizes
    assert {placed.initial.device.type, placed.data.x_train.device.type, placed.data.y_test.device.type} == {"meta"}
    assert all(p.device.type == "meta" for p in placed.module.parameters())
    assert task.initial.device.type == task.data.x_train.device.type == "cpu"
    assert all(p.device.type == "cpu" for p in task.module.parameters())


@no_cuda
def test_nccl_without_cuda_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from real.__main__ import run
    from sim.cli import main

    config = {
        "name": "nccl",
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2},
        "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 5},
        "numerics": {"dataset": "digits", "model": "logreg", "global_batch": 8},
        "policies": [{"name": "ring"}],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["real", str(path), "--backend", "nccl", "--out", str(tmp_path / "out")]) == 2
    lines = [line.strip() for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert lines[-1] == "backend: 'nccl' needs a CUDA device and this machine has none; allowed here: auto, gloo"
    assert not (tmp_path / "out" / "summary.csv").exists()
    # one process, as torchrun starts it
    assert run([str(path), "--out", str(tmp_path / "rank"), "--backend", "nccl"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("backend: 'nccl' needs a CUDA device and this machine has none; allowed here: auto, gloo")
