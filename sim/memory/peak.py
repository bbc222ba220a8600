"""The terms of one GPU's peak memory under a policy, from what the policy holds (`Policy.held_state`).

The peak is taken at the start of backward, when every activation is saved. Each term is in the type it
is held in:

- parameters: the fp32 master weights a rank keeps (its share), plus the parameters it computes with:
  what sharded data parallelism gathered from other ranks, or autocast's 16-bit copies of its own
  replica (cast once per forward, kept by autograd for backward);
- gradients: fp32, the share the optimizer steps (and, where a sharded policy accumulates micro-batches
  without reduce-scattering them, `workload.accumulation_sync: last`, the whole unsharded gradient);
- optimizer: fp32 state per parameter (`optimizer_states`: 2 for Adam's moments, 1 for momentum),
  its share, and every further fp32 copy of the model a policy keeps (DiLoCo's anchor);
- activations: `activation_bytes_per_sample` times the micro-batch;
- buffers: communication buffers (DDP's flat gradient buckets; a sharded unit's unsharded gradient).

Not counted: the CUDA context and NCCL's own buffers (outside PyTorch's allocator), and the allocator's
fragmentation (what `torch.cuda.max_memory_reserved` adds to `max_memory_allocated`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

from policies.base import Policy
from policies.held import HeldState
from sim.compute.activations import FP32_BYTES, SIXTEEN_BIT
from sim.compute.workload import ComputePlan
from sim.config import Config

GIB = 2.0**30
# values of state per parameter: workload.optimizer_state
OPTIMIZER_STATES = {"none": 0, "momentum": 1, "adam": 2}


@dataclass(frozen=True)
class MemoryTerms:
    """One GPU's peak memory, by term, in bytes; `activations_source` says where the activations come from
    (ComputePlan.activation_source): counted, measured, estimated, or none where the model gives no sizes
    (a synthetic gradient, a profiled module whose profile has no saved bytes) and they count as 0."""

    parameters: float
    gradients: float
    optimizer: float
    activations: float
    buffers: float
    activations_source: str = "counted"

    @property
    def activations_known(self) -> bool:
        return self.activations_source != "none"

    @property
    def total(self) -> float:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.buffers

    def terms(self) -> dict[str, float]:
        """The byte terms by name, in the order above."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "activations_source"}

    def describe(self) -> str:
        """`parameters 1.2, gradients ...` in GiB."""
        return ", ".join(f"{name} {value / GIB:.1f}" for name, value in self.terms().items()) + " GiB"


def optimizer_states(config: Config) -> int:
    """Values of optimizer state per parameter: `workload.optimizer_state`, or else what numerics mode's
    optimizer keeps (its default: SGD with momentum, one)."""
    chosen = config.workload.optimizer_state
    if chosen is not None:
        return OPTIMIZER_STATES[chosen]
    if config.numerics is None:
        return OPTIMIZER_STATES["momentum"]
    optimizer = config.numerics.optimizer
    if optimizer.name in ("adam", "adamw"):
        return OPTIMIZER_STATES["adam"]
    return OPTIMIZER_STATES["momentum" if optimizer.momentum > 0 else "none"]


def held_memory(
    held: HeldState, plan: ComputePlan, precision: str, states: int, batch_size: Optional[int] = None
) -> MemoryTerms:
    """Bytes of `held` for `plan`'s model, at `batch_size` samples a micro-batch (default: the plan's)."""
    master = plan.params * FP32_BYTES
    if held.gathered_bytes is not None:
        working = held.gathered_bytes
    else:
        working = plan.params * 2.0 if precision in SIXTEEN_BIT else 0.0
    per_sample = plan.activation_bytes_per_sample
    batch = plan.batch_size if batch_size is None else batch_size
    # skipping the reduce-scatter on inner micro-batches (no_sync) keeps the whole unsharded gradient meanwhile
    no_sync = plan.accumulation_steps > 1 and not plan.sync_every_micro_batch
    unsharded = plan.gradient_bytes if held.gradients < 1 and no_sync else 0.0
    return MemoryTerms(
        parameters=master * held.parameters + working,
        gradients=master * held.gradients + unsharded,
        optimizer=master * (states * held.optimizer + held.extra_copies),
        activations=(per_sample or 0.0) * batch,
        buffers=held.buffer_bytes,
        activations_source=plan.activation_source if per_sample is not None else "none",
    )


def policy_memory(policy: Policy, plan: ComputePlan, config: Config, batch_size: Optional[int] = None) -> MemoryTerms:
    """The peak of a bound policy (the largest of its phases', for a policy that switches)."""
    states = optimizer_states(config)
    peaks = [
        held_memory(p.held_state(), plan, config.workload.precision, states, batch_size)
        for p in policy.phase_policies()
    ]
    return max(peaks, key=lambda terms: terms.total)
