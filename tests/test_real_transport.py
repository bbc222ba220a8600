"""real/transport.py: point-to-point messages staged through host buffers, run on gloo on the CPU
with staging forced (the path CUDA tensors take under gloo), and the rule that every message of
real/ goes through it."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from real import protocol as wire  # noqa: E402
from real import transport  # noqa: E402
from real.collectives import RingReduceScatter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _payloads() -> dict[str, Any]:
    """Bit patterns a copy could disturb: NaN payloads, -0, infinities, subnormals; other dtypes."""
    g = torch.Generator().manual_seed(7)
    floats = torch.randn(1000, generator=g)
    floats[:4] = torch.tensor([float("nan"), -0.0, float("inf"), 1e-45])
    return {
        "float32": floats,
        "int64": torch.randint(-(2**62), 2**62, (33,), generator=g),
        "bfloat16": torch.randn(17, generator=g).to(torch.bfloat16),
        "empty": torch.empty(0),
    }


def _worker(rank: int, init: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    try:
        transport.FORCE_STAGING = True
        peer = 1 - rank
        result: dict[str, Any] = {"staged": transport.staged(torch.zeros(1))}
        sent = _payloads()
        if rank == 0:  # tags sent in one order, received in the other: staging keeps gloo's tag matching
            works = [transport.isend(t, peer, tag=10 + i) for i, t in enumerate(sent.values())]
            for work in works:
                work.wait()
            transport.send(torch.arange(5.0), peer, tag=99)
        else:
            into = {k: torch.empty_like(t) for k, t in sent.items()}
            works = [transport.irecv(into[k], peer, tag=10 + i) for i, k in reversed(list(enumerate(into)))]
            for work in works:
                assert work.wait()
            blocking = torch.empty(5)
            transport.recv(blocking, peer, tag=99)
            result["received"] = into
            result["blocking"] = blocking
        # a ring step both ways, then the ring reduce-scatter the hooks and `syncsim real` use
        mine = torch.full((6,), float(rank + 1))
        theirs = torch.empty(6)
        for work in transport.exchange(mine, peer, theirs, peer):
            work.wait()
        result["exchanged"] = theirs
        data = torch.arange(10.0) * (rank + 1)
        ring = RingReduceScatter(data, [(0, 5), (5, 10)], (0, 1), rank, None)
        ring.wait()
        result["scattered"] = ring.result
        # a protocol frame, as a worker pushes to a shard
        if rank == 0:
            wire.send(wire.frame(wire.Kind.PUSH, 3, 0, 4, payload=torch.tensor([1.5, -2.0, 0.25, 8.0])), peer).wait()
        else:
            buffer = torch.zeros(wire.HEADER_FLOATS + 8)
            wire.post(buffer, peer).wait()
            result["frame"] = (wire.header_of(buffer), wire.payload_of(buffer, 0, 4))
        transport.FORCE_STAGING = False
        result["unforced"] = transport.staged(torch.zeros(1))
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_staged_messages_arrive_bit_for_bit(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(f"tcp://127.0.0.1:{port}", str(tmp_path)), nprocs=2)
    first, second = (torch.load(tmp_path / f"rank{r}.pt") for r in range(2))
    assert first["staged"] and second["staged"] and not first["unforced"]  # CPU tensors go direct unless forced
    for name, sent in _payloads().items():
        got = second["received"][name]
        assert got.shape == sent.shape and got.dtype == sent.dtype, name
        assert _bytes(got) == _bytes(sent), name
    assert torch.equal(second["blocking"], torch.arange(5.0))
    assert torch.equal(first["exchanged"], torch.full((6,), 2.0))
    assert torch.equal(second["exchanged"], torch.full((6,), 1.0))
    total = torch.arange(10.0) * 3  # rank 0's data plus rank 1's
    assert torch.equal(first["scattered"], total[:5]) and torch.equal(second["scattered"], total[5:])
    header, payload = second["frame"]
    assert header == (int(wire.Kind.PUSH), 3, 0, 4, 0)
    assert torch.equal(payload, torch.tensor([1.5, -2.0, 0.25, 8.0]))


def _bytes(t: torch.Tensor) -> bytes:
    return t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()


def test_only_the_transport_calls_point_to_point() -> None:
    """Every message of training goes through real/transport.py, so staging applies to all of them
    (calibration's own measurements, real/calibrate/, are outside this rule)."""
    call = re.compile(r"\bdist\.(i?send|i?recv|batch_isend_irecv)\(")
    offenders = [
        path.name
        for path in (ROOT / "real").glob("*.py")
        if path.name != "transport.py" and call.search(path.read_text())
    ]
    assert offenders == []


@pytest.mark.slow
def test_a_parameter_server_run_with_every_message_staged_ends_as_numerics_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hierarchical (ring reduce-scatter steps) and ps (frames, replies, claims) on 2 workers and a
    shard with staging forced in every process: the same parameters as numerics mode."""
    from real.launch import launch
    from sim.api import simulate

    config = {
        "name": "staged",
        "seed": 2,
        "iterations": 6,
        "cluster": {"topology": "star", "hosts": 1, "gpus_per_host": 2},
        "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 5, "synthetic_layers": 2},
        "numerics": {"dataset": "digits", "model": "mlp", "hidden": [16], "global_batch": 32, "eval_every": 3},
        "policies": [{"name": "hierarchical"}, {"name": "ps"}],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("SYNCSIM_STAGE_P2P", "1")
    outcome = launch(path, tmp_path / "out", nproc=2, timeout_s=60)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    for run in simulate(path).runs:
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-4, atol=1e-6)
