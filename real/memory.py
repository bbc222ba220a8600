"""A real worker's predicted peak memory: the simulator's (`sim.memory`) and the real backend's own layout.

A real run trains `numerics.model` (real/session.py), not the workload's model the simulator times, so both
predictions beside the measured peak in `ranks.csv` are made for that model.

`simulated_peak_bytes`: `sim.memory`'s peak for the trained model: the workload's compute plan with the
trained model's parameter count, its gradient buckets scaled in proportion (the real backend maps the
trained model's elements onto the workload's buckets the same way, `sim.numerics.replica.bucket_ranges`), the
numerics batch, and no activation figure. It is what the simulator's model of DDP or FSDP says a rank holds.

`real_peak`: what the real backend itself holds (docs/real.md, "Where a worker's bytes go"), which differs
from DDP and FSDP by implementation choices the simulator does not model:

- one flat fp32 parameter vector and one flat gradient, whole while a step runs, sharded or not: forward and
  backward are one autograd call on the whole vector (real/sharding.py gathers all of it for that call);
- autograd's gradient of that vector: each parameter tensor is a slice of it, and a slice's backward
  (`slice_backward`) hands back a zero-filled vector as long as the whole model, which autograd sums out of
  place into the leaf's gradient as they arrive; a layer hands back its weight's and its bias's at once, so
  four model-length vectors are alive while the second layer's pair is added (the running sum, the pair,
  their sum; three for a one-layer model, one for a single tensor); a zoo model's task takes a leaf per
  parameter instead and concatenates their gradients: two model-length vectors;
- the optimizer is `sim.numerics.optim.FlatOptimizer` (not `torch.optim`): Adam keeps its two fp32 moments
  and an int64 step count per element, and its step on a range of k elements holds six fp32 temporaries of
  k elements at once (the two bias corrections, `lr * m / bias1`, `v.sqrt()`, `bias2.sqrt()` and their
  quotient); SGD one (`lr * buf`), Nesterov two, and a gradient with weight decay added one more;
- no flat gradient bucket: collectives act in place on slices of the flat gradient;
- activations as autograd saves them for the model trained, counted by `real.saved_activations` on one
  batch (plus the largest layer's once more, sim/compute/activations.py's rule for backward).

The peak is the state plus the larger of backward's (autograd's vectors and the activations) and the
optimizer step's temporaries. Not counted: the allocator's and the process's own bookkeeping (Python
objects, gloo's buffers, malloc's caches).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

import torch
from torch.nn import functional as F

from policies.base import Policy
from real.saved_activations import saved_bytes
from sim.compute.activations import SIXTEEN_BIT
from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.config.numerics import OptimizerConfig
from sim.engine.faults import absences_of
from sim.engine.run import bind_policy
from sim.errors import ConfigError
from sim.memory import policy_memory
from sim.numerics.batches import per_worker_batch
from sim.numerics.replica import bucket_ranges
from sim.numerics.tasks import Task

FP32_BYTES = 4  # a real worker keeps its flat parameters and gradient in fp32 (real/session.py)
INT64_BYTES = 8  # FlatOptimizer's Adam step count, one per element


def trained_plan(config: Config, plan: ComputePlan, cluster: Any, elements: int) -> ComputePlan:
    """`plan` resized to a model of `elements` fp32 parameters, at the numerics batch, without activations."""
    assert config.numerics is not None
    scale = elements * FP32_BYTES / plan.gradient_bytes
    return replace(
        plan,
        params=elements,
        gradient_bytes=elements * FP32_BYTES,
        parameter_bytes=elements * FP32_BYTES,
        buckets=tuple(replace(b, nbytes=b.nbytes * scale) for b in plan.buckets),
        batch_size=per_worker_batch(config.numerics.global_batch, cluster.world_size),
        activation_bytes_per_sample=None,
    )  # the buckets' tensor shapes stay the workload's: a policy that factors them (PowerSGD) binds to them


def simulated_peak_bytes(config: Config, index: int, cluster: Any, plan: ComputePlan, elements: int) -> float:
    """`sim.memory`'s peak per worker of policy `index` for the trained model (every worker's is the same); NaN
    where the policy does not bind to the resized plan (a run that trained is not failed for a prediction)."""
    trained = trained_plan(config, plan, cluster, elements)
    absences = absences_of(config, cluster)
    try:
        policy = bind_policy(config.policies[index], index, cluster, trained, config.workload.wire_precision, absences)
    except ConfigError:
        return float("nan")
    return policy_memory(policy, trained, config).total


@dataclass(frozen=True)
class RealPeak:
    """A real worker's peak, by term, in bytes (the module's text says what each holds)."""

    parameters: float  # the flat fp32 vector (and autocast's 16-bit copies)
    gradients: float  # the flat fp32 gradient
    optimizer: float  # FlatOptimizer's state for the elements this rank steps, and a policy's further copies
    activations: float  # what autograd saves for backward, on one batch
    backward: float  # autograd's model-length gradient vectors, alive at once
    step: float  # the optimizer step's temporaries on the largest range stepped at once

    @property
    def state(self) -> float:
        return self.parameters + self.gradients + self.optimizer

    @property
    def total(self) -> float:
        return self.state + max(self.backward + self.activations, self.step)

    def terms(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def state_bytes_per_element(cfg: OptimizerConfig) -> int:
    """FlatOptimizer's state per element: Adam/AdamW's two fp32 moments and int64 step count, SGD's momentum."""
    if cfg.name in ("adam", "adamw"):
        return 2 * FP32_BYTES + INT64_BYTES
    return FP32_BYTES if cfg.momentum > 0 else 0


