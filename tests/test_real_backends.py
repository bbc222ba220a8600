"""The backend and GPU choice of real/backends.py on a machine with GPUs, and the environment
real/launch.py gives ranks on emulated hosts: `torch.cuda` is patched, so they run on the CPU and
no process is started (`subprocess.Popen` is replaced by a recorder)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest

torch = pytest.importorskip("torch")

from real import launch as launching  # noqa: E402
from real.backends import backend_for, training_device  # noqa: E402
from sim.errors import ConfigError  # noqa: E402

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "real_2x2_digits.yaml"  # 4 workers + 2 ps shards


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make this machine look as if it had `n` GPUs: gpus(n)."""

    def have(n: int) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", lambda device: None)

    return have


class _Recorder:
    """Stands in for subprocess.Popen: records each command and environment; exits 0 at once."""

    started: list[tuple[list[str], dict[str, str]]] = []

    def __init__(self, cmd: list[str], env: Optional[dict[str, str]] = None) -> None:
        _Recorder.started.append((list(cmd), dict(env or {})))

    def poll(self) -> int:
        return 0


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    _Recorder.started = []
    monkeypatch.setattr(launching.subprocess, "Popen", _Recorder)
    return _Recorder.started


def _backend_arg(cmd: list[str]) -> str:
    return cmd[cmd.index("--backend") + 1]


