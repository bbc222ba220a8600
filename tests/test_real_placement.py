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


class _Joined(Exception):
    """`init_process_group` reached: the rank's device and task are chosen by then."""


@pytest.mark.parametrize(("rank", "expected"), [(1, torch.device("cuda", 1)), (4, torch.device("cpu"))])
def test_only_workers_take_a_gpu_and_a_shard_keeps_its_task_on_the_host(
    monkeypatch: pytest.MonkeyPatch, rank: int, expected: torch.device
) -> None:
    """On a machine with two GPUs (torch.cuda patched), `ps` on 4 workers: worker 1 trains a copy of the
    task on cuda:1; shard 0 (rank 4, whose LOCAL_RANK would pick cuda:0, worker 0's GPU) keeps the host
    task, and never makes a GPU current (that creates a CUDA context)."""
    from real import session
    from sim.config import parse_config

    current: list = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    placed: list = []

    def task_on(task, device):  # type: ignore[no-untyped-def]
        placed.append(device)
        return "a device copy" if device.type == "cuda" else task

    chosen: dict = {}

    def precision_task(task, precision, device):  # type: ignore[no-untyped-def]
        chosen.update(task=task, device=device)

    def init_process_group(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise _Joined

    monkeypatch.setattr(session, "task_on", task_on)
    monkeypatch.setattr(session, "PrecisionTask", precision_task)
    monkeypatch.setattr(session.dist, "init_process_group", init_process_group)
    for name, value in {"RANK": rank, "WORLD_SIZE": 6, "LOCAL_RANK": rank}.items():
        monkeypatch.setenv(name, str(value))
    config = parse_config(
        {
            "iterations": 2,
            "cluster": {"topology": "star", "hosts": 4},
            "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 5},
            "numerics": {"dataset": "digits", "model": "logreg", "global_batch": 8},
            "policies": [{"name": "ps", "shards": 2}],
        }
    )
    with pytest.raises(_Joined):
        session.main(config, Path("unused"), 5.0)
    assert chosen["device"] == expected and placed == [expected]
    if expected.type == "cpu":
        assert current == [] and chosen["task"].initial.device.type == "cpu"  # the host task itself
    else:
        assert current == [expected] and chosen["task"] == "a device copy"
