"""One worker's named tensors on the real backend, and what a collective on a buffer or a fragment acts on.

A worker keeps the policy's buffers (`Policy.buffers`, every phase policy's: `local_ops.phase_buffers`)
beside its replica's parameters and gradient in a `sim.numerics.local_ops.TensorStore`, the store
numerics mode keeps per
simulated worker, so local ops (`Combine`, `OptimizerStep`, `Encode`) leave the same bits on both
backends. The store's `parameters` and `gradients` are the replica's own tensors, not copies, and
every buffer is made on the replica's device (`zeros_like`, `clone`), so a worker on a GPU keeps its
buffers there.

An op acts on its hook's region (`Replica.range`: a bucket's range, narrowed by a ReduceScatter's
slice, or the whole model), or in a whole-model hook on a `fragment`'s buckets (`op_ranges`). A
collective with neither `tensor` nor `fragment` runs on the replica as before. On another buffer it
runs on that buffer over the hook's region (ReduceScatter slices nest on the replica's). On a
fragment its buckets' ranges are laid end to end in one contiguous tensor (in bucket order; a wire
type's blocks start at the first value), the collective runs on that tensor, and the result is
written back into the ranges once it has finished (`Narrowed.write_back`); a single range is used in
place. Only a dense AllReduce takes a fragment, as in numerics mode (sim/numerics/replicas.py): a
ReduceScatter's slice, an AllGather's and a sparse op's index sets would have to outlive the copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch

from policies.lowrank import FactorBuffer
from policies.ops import AllReduce, Barrier, Broadcast, Collective, LocalOp, Payload
from policies.tensors import Buffer
from real.broadcast import HeldState
from sim.numerics.local_ops import Range, TensorStore, op_ranges
from sim.numerics.replica import Replica


class RankTensors:
    """The replica's parameters and gradient with the policy's buffers, and the ranges ops act on."""

    def __init__(self, replica: Replica, buffers: Sequence[Buffer | FactorBuffer] = ()) -> None:
        self.replica, self.buffers = replica, list(buffers)
        shapes = getattr(getattr(replica, "task", None), "tensor_shapes", ())  # none: no factor buffers to size
        self.store = TensorStore(replica.params, replica.grads, buffers, shapes)

    def restart(self, model: torch.Tensor) -> None:
        """A phase switch restarts every replica from `model`: so do the buffers (a copy of it, or
        zeros, as declared), and the factors and the policy's optimizers lose their state, as in numerics mode."""
        self.store.restart(model, self.buffers)

    def ranges(self, op: Any, bucket: Optional[int]) -> list[Range]:
        """The element ranges `op` (a local op or a collective) acts on in a hook of `bucket`
        (None: a whole-model hook). Raises ValueError for a fragment in a bucket's hook."""
        fragment = getattr(op, "fragment", None)
        if fragment is not None and bucket is not None:
            raise ValueError(
                f"a fragment narrows ops of whole-model hooks (begin_step, end_step); this op is in bucket "
                f"{bucket}'s hook, which acts on that bucket"
            )
        return op_ranges(self.replica.ranges, self.replica.range(bucket), fragment)

    def apply(self, op: LocalOp, bucket: Optional[int]) -> None:
        self.store.apply(op, self.ranges(op, bucket))

    def target(self, op: Collective, bucket: Optional[int]) -> Any:
        """What `real.collectives.start` runs `op` on: the replica itself (no `tensor`, no `fragment`:
        as before), a `BufferView`, a `HeldState` (a Broadcast of optimizer state), or a `Narrowed` (a
        fragment; call its `write_back` once the collective's own finish has run). Raises ValueError for an
        op a fragment cannot carry."""
        if isinstance(op, Barrier) or op.payload is Payload.CONTROL:
            return self.replica  # carries nothing
        if isinstance(op, Broadcast) and op.state is not None:  # a policy-owned optimizer's state
            region = self.replica.range(bucket)
            return HeldState(self.store, region, self.replica.rank, self.replica.policy)
        if op.buffer in self.store.factors:
            if bucket is None or op.fragment is not None or op.coding is not None or not isinstance(op, AllReduce):
                raise ValueError(f"{op!r}: a factor buffer takes a dense AllReduce in a bucket's program only")
            factors = self.store.factors.tensor(op.buffer, self.replica.range(bucket))
            return Narrowed(self.replica, factors, [(0, factors.numel())])
        if op.fragment is None:
            if op.tensor is None:
                return self.replica
            return BufferView(self.replica, self.store.tensor(op.buffer))
        if op.coding is not None or not isinstance(op, AllReduce):
            raise ValueError(
                f"{type(op).__name__}{' (sparse)' if op.coding is not None else ''} on a fragment; a fragment "
                "narrows a dense AllReduce only (as in numerics mode)"
            )
        return Narrowed(self.replica, self.store.tensor(op.buffer), self.ranges(op, bucket))


class BufferView:
    """The replica as `real.collectives.start` sees it, with a buffer in place of its parameters or
    gradient: the same ranges and ReduceScatter slices, the same rank, policy and gradient wire type."""

    def __init__(self, replica: Replica, tensor: torch.Tensor) -> None:
        self.replica, self.tensor = replica, tensor
        self.rank, self.policy, self.wire = replica.rank, replica.policy, replica.wire

    def data(self, op: Collective) -> torch.Tensor:
        return self.tensor

    def range(self, bucket: Optional[int]) -> Range:
        return self.replica.range(bucket)

    def push_slice(self, bucket: Optional[int], part: Range) -> None:
        self.replica.push_slice(bucket, part)

    def pop_slice(self, bucket: Optional[int]) -> Optional[Range]:
        return self.replica.pop_slice(bucket)


class Narrowed:
    """A fragment's ranges of a buffer as one tensor for `real.collectives.start`: the buffer itself
    over its one range, or the ranges laid end to end in a contiguous copy that `write_back` copies
    into place. Nothing was scattered before it (`pop_slice` is None), and it scatters nothing."""

    def __init__(self, replica: Replica, tensor: torch.Tensor, ranges: Sequence[Range]) -> None:
        self.rank, self.policy, self.wire = replica.rank, replica.policy, replica.wire
        self.tensor, self.ranges = tensor, list(ranges)
        if len(self.ranges) == 1:
            self.flat, self.span = tensor, self.ranges[0]
        else:  # torch.cat copies on the tensor's device, queued on the current stream
            self.flat = torch.cat([tensor[a:b] for a, b in self.ranges])
            self.span = (0, self.flat.numel())

    def data(self, op: Collective) -> torch.Tensor:
        return self.flat

    def range(self, bucket: Optional[int]) -> Range:
        return self.span

    def push_slice(self, bucket: Optional[int], part: Range) -> None:
        raise ValueError("a collective on a fragment scatters nothing (the real backend refuses ReduceScatter there)")

    def pop_slice(self, bucket: Optional[int]) -> Optional[Range]:
        return None

    def write_back(self) -> None:
        """Copy the collective's result into the buffer's ranges (nothing to do for one range)."""
        if self.flat is self.tensor:
            return
        offset = 0
        for a, b in self.ranges:
            self.tensor[a:b].copy_(self.flat[offset : offset + b - a])
            offset += b - a