def test_auto_picks_gloo_when_the_workers_would_share_gpus(
    gpus: Any, started: list, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gpus(2)  # 4 workers on one machine with 2 GPUs: NCCL would fail at the first collective
    assert launching.launch(CONFIG, tmp_path, backend="auto").ok
    assert len(started) == 6 and {_backend_arg(cmd) for cmd, _ in started} == {"gloo"}
    assert "auto chose gloo, not NCCL: 4 workers on one node would share its 2 GPUs" in capsys.readouterr().err
    started.clear()
    gpus(4)  # a GPU per worker: the shards need none of their own
    assert launching.launch(CONFIG, tmp_path, backend="auto").ok
    assert {_backend_arg(cmd) for cmd, _ in started} == {"nccl"}


def test_nccl_with_workers_sharing_a_gpu_is_refused_before_any_process_starts(
    gpus: Any, started: list, tmp_path: Path
) -> None:
    gpus(2)
    with pytest.raises(ConfigError, match=r"^backend: 'nccl' needs a GPU per worker: 4 workers on one node .* 2 GPUs"):
        launching.launch(CONFIG, tmp_path, backend="nccl")
    assert started == []


def test_the_launch_checks_the_node_size_its_processes_will_see(gpus: Any, started: list, tmp_path: Path) -> None:
    """An `env_for` that makes each rank a node of its own (LOCAL_WORLD_SIZE=1, as the GPU tests'
    `nodes_of_one` does) passes the up-front check the processes themselves then make."""
    gpus(1)
    alone = {"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
    assert launching.launch(CONFIG, tmp_path, backend="nccl", env_for=lambda rank: alone).ok
    assert {_backend_arg(cmd) for cmd, _ in started} == {"nccl"}
    assert all(env["LOCAL_WORLD_SIZE"] == "1" for _, env in started)


def test_under_torchrun_a_node_with_more_workers_than_gpus_refuses_nccl(
    gpus: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """torchrun --nnodes 2 --nproc-per-node 3: ranks 0-2 (workers) on the first node, worker 3 and
    the two shards on the second. Every rank, on either node, refuses NCCL with 2 GPUs a node."""
    from real.session import main
    from sim.config import load_config

    gpus(2)

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("init_process_group reached: the backend was not refused up front")

    monkeypatch.setattr(torch.distributed, "init_process_group", never)
    config = load_config(CONFIG)
    for rank in (0, 3, 5):
        env = {"RANK": str(rank), "WORLD_SIZE": "6", "LOCAL_RANK": str(rank % 3), "LOCAL_WORLD_SIZE": "3"}
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        with pytest.raises(ConfigError, match=r"^backend: 'nccl' needs a GPU per worker: 3 workers on one node"):
            main(config, tmp_path, 5.0, "nccl")
    from real.backends import workers_per_node

    assert backend_for("auto", node_workers=workers_per_node(4, env)) == "gloo"  # auto: gloo on every rank


def test_workers_get_distinct_gpus_when_shards_are_present(gpus: Any, started: list, tmp_path: Path) -> None:
    """The rule counts workers, not processes: 4 workers + 2 shards fit 4 GPUs under NCCL, and each
    worker gets its own, in `syncsim real`'s layout and in torchrun's blocks."""
    from real.backends import workers_per_node

    gpus(4)
    assert launching.launch(CONFIG, tmp_path, backend="nccl").ok
    envs = [env for _, env in started]
    assert [env["LOCAL_WORLD_SIZE"] for env in envs] == ["6"] * 6
    assert [workers_per_node(4, env) for env in envs] == [4] * 6
    assert [training_device(int(env["LOCAL_RANK"])) for env in envs[:4]] == [torch.device("cuda", i) for i in range(4)]
    # torchrun --nnodes 2 --nproc-per-node 3 with 3 GPUs a node: workers 0-2 on the first, worker 3 on the second
    blocks = [{"RANK": str(r), "LOCAL_RANK": str(r % 3), "LOCAL_WORLD_SIZE": "3"} for r in range(6)]
    gpus(3)
    assert {backend_for("nccl", node_workers=workers_per_node(4, env)) for env in blocks} == {"nccl"}
    first_node = [training_device(int(env["LOCAL_RANK"])) for env in blocks[:3]]
    assert first_node == [torch.device("cuda", i) for i in range(3)]
    assert training_device(int(blocks[3]["LOCAL_RANK"])) == torch.device("cuda", 0)  # the second node's first GPU


def test_workers_per_node_without_a_local_world_size_counts_every_rank_as_local() -> None:
    from real.backends import workers_per_node

    assert workers_per_node(4, {"WORLD_SIZE": "6"}) == 4
    assert workers_per_node(4, {"WORLD_SIZE": "6", "LOCAL_WORLD_SIZE": "2"}) == 2
    assert workers_per_node(4, {}) == 4


class _Emulation:
    """Stands in for a running `syncsim emulate up` (real.emulate.Emulation)."""

    def namespace(self, host: str) -> str:
        return f"ssim-demo-{host}"

    def interface(self, host: str) -> str:
        return "eth0"

    def address(self, host: str) -> str:
        return {"h0": "10.213.0.1", "h1": "10.213.0.2"}.get(host, "10.213.0.9")

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host)]


def test_emulated_hosts_are_separate_nccl_hosts_on_their_shaped_interfaces(
    monkeypatch: pytest.MonkeyPatch, started: list, tmp_path: Path
) -> None:
    import real.emulate

    monkeypatch.setattr(real.emulate.Emulation, "load", staticmethod(lambda tag: _Emulation()))
    assert launching.launch(CONFIG, tmp_path, backend="gloo", emulation="demo").ok
    hosts = [cmd[3] for cmd, _ in started[:4]]  # the workers' namespaces: 2 hosts x 2 GPUs
    assert hosts == ["ssim-demo-h0", "ssim-demo-h0", "ssim-demo-h1", "ssim-demo-h1"]
    envs = [env for _, env in started]
    ids = [env["NCCL_HOSTID"] for env in envs[:4]]
    assert ids[0] == ids[1] != ids[2] == ids[3]  # one id per emulated host, so NCCL sees two nodes
    for env in envs:
        assert env["NCCL_SOCKET_IFNAME"] == "=eth0" and env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert env["NCCL_NET"] == "Socket" and env["NCCL_IB_DISABLE"] == "1" and env["NCCL_MNNVL_ENABLE"] == "0"
