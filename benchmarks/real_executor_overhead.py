"""Host overhead of the real backend's completion path per collective, on gloo on the CPU.

    python benchmarks/real_executor_overhead.py [--ranks 2] [--bytes 1024] [--calls 2000]

Each rank times, call by call, a bare blocking `dist.all_reduce` of a small tensor, then the same
all-reduce issued asynchronously and completed the way `real.executor.RankExecutor` completes a
collective (handed to a waiter thread, which waits for it and wakes the main thread, which finishes
it). It prints rank 0's medians, their difference (the executor's overhead per collective) and their
ratio. Only the completion path is timed: the op's tensor rule (`real.collectives.start`) is not.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

from policies.ops import AllReduce, Group  # noqa: E402
from real import executor as ex  # noqa: E402


def _rank(rank: int, world: int, port: int, nbytes: int, calls: int, out: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        tensor = torch.ones(max(1, nbytes // 4))
        replica = SimpleNamespace(params=SimpleNamespace(device=tensor.device, is_cuda=False))
        executor = ex.RankExecutor(rank, "bench", None, replica, [], None, 60.0, None)  # type: ignore[arg-type]
        op = AllReduce(group=Group(tuple(range(world))), nbytes=float(nbytes))

        def bare() -> None:
            dist.all_reduce(tensor)

        def through_executor() -> None:
            slot = ex.Slot(op, 0, 0, None, issued=time.perf_counter())
            executor._launch(ex.Flight(slot, [dist.all_reduce(tensor, async_op=True)], None, nbytes))
            for flight in executor._wait():
                executor._complete(0, flight)

        medians = {}
        for name, call in (("bare", bare), ("executor", through_executor)) * 2:  # twice: the second counts
            dist.barrier()
            times = []
            for _ in range(calls):
                t = time.perf_counter()
                call()
                times.append(time.perf_counter() - t)
            medians[name] = statistics.median(times)
        if rank == 0:
            out.update(medians)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--bytes", type=int, default=1024)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.spawn(_rank, args=(args.ranks, port, args.bytes, args.calls, out), nprocs=args.ranks)
        bare, executor = out["bare"], out["executor"]
    print(f"gloo CPU, {args.ranks} ranks, {args.bytes} B all-reduce, median of {args.calls} calls (rank 0):")
    print(f"  bare dist.all_reduce      {1e6 * bare:8.1f} us")
    print(f"  through the executor      {1e6 * executor:8.1f} us")
    print(f"  executor overhead         {1e6 * (executor - bare):8.1f} us per collective")
    print(f"  ratio executor / bare     {executor / bare:8.2f}")


if __name__ == "__main__":
    main()
