"""Small builders shared by the tests: configs for one synthetic all-reduce-sized workload."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

GBPS = 1e9 / 8  # bytes/s per Gbit/s
US = 1e-6


def synthetic(
    cluster: dict[str, Any],
    policies: list[dict[str, Any]],
    gradient_mb: float = 100.0,
    *,
    compute_ms: float = 0.0,
    iterations: int = 1,
    model: str = "pipelined",
    bucket_mb: float | None = None,
    jitter: float = 0.0,
    seed: int = 0,
    layers: int = 1,
) -> dict[str, Any]:
    """A config whose iteration is one gradient exchange of `gradient_mb` (one bucket by default), on the
    ideal network (closed-form alpha-beta costs)."""
    return {
        "name": "test",
        "seed": seed,
        "iterations": iterations,
        "cluster": cluster,
        "workload": {
            "model": "synthetic",
            "gradient_mb": gradient_mb,
            "compute_ms": compute_ms,
            "bucket_mb": bucket_mb if bucket_mb is not None else 2 * gradient_mb,
            "compute_jitter": jitter,
            "synthetic_layers": layers,
        },
        "policies": policies,
        "simulation": {"collective_model": model, "network_model": "ideal", "trace": False},
    }


def star(hosts: int, nic_gbps: float = 25.0, **extra: Any) -> dict[str, Any]:
    return {"topology": "star", "hosts": hosts, "nic_gbps": nic_gbps, "link_latency_us": 5.0, **extra}


def two_tier(
    racks: int, hosts_per_rack: int, uplink_gbps: float, nic_gbps: float = 25.0, **extra: Any
) -> dict[str, Any]:
    return {
        "topology": "two_tier",
        "racks": racks,
        "hosts_per_rack": hosts_per_rack,
        "nic_gbps": nic_gbps,
        "uplink_gbps": uplink_gbps,
        "link_latency_us": 5.0,
        **extra,
    }


@contextlib.contextmanager
def bounded(seconds: int, what: str = "no answer") -> Iterator[None]:
    """Fail instead of hanging: raise TimeoutError if the block runs past `seconds` (a hang never
    ends, so any finite bound separates it from an answer)."""

    def stop(signum: int, frame: object) -> None:
        raise TimeoutError(f"{what} within {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def free_port() -> int:
    """A TCP port free on the loopback interface now (a process group's rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn_ranks(worker: Any, world: int, out: Any) -> list[Any]:
    """Run `worker(rank, init_method, out)` on `world` processes (torch.multiprocessing), each saving what it
    found to `out/rank<r>.pt`, and load those."""
    import torch
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(f"tcp://127.0.0.1:{free_port()}", str(out)), nprocs=world)
    return [torch.load(out / f"rank{r}.pt") for r in range(world)]
