"""The real backend's side of phases (policies.phases): agreeing where a phase ended, the switch
(checkpoint and restart, as the simulator's `Replicas.restart` does it), and the decision points
of adaptive synchronous phases.

Every process of the world calls `agree_used` and `restart` at every switch, in the same order.
Every process asks the policy for the next phase with the same `Progress`, so all agree on it; the
worker-iterations an asynchronous phase used are known to its coordinating shard alone, and
`agree_used` hands them to everyone. These calls run on the control group (host tensors over gloo,
`real.transport.control`) on every backend; a checkpoint is taken and handed out on the host.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.base import Policy
from policies.phases import Timing
from real.transport import control


def agree_used(used: int) -> int:
    """The largest `used` any process reports: the phase's worker-iterations (a barrier too)."""
    value = torch.tensor([used], dtype=torch.int64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=control())
    return int(value.item())


def restart(
    n: int,
    workers: int,
    from_servers: bool,
    params: Optional[torch.Tensor] = None,
    shard: Optional[tuple[torch.Tensor, torch.Tensor]] = None,
) -> torch.Tensor:
    """The `n`-element checkpoint every process restarts from: the servers' model if the phase that
    ended ran servers (each element from the shard it was pushed to), else the replicas' mean. A
    worker passes its replica's `params`, a shard its `(params, touched)` (any device); every process
    gets it, on the host."""
    replicas = params.to("cpu", copy=True) if params is not None else torch.zeros(n)
    dist.all_reduce(replicas, group=control())
    mean = replicas / workers
    if not from_servers:
        return mean
    owned, count = torch.zeros(n), torch.zeros(n)
    if shard is not None:
        touched = shard[1].cpu()
        owned[touched] = shard[0].cpu()[touched]
        count[touched] = 1.0
    dist.all_reduce(owned, group=control())
    dist.all_reduce(count, group=control())
    return torch.where(count > 0, owned / count.clamp(min=1.0), mean)


class Decisions:
    """The decision points of an adaptive synchronous phase on one worker: after step k its timing
    goes out in an all-gather over the workers, and the timings of step k - 1 (gathered while step
    k ran) are observed by this process's copy of the policy, in rank order. Every worker observes
    the same timings, so every copy decides the same: end the phase after step k or not."""

    def __init__(self, policy: Policy, group: Any, workers: int) -> None:
        self.policy, self.group, self.workers = policy, group, workers
        self._pending: deque[tuple[int, list[torch.Tensor], Any]] = deque()

    def after(self, timing: Timing) -> tuple[bool, float]:
        """Step `timing.step` finished: (does the phase end now, seconds spent waiting for the others)."""
        mine = torch.tensor([timing.seconds, timing.wait_s], dtype=torch.float64)
        out = [torch.zeros(2, dtype=torch.float64) for _ in range(self.workers)]
        work = dist.all_gather(out, mine, group=self.group, async_op=True)
        self._pending.append((timing.step, out, work))
        if len(self._pending) < 2:
            return False, 0.0
        step, gathered, previous = self._pending.popleft()
        start = time.perf_counter()
        previous.wait()
        waited = time.perf_counter() - start
        for rank, (seconds, wait) in enumerate(gathered):
            self.policy.observe(Timing(rank, step, float(seconds), float(wait)))
        return self.policy.phase_over(), waited

    def close(self) -> None:
        """The phase is over: let the gathers still in flight finish (every worker issued them)."""
        while self._pending:
            self._pending.popleft()[2].wait()
