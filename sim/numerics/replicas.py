"""The workers' model replicas, and what every op of a policy does to their tensors.

Tensors: `params[r]` and `grads[r]` are worker r's flat parameters and gradient. A policy's gradient
buckets map onto element ranges of that vector in proportion to their bytes, bucket 0 (first ready in
backward) holding the last elements, as the last layers come last. An op in an `on_forward` /
`on_gradients` program acts on its bucket's range; an op in `begin_step` / `end_step` acts on the
whole vector. Rules, applied when the simulator completes the op:

- AllReduce: every member gets the group mean (of gradients or parameters, as the op's payload says).
- ReduceScatter: member i gets the mean of the i-th 1/p slice, and its later ops on that bucket act
  on that slice until an AllGather gathers the slices back (so 2-D all-reduce nests correctly).
- AllGather: every member gets every member's slice.
- Push (gradients): the pushes of one program item split the range in proportion to their bytes;
  the shard receives the values as they are when the push is issued.  Pull (parameters): the
  rank's range is overwritten with the servers' values when the shard replies.
- Local optimizer step: a worker steps its own optimizer on a bucket right before it enters a
  parameter collective on it (DS-Sync's optimizer-in-backward), or else after all its bucket programs
  finish and before `end_step` (after a gradient all-reduce), unless it pushed the bucket's gradient
  to servers this step (the servers own the update).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Optional

import numpy as np
import torch

from policies.ops import AllGather, AllReduce, Barrier, Collective, Payload, Pull, Push, ReduceScatter
from sim.config_numerics import NumericsConfig
from sim.errors import PolicyError
from sim.numerics.batches import ShardSampler, per_worker_batch
from sim.numerics.optim import FlatOptimizer, learning_rate
from sim.numerics.servers import ServerTensors, Update
from sim.numerics.tasks import Task

Range = tuple[int, int]


def bucket_ranges(n: int, bucket_bytes: Sequence[float]) -> list[Range]:
    """Element ranges of the buckets: proportional to their bytes, bucket 0 at the end of the vector."""
    total = float(sum(bucket_bytes)) or 1.0
    cuts = [0]
    acc = 0.0
    for nbytes in bucket_bytes:
        acc += nbytes
        cuts.append(int(round(n * acc / total)))
    cuts[-1] = n
    return [(n - cuts[k + 1], n - cuts[k]) for k in range(len(bucket_bytes))]


def partition(a: int, b: int, weights: Sequence[float]) -> list[Range]:
    """Split [a, b) into consecutive ranges in proportion to `weights` (equal if they are all zero)."""
    return _partition(a, b, tuple(weights))


@lru_cache(maxsize=4096)
def _partition(a: int, b: int, weights: tuple[float, ...]) -> list[Range]:
    w = np.asarray(weights, dtype=float)
    if w.sum() <= 0:
        w = np.ones(len(w))
    cuts = a + np.rint(np.concatenate(([0.0], np.cumsum(w) / w.sum())) * (b - a)).astype(int)
    cuts[-1] = b
    return [(int(cuts[i]), int(cuts[i + 1])) for i in range(len(w))]


class Replicas:
    def __init__(
        self,
        cfg: NumericsConfig,
        task: Task,
        world: int,
        bucket_bytes: Sequence[float],
        iterations: int,
        seed: int,
        policy: str,
        servers: bool,
    ) -> None:
        self.cfg, self.task, self.world, self.iterations, self.policy = cfg, task, world, iterations, policy
        n = task.size
        self.params = task.initial.repeat(world, 1)
        self.grads = torch.zeros(world, n)
        self.optimizer = FlatOptimizer(cfg.optimizer, world, n)
        self.ranges = bucket_ranges(n, bucket_bytes)
        batch = per_worker_batch(cfg.global_batch, world)
        n_train = len(task.data.y_train)
        self.samplers = [ShardSampler(n_train, world, r, batch, seed) for r in range(world)]
        self.server = ServerTensors(cfg, task.initial, world, iterations) if servers else None
        self.steps = [0] * world  # the step each worker is in
        self.losses: list[list[float]] = [[] for _ in range(world)]  # minibatch losses since the last evaluation
        self._settled: list[set[Optional[int]]] = [set() for _ in range(world)]  # buckets stepped or pushed
        # per rank: bucket -> the nested slices reduce-scatters left (reset every step)
        self._slices: list[dict[Optional[int], list[Range]]] = [{} for _ in range(world)]

    # ----------------------------------------------------------------------------- worker timeline
    def forward_done(self, rank: int, step: int) -> None:
        """Forward has read its parameters: compute this worker's gradient on its next batch."""
        idx = torch.from_numpy(self.samplers[rank].next())
        grad, loss = self.task.gradient(self.params[rank], self.task.data.x_train[idx], self.task.data.y_train[idx])
        self.grads[rank] = grad
        self.losses[rank].append(loss)
        self.steps[rank] = step
        self._settled[rank].clear()
        self._slices[rank].clear()

    def step_done(self, rank: int, step: int) -> None:
        """All bucket programs finished: step the local optimizer on every bucket nobody else updates."""
        for bucket in range(len(self.ranges)):
            if bucket not in self._settled[rank]:
                self._local_step(rank, bucket)

    def _local_step(self, rank: int, bucket: int) -> None:
        a, b = self.ranges[bucket]
        lr = learning_rate(self.cfg.optimizer.lr, self.cfg.schedule, self.steps[rank], self.iterations)
        self.optimizer.step(self.params[rank], rank, a, b, self.grads[rank, a:b], lr)
        self._settled[rank].add(bucket)

    def _range(self, rank: int, bucket: Optional[int]) -> Range:
        nested = self._slices[rank].get(bucket)
        if nested:
            return nested[-1]
        return (0, self.task.size) if bucket is None else self.ranges[bucket]

    # ----------------------------------------------------------------------------- collectives
    def arrive(self, rank: int, op: Collective, bucket: Optional[int]) -> None:
        """`rank` reached `op`: a parameter collective first takes the local optimizer step."""
        if op.payload is not Payload.PARAMETERS:
            return
        for b in range(len(self.ranges)) if bucket is None else (bucket,):
            if b not in self._settled[rank]:
                self._local_step(rank, b)

    def collective_done(self, op: Collective, buckets: Mapping[int, Optional[int]]) -> None:
        """Carry out `op` on the members' tensors; `buckets` maps each member to its program's bucket."""
        if isinstance(op, Barrier) or op.payload is Payload.CONTROL:
            return
        data = self.params if op.payload is Payload.PARAMETERS else self.grads
        ranks = op.group.ranks
        ranges = [self._range(r, buckets[r]) for r in ranks]
        p = len(ranks)
        if isinstance(op, AllGather):
            self._all_gather(op, data, ranks, ranges, buckets)
            return
        self._same_sizes(op, ranges)
        if isinstance(op, AllReduce):
            mean = torch.stack([data[r, a:b] for r, (a, b) in zip(ranks, ranges)]).mean(dim=0)
            for r, (a, b) in zip(ranks, ranges):
                data[r, a:b] = mean
        elif isinstance(op, ReduceScatter):
            parts = [partition(a, b, [1.0] * p) for a, b in ranges]
            for i, r in enumerate(ranks):
                mean = torch.stack([data[q, parts[j][i][0] : parts[j][i][1]] for j, q in enumerate(ranks)]).mean(0)
                lo, hi = parts[i][i]
                data[r, lo:hi] = mean
                self._slices[r].setdefault(buckets[r], []).append((lo, hi))
        else:
            raise PolicyError(
                f"policy {self.policy!r}: numerics mode has no tensor rule for {type(op).__name__}; "
                "run this policy with numerics disabled"
            )

    def _all_gather(
        self,
        op: Collective,
        data: torch.Tensor,
        ranks: Sequence[int],
        ranges: Sequence[Range],
        buckets: Mapping[int, Optional[int]],
    ) -> None:
        p = len(ranks)
        whole = []
        for r, (a, b) in zip(ranks, ranges):
            nested = self._slices[r].get(buckets[r])
            if nested:  # gathering the slices a reduce-scatter left: back to the enclosing range
                nested.pop()
                whole.append(self._range(r, buckets[r]))
            else:  # member i owns the i-th slice of its range
                whole.append((a, b))
        self._same_sizes(op, whole)
        parts = [partition(a, b, [1.0] * p) for a, b in whole]
        for i, r in enumerate(ranks):
            lo, hi = parts[i][i]
            values = data[r, lo:hi].clone()
            for j, q in enumerate(ranks):
                if q != r:
                    a, b = parts[j][i]
                    data[q, a:b] = values

    def _same_sizes(self, op: Collective, ranges: Sequence[Range]) -> None:
        if len({b - a for a, b in ranges}) != 1:
            raise PolicyError(f"policy {self.policy!r}: members of {op!r} hold tensors of different sizes {ranges}")

    # ----------------------------------------------------------------------------- servers
    def push_updates(self, rank: int, bucket: Optional[int], pushes: Sequence[Push]) -> list[Update]:
        """The gradient values each push of one program item carries."""
        if self.server is None:
            raise PolicyError(f"policy {self.policy!r} pushes but declares no server shards")
        for op in pushes:
            if op.payload is not Payload.GRADIENTS:
                raise PolicyError(f"policy {self.policy!r}: numerics mode pushes gradients only, got {op!r}")
        a, b = self._range(rank, bucket)
        self._settled[rank].update(range(len(self.ranges)) if bucket is None else (bucket,))
        values = self.grads[rank, a:b].clone()  # as they are now; the slices below are views of this copy
        return [
            Update(rank, lo, hi, values[lo - a : hi - a]) for lo, hi in partition(a, b, [op.nbytes for op in pushes])
        ]

    def pull_ranges(self, rank: int, bucket: Optional[int], pulls: Sequence[Pull]) -> list[Range]:
        for op in pulls:
            if op.payload is not Payload.PARAMETERS:
                raise PolicyError(f"policy {self.policy!r}: numerics mode pulls parameters only, got {op!r}")
        a, b = self._range(rank, bucket)
        return partition(a, b, [op.nbytes for op in pulls])

    def pulled(self, rank: int, ranges: Sequence[Range]) -> None:
        """The servers' reply arrived: overwrite those elements with the servers' values."""
        assert self.server is not None
        lo, hi = min(a for a, _ in ranges), max(b for _, b in ranges)
        if sum(b - a for a, b in ranges) == hi - lo:  # one item's pulls: contiguous, one copy
            self.params[rank, lo:hi] = self.server.params[lo:hi]
            return
        for a, b in ranges:
            self.params[rank, a:b] = self.server.params[a:b]

    # ----------------------------------------------------------------------------- models
    def consensus(self) -> torch.Tensor:
        """The servers' model where there are servers, else the mean of the replicas."""
        return self.server.params if self.server is not None else self.params.mean(dim=0)