def step_temporaries(cfg: OptimizerConfig) -> int:
    """fp32 temporaries per element alive at once in FlatOptimizer's step (the module's text)."""
    if cfg.name in ("adam", "adamw"):
        temporaries = 6
    else:
        temporaries = 2 if cfg.momentum > 0 and cfg.nesterov else 1
    decayed_gradient = cfg.weight_decay > 0 and cfg.name != "adamw"  # AdamW decays the parameter in place
    return temporaries + int(decayed_gradient)


def gradient_vectors(task: Any) -> int:
    """Model-length vectors autograd and the task hold at once for the gradient (the module's text): a numerics
    model's flat leaf cut into tensors; a zoo model (`ZooTask`) has a leaf per parameter, whose gradients
    (one vector in all) are then concatenated into a second."""
    if not isinstance(task, Task):
        return 2
    tensors = len(task.tensor_sizes)
    return 1 if tensors <= 1 else 3 if tensors == 2 else 4


def activation_bytes(task: Any, batch: int, precision: str) -> Optional[float]:
    """What autograd saves for backward on one batch of the trained model, plus its largest layer's once more
    (`real.saved_activations`, one layer per module that owns parameters); None for a model this does not
    count (a zoo model, whose loss is its own)."""
    if not isinstance(task, Task):
        return None
    module = task.module
    layout = [
        (owner or "model", [f"{owner}.{name}" if owner else name for name, _ in sub.named_parameters(recurse=False)])
        for owner, sub in module.named_modules()
        if any(True for _ in sub.parameters(recurse=False))
    ]
    # copies, as the worker's indexed batch is: a slice would count the whole data set's storage
    x, y = task.data.x_train[:batch].clone(), task.data.y_train[:batch].clone()
    per_layer = saved_bytes(module, [x], y, F.cross_entropy, layout, precision, torch.device("cpu"))
    return float(sum(per_layer) + max(per_layer, default=0))


def real_peak(
    policy: Policy,
    optimizer: OptimizerConfig,
    task: Any,
    bucket_bytes: Sequence[float],
    batch: int,
    precision: str = "fp32",
) -> RealPeak:
    """The real backend's peak per worker of bound `policy` for `task`'s model (`task.size` elements), its
    elements mapped onto buckets of `bucket_bytes`, at `batch` samples a step."""
    n = task.size
    held = policy.held_state()  # the shares real/sharding.py keeps between steps; the optimizer's stays
    largest = max((b - a for a, b in bucket_ranges(n, bucket_bytes)), default=n)
    stepped = math.ceil(largest * held.optimizer)  # a sharded optimizer steps its slice of a bucket
    activations = activation_bytes(task, batch, precision)
    return RealPeak(
        parameters=FP32_BYTES * n + (2.0 * n if precision in SIXTEEN_BIT else 0.0),
        gradients=FP32_BYTES * n,
        optimizer=state_bytes_per_element(optimizer) * n * held.optimizer + FP32_BYTES * n * held.extra_copies,
        activations=activations or 0.0,
        backward=FP32_BYTES * n * gradient_vectors(task),
        step=FP32_BYTES * stepped * step_temporaries(optimizer),
    )
