"""`syncsim real CONFIG --nproc N`: start one process per worker plus the server shards, watch them.

Each process runs `python -m real` with RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/MASTER_ADDR/
MASTER_PORT set, what `torchrun` gives it on a multi-node cluster; every rank is on this machine
(LOCAL_RANK = RANK). The backend is chosen once, here, before any process starts
(real/backends.py: `auto` falls back to gloo, and `nccl` is refused, when the workers outnumber this
machine's GPUs), and passed to every process by name. A `prefix` per rank (e.g. `ip netns exec
<host>`) and extra environment place ranks on emulated hosts (`on_emulation`: gloo and NCCL on the
host's shaped interface, NCCL told that each emulated host is a host of its own). When a process dies or freezes
(a worker or a parameter-server shard), the others notice through their own timeouts and exit
naming it; anything still running `timeout_s` + 5 s after the first failure is killed, so nothing
hangs. The bound after a fault: survivors give up within `timeout_s` (at once for a dead peer,
whose connections close) and name the culprit within 4 s more (its heartbeat going stale); rank 0
merges their rows within min(`timeout_s`, 10) s; what still runs `timeout_s` + 5 s after the first
of them exited is killed. So a run ends within about 2 x `timeout_s` + 10 s of a fault (with
`timeout_s` 5: 4 s after a shard died, 15 s after one froze, tests/test_real_faults.py).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from real.backends import backend_for, workers_per_node
from real.layout import placement
from real.liveness import named
from real.session import PEER_FAILED
from sim.config import load_config
from sim.errors import ConfigError

# set in the processes `launch` starts: their parent prints the summary, so rank 0 does not (under
# torchrun, where nobody else would, it does: real/__main__.py)
LAUNCHED_ENV = "SYNCSIM_REAL_LAUNCHED"

Prefix = Callable[[int], Sequence[str]]
Env = Callable[[int], dict[str, str]]


@dataclass
class Outcome:
    codes: dict[int, Optional[int]] = field(default_factory=dict)  # rank -> exit code (None: killed by us)
    roles: Mapping[int, str] = field(default_factory=dict)  # rank -> "worker", "parameter-server shard 0"

    @property
    def ok(self) -> bool:
        return all(code == 0 for code in self.codes.values())

    @property
    def failed(self) -> Optional[str]:
        """What went wrong, naming the rank that caused it and its role: one that died or exited on
        its own, else one that never stopped (frozen: killed by the launcher), else the first that
        gave up."""
        if self.ok:
            return None
        codes, name = self.codes, self._name
        culprits = [f"{name(r)} {_describe(c)}" for r, c in codes.items() if c not in (0, PEER_FAILED, None)]
        culprits += [f"{name(r)} stopped responding (killed after the timeout)" for r, c in codes.items() if c is None]
        if not culprits:
            culprits = [f"{name(r)} gave up waiting for its peers" for r, c in codes.items() if c]
        return "; ".join(culprits)

    def _name(self, rank: int) -> str:
        return named(rank, self.roles)


def on_emulation(tag: str, hosts: Sequence[str]) -> tuple[Prefix, Env, str]:
    """Place rank r in the namespace of emulated host `hosts[r]`; gloo and NCCL talk over its shaped
    interface (`emulated_host_env`)."""
    from real.emulate import Emulation

    emu = Emulation.load(tag)

    def prefix(rank: int) -> Sequence[str]:
        return emu.exec_prefix(hosts[rank])

    def env(rank: int) -> dict[str, str]:
        return emulated_host_env(emu.namespace(hosts[rank]), emu.interface(hosts[rank]))

    return prefix, env, emu.address(hosts[0])


def emulated_host_env(host_id: str, interface: str) -> dict[str, str]:
    """The environment of a rank on an emulated host: `host_id` names the host (the same for its
    ranks, distinct between hosts), `interface` is its shaped NIC.

    A network namespace keeps the machine's hostname and boot id, from which NCCL derives its host
    hash (NCCL_HOSTID overrides it: NCCL's src/misc/utils.cc, getHostHash). With one hash NCCL takes
    every rank for one node and joins them by NVLink/PCIe (P2P) or shared memory, never touching the
    shaped links. Distinct ids make each emulated host a node: NCCL's P2P and SHM transports only
    connect ranks of one host hash, so traffic between hosts goes over its network transport, while
    the GPUs of one emulated host still use P2P/SHM, as a real host's would. Environment variables
    as documented at https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html:
    NCCL_SOCKET_IFNAME (`=eth0`: exactly that interface), NCCL_NET=Socket and NCCL_IB_DISABLE=1 (IP
    sockets through the namespace, never an RDMA NIC, which the emulation does not shape),
    NCCL_MNNVL_ENABLE=0 (no multi-node NVLink between hosts that share one NVLink fabric), and
    NCCL_COLLNET_ENABLE=0 (no in-network reduction; off by default, kept off)."""
    return {
        "GLOO_SOCKET_IFNAME": interface,
        "NCCL_SOCKET_IFNAME": f"={interface}",
        "NCCL_HOSTID": host_id,
        "NCCL_NET": "Socket",
        "NCCL_IB_DISABLE": "1",
        "NCCL_MNNVL_ENABLE": "0",
        "NCCL_COLLNET_ENABLE": "0",
    }


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def launch(
    config_path: Path,
    out: Path,
    nproc: Optional[int] = None,
    timeout_s: float = 60.0,
    backend: str = "auto",
    prefix: Optional[Prefix] = None,
    env_for: Optional[Env] = None,
    master_addr: str = "127.0.0.1",
    port: Optional[int] = None,
    emulation: Optional[str] = None,
    calibrate: bool = False,
    overrides: Sequence[str] = (),
) -> Outcome:
    """Start every process of a real run of `config_path` and wait for them (`emulation`: the tag of
    a running `syncsim emulate up`, whose namespaces the ranks run in; `calibrate`: measure the
    cluster with one process per GPU and write the calibrated config to `out`; `overrides`:
    `KEY=VALUE` settings every process applies to the config, as `--set` does)."""
    config = load_config(config_path, overrides)
    need = placement(config)
    if calibrate:
        need = replace(need, hosts=need.hosts[: need.workers])
    if emulation is not None:
        prefix, env_for, master_addr = on_emulation(emulation, need.hosts)
        port = port or 29500 + zlib.crc32(emulation.encode()) % 1000  # no probing from the root namespace
    # every worker is on this machine unless `env_for` says otherwise (LOCAL_WORLD_SIZE): the count
    # each process will check, checked once here for a clear error, not one per process
    seen = {"LOCAL_WORLD_SIZE": str(need.world), **(env_for(0) if env_for is not None else {})}
    backend = backend_for(backend, calibrate, node_workers=workers_per_node(need.workers, seen), note=True)
    if nproc is not None and nproc != need.workers:
        raise ConfigError(
            f"--nproc: the config's cluster has {need.workers} GPUs (one worker process each), got {nproc}"
        )
    port = port or free_port(master_addr)
    procs: dict[int, subprocess.Popen] = {}
    for rank in range(need.world):
        env = dict(os.environ)
        env.update(RANK=str(rank), WORLD_SIZE=str(need.world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(need.world))
        env.update(MASTER_ADDR=master_addr, MASTER_PORT=str(port), **{LAUNCHED_ENV: "1"})
        if env_for is not None:
            env.update(env_for(rank))
        cmd = [*(prefix(rank) if prefix else ()), sys.executable, "-m", "real", str(config_path), "--out", str(out)]
        cmd += ["--timeout", str(timeout_s), "--backend", backend] + (["--calibrate"] if calibrate else [])
        cmd += [arg for override in overrides for arg in ("--set", override)]
        procs[rank] = subprocess.Popen(cmd, env=env)
    return watch(procs, timeout_s, need.roles())


def watch(procs: dict[int, subprocess.Popen], timeout_s: float, roles: Optional[Mapping[int, str]] = None) -> Outcome:
    """Wait for every process; after the first failure give the rest `timeout_s` + 5 s to stop (their
    own timeouts, naming the culprit, rank 0 writing the tables), then kill them."""
    outcome = Outcome(roles=dict(roles or {}))
    deadline: Optional[float] = None
    try:
        while len(outcome.codes) < len(procs):
            for rank, proc in procs.items():
                if rank in outcome.codes:
                    continue
                code = proc.poll()
                if code is None:
                    continue
                outcome.codes[rank] = code
                if code != 0 and deadline is None:
                    deadline = time.monotonic() + timeout_s + 5.0
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        for rank, proc in procs.items():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
                outcome.codes[rank] = None
    return outcome


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"
