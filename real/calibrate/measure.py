"""Measurements on a live cluster: call every function on every rank of an initialised default
process group (gloo or NCCL), in the same order, with the same arguments.

Each function returns its rows on rank 0 and None on the other ranks; the rows from all ranks are
gathered with `gather_object` (with NCCL, set the rank's CUDA device first). Every tensor a
collective or send/receive touches lives on `device` (under NCCL: the rank's GPU; NCCL takes no
CPU tensors and no send/receive tags). Only one representative rank per host (its lowest) takes
part in host-to-host measurements, because the network is per host; the other ranks follow the
same schedule of barriers, so every rank can run the same code.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional, TypeVar, Union

import torch
import torch.distributed as dist

from real.calibrate.rows import CollectiveSample, ComputeSample, PairSample, UplinkSample, rack_members
from real.placement import task_on
from real.precision import PrecisionTask, configure_tf32
from real.precision import check as check_precision
from real.profiler import on_device
from sim.config.calibration import STATISTICS, Statistic

Device = Union[torch.device, str]
T = TypeVar("T")
ACK_BYTES = 4
COLLECTIVE_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def representatives(rank_hosts: Sequence[str]) -> dict[str, int]:
    """Each host's lowest rank, hosts in order of first appearance."""
    reps: dict[str, int] = {}
    for rank, host in enumerate(rank_hosts):
        reps.setdefault(host, rank)
    return reps


def p2p(
    rank_hosts: Sequence[str],
    sizes: Sequence[int],
    repeats: int,
    *,
    device: Device = "cpu",
    statistic: Statistic = "median",
    pairs: Optional[Sequence[tuple[str, str]]] = None,
) -> Optional[list[PairSample]]:
    """Ping-pong between every ordered pair of hosts (or only `pairs`), one pair at a time (every
    rank waits at a barrier after each pair, so measurements never contend): the source sends
    `nbytes`, the destination sends `nbytes` back, and half the round trip (`statistic` over
    repeats) is `seconds`."""
    rank, _ = _check_world(rank_hosts, "rank_hosts")
    _check_sizes(sizes, "sizes")
    _check_repeats(repeats, statistic)
    reps = representatives(rank_hosts)
    if pairs is None:
        pairs = [(src, dst) for src in reps for dst in reps if src != dst]
    unknown = sorted({h for pair in pairs for h in pair} - set(reps))
    if unknown:
        raise ValueError(f"pairs: hosts {unknown} run no rank")
    buf = torch.empty(max(sizes), dtype=torch.uint8, device=device)
    rows: list[PairSample] = []
    for src, dst in pairs:
        a, b = reps[src], reps[dst]
        for n in sizes:
            if rank == a:
                rtt = _ping(buf[:n], b, repeats, device, statistic)
                rows.append(PairSample(src, dst, int(n), rtt / 2, rtt))
            elif rank == b:
                _pong(buf[:n], a, repeats)
        dist.barrier()
    return _gather(rows)


def uplink(
    rank_hosts: Sequence[str],
    host_racks: Mapping[str, str],
    nbytes: int,
    repeats: int,
    *,
    device: Device = "cpu",
    statistic: Statistic = "median",
) -> Optional[list[UplinkSample]]:
    """Per rack, all its hosts send `nbytes` at once, each to a host in another rack (a fixed
    matching that deals the racks round-robin and reuses a receiver only when it must); the
    aggregate out of the rack exposes an oversubscribed uplink that one pair alone would not fill.
    With one rack there is nothing to measure: []."""
    rank, _ = _check_world(rank_hosts, "rank_hosts")
    _check_sizes([nbytes], "nbytes")
    _check_repeats(repeats, statistic)
    reps = representatives(rank_hosts)
    racks = rack_members(list(reps), host_racks)
    buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
    ack = torch.empty(ACK_BYTES, dtype=torch.uint8, device=device)
    rows: list[UplinkSample] = []
    for rack, members in racks.items():
        matching = egress_matching(racks, rack)
        if not matching:
            continue
        send_to = {reps[h]: reps[d] for h, d in matching.items()}
        recv_from: dict[int, list[int]] = {}
        for s, d in send_to.items():
            recv_from.setdefault(d, []).append(s)
        elapsed: list[float] = []
        for i in range(repeats + 1):  # the first round warms the connections up
            dist.barrier()
            t0 = time.perf_counter()
            if rank in send_to:
                dist.send(buf, send_to[rank])
                dist.recv(ack, send_to[rank])
            for s in recv_from.get(rank, []):  # a reused receiver serves its senders in turn
                dist.recv(buf, s)
                dist.send(ack, s)
            _sync(device)
            mine = time.perf_counter() - t0 if rank in send_to else 0.0
            slowest = _max_over_ranks(mine, device)
            if i:
                elapsed.append(slowest)
        rows.append(
            UplinkSample(rack, len(members), len(set(matching.values())), int(nbytes), summarise(elapsed, statistic))
        )
    return rows if rank == 0 else None


