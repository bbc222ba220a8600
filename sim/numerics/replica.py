"""One worker's model replica and the rules that need no other worker: its batches, its gradient,
its local optimizer step, and which element range an op of a bucket acts on.

Both backends use it: the simulator's `Replicas` keeps one per simulated worker (rows of shared
tensors), and the real backend keeps one per process. What a collective does across workers is the
backend's part (in-process arithmetic in `replicas.py`, torch.distributed in `real/`).

Rules (the same on both backends):
- A policy's gradient buckets map onto element ranges in proportion to their bytes (`bucket_ranges`).
- An op in an `on_forward` / `on_gradients` program acts on its bucket's range, narrowed to the
  slice the last unmatched ReduceScatter left (`push_slice` / `pop_slice`); a whole-model hook
  (bucket None) acts on the whole vector.
- The local optimizer steps a bucket right before the worker enters a collective on its parameters
  (an AllGather of them excepted: it reads what the owners hold), or else after all bucket programs
  finish, unless the bucket's gradient was pushed to servers. It steps the op range: a bucket's slice
  when a ReduceScatter left one that no AllGather gathered back (sharded data parallelism: each rank
  steps the shard it owns, `sim.numerics.shards`).
- Dense gradient collectives of two or more members send values in `wire` (`workload.gradient_precision`):
  each member's values are rounded to it, summed in it, and averaged in fp32 (`through_wire`), as a DDP
  compress hook does. Sparse pairs travel in `wire` too (summed in fp32 by the receivers), and so does
  everything to and from parameter servers: pushed gradients (`push_updates` rounds them) and pulled
  parameters (the servers keep theirs in fp32). Parameter collectives send fp32.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Optional

import numpy as np
import torch

from policies.ops import AllGather, Broadcast, Collective, Payload, Pull, Push
from policies.tensors import PARAMETERS
from sim.config.numerics import NumericsConfig
from sim.config.sparsity import SparsityConfig
from sim.errors import PolicyError
from sim.numerics.batches import ShardSampler
from sim.numerics.optim import FlatOptimizer, learning_rate
from sim.numerics.servers import Update
from sim.numerics.tasks import Task
from sim.numerics.topk import ErrorFeedbackTopK
from sim.numerics.wire_cast import NATIVE

Range = tuple[int, int]
# the gradient types on the wire other than fp32 (wire_cast.NATIVE: the one table of native wire types)
WIRE_DTYPES = {name: dtype for name, dtype in NATIVE.items() if name != "fp32"}


def wire_dtype(precision: str) -> Optional[torch.dtype]:
    """The type gradient values travel in under a resolved `workload.gradient_precision`
    (`WorkloadConfig.wire_precision`); None: fp32, the values as they are."""
    return WIRE_DTYPES.get(precision)


def through_wire(values: torch.Tensor, wire: Optional[torch.dtype]) -> torch.Tensor:
    """`values` as they arrive after travelling in `wire` (rounded to it, back in their own type)."""
    return values if wire is None else values.to(wire).to(values.dtype)


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


class Replica:
    """Worker `rank`'s parameters and gradient (1-D views), optimizer row, batches and op ranges."""

    def __init__(
        self,
        cfg: NumericsConfig,
        task: Task,
        rank: int,
        params: torch.Tensor,
        grads: torch.Tensor,
        optimizer: FlatOptimizer,
        row: int,
        ranges: Sequence[Range],
        sampler: ShardSampler,
        iterations: int,
        policy: str,
        *,
        sparsity: Optional[SparsityConfig] = None,
        gradient_precision: str = "fp32",
    ) -> None:
        """`sparsity`: the workload's; with `topk` the real gradient is top-k sparsified with error
        feedback before any op sees it. `gradient_precision`: the type gradient collectives send
        (`WorkloadConfig.wire_precision`), kept as `wire` (None: fp32)."""
        self.cfg, self.task, self.rank, self.iterations, self.policy = cfg, task, rank, iterations, policy
        self.wire = wire_dtype(gradient_precision)
        self.sparsifier = (
            ErrorFeedbackTopK(task.tensor_sizes, sparsity.topk, sparsity.dense_below)
            if sparsity is not None and sparsity.topk is not None
            else None
        )
        self.params, self.grads, self.optimizer, self.row = params, grads, optimizer, row
        self.ranges, self.sampler = list(ranges), sampler
        self.step = 0  # the step this worker is in
        self.losses: list[float] = []  # minibatch losses since the last evaluation
        self._settled: set[Optional[int]] = set()  # buckets stepped or pushed this step
        self._slices: dict[Optional[int], list[Range]] = {}  # bucket -> nested reduce-scatter slices

    # ----------------------------------------------------------------------------- timeline
    def forward_done(self, step: int) -> None:
        """Forward has read its parameters: the gradient on this worker's next batch."""
        idx = torch.from_numpy(self.sampler.next())
        data = self.task.data
        x, y = data.x_train[idx], data.y_train[idx]
        if self.sparsifier is None and getattr(self.task, "gradient_in_place", False):
            grad, loss = self.task.gradient(self.params, x, y, out=self.grads)  # no model-length temporary
        else:
            grad, loss = self.task.gradient(self.params, x, y)
        if grad is not self.grads:
            self.grads.copy_(grad if self.sparsifier is None else self.sparsifier(grad))
        self.losses.append(loss)
        self.step = step
        self._settled.clear()
        self._slices.clear()

    def step_done(self) -> None:
        """All bucket programs finished: step the local optimizer on every bucket nobody else updates."""
        for bucket in range(len(self.ranges)):
            if bucket not in self._settled:
                self.local_step(bucket)

    def local_step(self, bucket: int) -> None:
        a, b = self.range(bucket)  # the owned slice where a ReduceScatter left one: the rest is not this rank's
        lr = learning_rate(self.cfg.optimizer.lr, self.cfg.schedule, self.step, self.iterations)
        self.optimizer.step(self.params, self.row, a, b, self.grads[a:b], lr)
        self._settled.add(bucket)

    # ----------------------------------------------------------------------------- ranges
    def range(self, bucket: Optional[int]) -> Range:
        nested = self._slices.get(bucket)
        if nested:
            return nested[-1]
        return (0, self.task.size) if bucket is None else self.ranges[bucket]

    def push_slice(self, bucket: Optional[int], part: Range) -> None:
        """A ReduceScatter left this worker `part`: later ops of the bucket act on it."""
        self._slices.setdefault(bucket, []).append(part)

    def pop_slice(self, bucket: Optional[int]) -> Optional[Range]:
        """An AllGather gathers the last slice back: the enclosing range (None: nothing was scattered)."""
        nested = self._slices.get(bucket)
        if not nested:
            return None
        nested.pop()
        return self.range(bucket)

    def owned(self) -> list[tuple[Range, Range]]:
        """(enclosing range, owned slice) of every bucket a ReduceScatter left a slice of that no AllGather
        gathered back yet (`sim.numerics.shards.full_models` reads it)."""
        spans = []
        for bucket, nested in self._slices.items():
            if nested:
                whole = (0, self.task.size) if bucket is None else self.ranges[bucket]
                spans.append((whole, nested[-1]))
        return spans

    def _row_sparse_optimizer(self) -> bool:
        opt = self.cfg.optimizer
        return opt.name == "sgd" and opt.momentum == 0 and opt.weight_decay == 0

    def data(self, op: Collective) -> torch.Tensor:
        return self.params if op.payload is Payload.PARAMETERS else self.grads

    # ----------------------------------------------------------------------------- ops
    def arrive(self, op: Collective, bucket: Optional[int]) -> None:
        """This worker reached `op`: a collective on the parameters first takes the local optimizer step
        (one on another parameter-space buffer, DiLoCo's pseudo-gradient, does not; nor does an AllGather, which
        reads the owners' shards for forward or backward before this step's gradient is reduced: FSDP's)."""
        if op.buffer != PARAMETERS or isinstance(op, (Broadcast, AllGather)):  # a Broadcast replaces them
            return
        for b in range(len(self.ranges)) if bucket is None else (bucket,):
            if b not in self._settled:
                self.local_step(b)

    def push_updates(self, bucket: Optional[int], pushes: Sequence[Push], servers: bool) -> list[Update]:
        """The gradient values each push of one program item carries (they split the range by bytes),
        rounded to the wire type they travel in."""
        if not servers:
            raise PolicyError(f"policy {self.policy!r} pushes but declares no server shards")
        for op in pushes:
            if op.payload is not Payload.GRADIENTS:
                raise PolicyError(f"policy {self.policy!r}: numerics mode pushes gradients only, got {op!r}")
        a, b = self.range(bucket)
        self._settled.update(range(len(self.ranges)) if bucket is None else (bucket,))
        # as they are now, as they travel (rounded to `wire`); the slices below are views of this copy
        values = self.grads[a:b].clone() if self.wire is None else through_wire(self.grads[a:b], self.wire)
        return [
            Update(self.rank, lo, hi, values[lo - a : hi - a])
            for lo, hi in partition(a, b, [op.nbytes for op in pushes])
        ]

    def pull_ranges(self, bucket: Optional[int], pulls: Sequence[Pull]) -> list[Range]:
        for op in pulls:
            if op.payload is not Payload.PARAMETERS:
                raise PolicyError(f"policy {self.policy!r}: numerics mode pulls parameters only, got {op!r}")
            if op.coding is not None and not self._row_sparse_optimizer():
                opt = self.cfg.optimizer
                raise PolicyError(
                    f"policy {self.policy!r}: a sparse pull returns only the rows the last round updated, which "
                    "is the servers' whole change only if the optimizer touches just those rows; set "
                    f"numerics.optimizer name: sgd, momentum: 0, weight_decay: 0 (got name: {opt.name}, "
                    f"momentum: {opt.momentum}, weight_decay: {opt.weight_decay})"
                )
        a, b = self.range(bucket)
        return partition(a, b, [op.nbytes for op in pulls])
