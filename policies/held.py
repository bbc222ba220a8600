"""What one rank of a policy holds of the model's state at its memory peak, in shares of one replica.

The simulator's memory model (sim/memory) turns these shares into bytes: the fp32 master weights, their
gradients and the optimizer's state, the parameters a rank computes with, and its communication buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class HeldState:
    """A rank's share of each kind of state, at the start of backward (every activation saved).

    `parameters`, `gradients`, `optimizer`: shares of one replica's fp32 master weights, their gradients
    and the optimizer's per-parameter state a rank keeps (1: a replica, 1/g: a shard). `gathered_bytes`:
    bytes of parameters gathered from other ranks and alive at the peak (sharded data parallelism); None
    when the rank computes on its own replica (which autocast casts to 16 bits, a copy autograd keeps).
    `buffer_bytes`: communication buffers (DDP's flat gradient buckets). `extra_copies`: further fp32
    copies of the whole parameters a policy keeps (DiLoCo's anchor and outer momentum, PowerSGD's
    error feedback).
    """

    parameters: float = 1.0
    gradients: float = 1.0
    optimizer: float = 1.0
    gathered_bytes: Optional[float] = None
    buffer_bytes: float = 0.0
    extra_copies: float = 0.0

    def __post_init__(self) -> None:
        for name in ("parameters", "gradients", "optimizer", "buffer_bytes", "extra_copies"):
            if getattr(self, name) < 0:
                raise ValueError(f"held state: {name} must be >= 0")
        if self.gathered_bytes is not None and self.gathered_bytes < 0:
            raise ValueError("held state: gathered_bytes must be >= 0")