def collective_curve(
    sizes: Sequence[int],
    repeats: int,
    *,
    ops: Sequence[str] = ("all_reduce",),
    device: Device = "cpu",
    statistic: Statistic = "median",
) -> Optional[list[CollectiveSample]]:
    """Time float32 collectives over the world group; each size is rounded up to a multiple of
    4·world bytes. After a barrier and one untimed op (which lines the ranks up, so barrier skew
    does not count), `repeats` ops run back to back, each timed on every rank; an op's time is the
    slowest rank's."""
    _check_sizes(sizes, "sizes")
    _check_repeats(repeats, statistic)
    unknown = [op for op in ops if op not in COLLECTIVE_OPS]
    if unknown:
        raise ValueError(f"ops: unknown {unknown}; allowed: {', '.join(COLLECTIVE_OPS)}")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows: list[CollectiveSample] = []
    for op in ops:
        for n in sizes:
            numel = world * math.ceil(n / (4 * world))
            run = _collective(op, numel, world, device)
            dist.barrier()
            run()
            _sync(device)
            mine = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                run()
                _sync(device)
                mine.append(time.perf_counter() - t0)
            slowest = torch.tensor(mine, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append(CollectiveSample(op, world, 4 * numel, summarise(slowest.tolist(), statistic)))
    return rows if rank == 0 else None


def compute(
    task: Any,
    batch: int,
    repeats: int,
    *,
    device: Device = "cpu",
    compute_device: Optional[Device] = None,
    statistic: Statistic = "median",
    precision: str = "fp32",
) -> Optional[list[ComputeSample]]:
    """Seconds of compute per iteration as synchronous training sees it, one row per rank gathered
    to rank 0 (without a process group: this process alone, one row).

    With a process group the ranks rehearse in lockstep: forward+backward of the numerics model on
    the first `batch` training samples, then a one-element all-reduce, `repeats` times; a second
    loop times the all-reduce alone, and a step's compute is the difference of the two `statistic`s.
    Every rank thus reports the time until the *slowest* rank is done, which is what holds up the
    next collective: on a machine whose ranks share cores (or are descheduled), that is far from one
    rank's own compute time (8 ranks on 2 cores here: each rank alone 1.5-8 ms, lockstep more), and
    the spread across ranks is already inside it, so the rows' `jitter` is 0. The model computes on
    `compute_device` (default: the CPU), where `syncsim real` trains it, made the current CUDA device
    while it does; the token lives on `device`. The step runs in the workload's `precision` as
    training runs it (`real.precision`: the TF32 switches, autocast for fp16 and bf16, fp16's loss
    scale).
    """
    _check_repeats(repeats, statistic)
    check_precision(precision)
    if batch < 1:
        raise ValueError(f"batch: must be >= 1, got {batch}")
    if len(task.data.y_train) < batch:
        raise ValueError(f"batch: {batch} exceeds the {len(task.data.y_train)} training samples")
    where = torch.device(compute_device or "cpu")
    with on_device(where):
        return _compute(task, batch, repeats, device, where, statistic, precision)


def _compute(
    task: Any, batch: int, repeats: int, device: Device, where: torch.device, statistic: Statistic, precision: str
) -> Optional[list[ComputeSample]]:
    configure_tf32(precision)
    trained = PrecisionTask(task_on(task, where), precision, where)  # as real/session.py trains it
    flat = trained.initial  # the functional forward reads nothing else
    x, y = trained.data.x_train[:batch].to(where), trained.data.y_train[:batch].to(where)

    def step() -> None:
        trained.gradient(flat, x, y)
        _sync(where)

    step()  # warm-up: allocator, autograd graph caches, CUDA kernels, fp16's loss scale
    distributed = dist.is_available() and dist.is_initialized()
    if not distributed:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        jitter = statistics.pstdev(times) / statistics.fmean(times) if len(times) > 1 else 0.0
        return [ComputeSample(0, int(batch), summarise(times, statistic), jitter)]
    token = torch.zeros(1, device=device)
    dist.all_reduce(token)
    _sync(device)
    steps, syncs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        dist.all_reduce(token)
        _sync(device)
        steps.append(time.perf_counter() - t0)
    for _ in range(repeats):
        t0 = time.perf_counter()
        dist.all_reduce(token)
        _sync(device)
        syncs.append(time.perf_counter() - t0)
    seconds = max(1e-9, summarise(steps, statistic) - summarise(syncs, statistic))
    return _gather([ComputeSample(dist.get_rank(), int(batch), seconds, 0.0)])


def egress_matching(racks: Mapping[str, Sequence[str]], rack: str) -> dict[str, str]:
    """Sender -> receiver for `rack`'s egress test: the other racks' hosts dealt round-robin,
    beginning with the rack after `rack`, so senders spread over receiving racks and reuse a
    receiver only when the other racks hold fewer hosts. {} when there is no other rack."""
    order = list(racks)
    shift = order.index(rack)
    others = [racks[r] for r in order[shift + 1 :] + order[:shift]]
    pool = [g[i] for i in range(max(map(len, others), default=0)) for g in others if i < len(g)]
    return {h: pool[i % len(pool)] for i, h in enumerate(racks[rack])} if pool else {}


def _ping(buf: torch.Tensor, peer: int, repeats: int, device: Device, statistic: Statistic) -> float:
    times = []
    for i in range(repeats + 1):  # the first round trip warms the pair up
        t0 = time.perf_counter()
        dist.send(buf, peer)
        dist.recv(buf, peer)
        _sync(device)
        if i:
            times.append(time.perf_counter() - t0)
    return summarise(times, statistic)


def _pong(buf: torch.Tensor, peer: int, repeats: int) -> None:
    for _ in range(repeats + 1):
        dist.recv(buf, peer)
        dist.send(buf, peer)


def _collective(op: str, numel: int, world: int, device: Device) -> Callable[[], Any]:
    full = torch.ones(numel, dtype=torch.float32, device=device)
    part = torch.empty(numel // world, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(full)
    if op == "reduce_scatter":
        rs = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: rs(part, full)
    ag = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return lambda: ag(full, part)


def _max_over_ranks(value: float, device: Device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _gather(rows: list[T]) -> Optional[list[T]]:
    rank, world = dist.get_rank(), dist.get_world_size()
    parts: Optional[list[Any]] = [None] * world if rank == 0 else None
    dist.gather_object(rows, parts, dst=0)
    if parts is None:
        return None
    return [row for part in parts for row in part]


def _sync(device: Device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def summarise(values: Sequence[float], statistic: Statistic) -> float:
    """The median, the mean, or the minimum: the robust choice on a shared machine, where
    interference only ever adds time and the simulator models the uncontended network."""
    if statistic == "min":
        return float(min(values))
    return float(statistics.fmean(values) if statistic == "mean" else statistics.median(values))


def _check_world(rank_hosts: Sequence[str], field: str) -> tuple[int, int]:
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("measure: no default process group; call torch.distributed.init_process_group first")
    rank, world = dist.get_rank(), dist.get_world_size()
    if len(rank_hosts) != world:
        raise ValueError(f"{field}: {len(rank_hosts)} entries for a world of {world} ranks")
    return rank, world


def _check_sizes(sizes: Sequence[int], field: str) -> None:
    if not sizes or any(int(n) < 1 for n in sizes):
        raise ValueError(f"{field}: need byte counts >= 1, got {list(sizes)}")


def _check_repeats(repeats: int, statistic: str) -> None:
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    if statistic not in STATISTICS:
        raise ValueError(f"statistic: unknown {statistic!r}; allowed: {', '.join(STATISTICS)}")
