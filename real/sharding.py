"""A real worker's sharded state (policies/fsdp.py): between steps it keeps only the shards it owns.

The executor carries out the policy's ops on the replica's flat parameter and gradient vectors as on any
other policy's (`real/collectives.py`: the reduce-scatter leaves each rank its FSDP-padded slice, the local
optimizer steps that slice, the all-gathers of the next step fill in the rest). This module makes the memory
follow, as FSDP's flat parameter does:

- parameters (`full`, `hybrid`, `grad_op`): after a step, the rank copies out the slices it owns and frees
  the flat vector's storage (`untyped_storage().resize_(0)`, what FSDP1 does to its unsharded flat
  parameter); before the next step it allocates the storage again, writes its slices back and fills the rest
  with NaN until the all-gathers overwrite it, so a read of a shard it does not own would show in the loss.
- gradients (the same strategies): the flat gradient's storage is freed after the optimizer step (its shard
  was consumed) and allocated again before the next backward writes it.
- optimizer state (every strategy): made per element range on its first step (`RangeOptimizer`), so a rank
  holds state for the slices it steps and for nothing else.

Which of the three a policy shards is what its `held_state` says it holds less than a replica of.

Unlike FSDP, whose units are gathered and freed one at a time, the whole flat vector is gathered for the
step: the real backend computes forward and backward in one autograd call (real/worker.py), so gathered
parameters stay allocated from forward through backward whatever `reshard_after_forward` says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from policies.base import Policy
from sim.config.numerics import OptimizerConfig
from sim.numerics.optim import FlatOptimizer
from sim.numerics.replica import Replica
from sim.numerics.shards import Owned

Range = tuple[int, int]


@dataclass(frozen=True)
class Sharded:
    """What a rank keeps only its shards of between steps."""

    parameters: bool = False
    gradients: bool = False
    optimizer: bool = False


def sharded(policy: Policy) -> Sharded:
    """What a bound `policy` shards: each kind of state it holds less than a replica of
    (`Policy.held_state`, the shares the simulator's memory model counts)."""
    held = policy.held_state()
    return Sharded(held.parameters < 1.0, held.gradients < 1.0, held.optimizer < 1.0)


class RangeOptimizer:
    """`FlatOptimizer`'s update rules with state made per element range on its first step (one replica): a
    rank that steps only the slices it owns holds state for those alone."""

    def __init__(self, cfg: OptimizerConfig) -> None:
        self.cfg = cfg
        self.ranges: dict[Range, FlatOptimizer] = {}

    def step(
        self,
        params: torch.Tensor,
        row: int,
        a: int,
        b: int,
        grad: torch.Tensor,
        lr: float,
        momentum: Optional[float] = None,
    ) -> None:
        state = self.ranges.get((a, b))
        if state is None:
            state = self.ranges[(a, b)] = FlatOptimizer(self.cfg, 1, b - a)
            for name, value in list(vars(state).items()):  # on the replica's device
                if isinstance(value, torch.Tensor):
                    setattr(state, name, value.to(params.device))
        state.step(params[a:b], 0, 0, b - a, grad, lr, momentum)

    def held_bytes(self) -> int:
        """The bytes of state held (for tests and reports)."""
        return sum(
            value.numel() * value.element_size()
            for state in self.ranges.values()
            for value in vars(state).values()
            if isinstance(value, torch.Tensor)
        )


class ShardedState:
    """Frees what a worker does not own between steps and allocates it again before the next (see above)."""

    def __init__(self, replica: Replica, what: Sharded) -> None:
        self.replica, self.what = replica, what
        self.owned: Owned = []
        self._kept: list[torch.Tensor] = []
        self._freed: list[torch.Tensor] = []

    def reshard(self) -> None:
        """After a step: keep the owned slices of the parameters, free the flat vectors. Nothing is freed before
        the first reduce-scatter has said which slices this rank owns."""
        owned = self.replica.owned()
        if not owned or self._freed:
            return
        self.owned = owned
        params = self.replica.params
        if self.what.parameters:
            self._kept = [params[lo:hi].clone() for _, (lo, hi) in owned]
            self._free(params)
        if self.what.gradients:
            self._free(self.replica.grads)

    def unshard(self) -> None:
        """Before a step (and at the end of a run): storage again; the owned slices back, NaN elsewhere until
        the all-gathers fill it."""
        for tensor in self._freed:
            tensor.untyped_storage().resize_(tensor.numel() * tensor.element_size())
        params = self.replica.params
        if self._kept:
            params.fill_(float("nan"))
            for (_, (lo, hi)), values in zip(self.owned, self._kept):
                params[lo:hi] = values
        self._freed, self._kept = [], []

    def _free(self, tensor: torch.Tensor) -> None:
        if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size() or tensor.storage_offset():
            return  # a view into a larger storage: freeing it would free more than this vector
        tensor.untyped_storage().resize_(0)
        self._freed.append(tensor)
