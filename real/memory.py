"""A real worker's predicted peak memory: the simulator's (`sim.memory`) and the real backend's own layout.

A real run trains `numerics.model` (real/session.py), not the workload's model the simulator times, so both
predictions beside the measured peak in `ranks.csv` are made for that model.

`simulated_peak_bytes`: `sim.memory`'s peak for the trained model: the workload's compute plan with the
trained model's parameter count, its gradient buckets scaled in proportion (the real backend maps the
trained model's elements onto the workload's buckets the same way, `sim.numerics.replica.bucket_ranges`), the
numerics batch, and the trained model's activations where its architecture says what they are: those of
`numerics.model: transformer`, counted from `workload.transformer` at the numerics sequence length (no
checkpointing: the real worker's module checkpoints nothing); for the other models none. It is what the
simulator's model of DDP or FSDP says a rank holds.

`real_peak`: what the real backend itself holds (docs/real.md, "Where a worker's bytes go"), which differs
from DDP and FSDP by implementation choices the simulator does not model:

- one flat fp32 parameter vector and one flat gradient, whole while a step runs, sharded or not: forward and
  backward are one autograd call on the whole vector (real/sharding.py gathers all of it for that call);
- no flat gradient bucket: collectives act in place on slices of the flat gradient;
- backward: a leaf per parameter tensor, whose gradient autograd adds in place into its slice of the flat
  gradient (`sim.numerics.tasks.accumulate_gradient`), so beyond the activations' own gradients the transient
  is one layer's parameter gradients, alive until they are added;
- the optimizer is `sim.numerics.optim.FlatOptimizer` (not `torch.optim`): Adam keeps its two fp32 moments
  (and a step count per range stepped, a few bytes), and its step on a range of k elements holds at most 16
  bytes an element at once (the range's counts as int64, made for the step, and the two fp32 bias corrections;
  the rest of the update runs in place); SGD one fp32 temporary (`lr * buf`), Nesterov two, and a gradient
  with weight decay added one fp32 more;
- activations as autograd saves them for the model trained, counted by `real.saved_activations` on one
  batch, plus backward's transient by sim/compute/activations.py's rule (the largest layer's saved bytes, or
  the cross-entropy's two fp32 logit-sized gradients where they are more): for the
  numerics models and the decoder (`numerics.model: transformer`); not for the other zoo models.

The peak is the state plus the larger of backward's (its transient and the activations) and the optimizer
step's temporaries. Not counted: the allocator's and the process's own bookkeeping (Python objects, gloo's
buffers, malloc's caches).
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
from sim.catalog.zoo import get_model
from sim.catalog.zoo.llm import decoder_model
from sim.compute.activations import SIXTEEN_BIT, activation_bytes_per_sample
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
from sim.numerics.zoo_nets import flat_layout
from sim.numerics.zoo_task import DECODER, numerics_architecture

FP32_BYTES = 4  # a real worker keeps its flat parameters and gradient in fp32 (real/session.py)


def trained_activations(config: Config) -> Optional[float]:
    """`sim.memory`'s activation bytes per sample of the trained model: the decoder's (`numerics.model:
    transformer`), counted from its architecture at the numerics sequence length without checkpointing; None
    for the other models."""
    assert config.numerics is not None
    transformer = config.workload.transformer
    if config.numerics.model != DECODER or transformer is None:
        return None
    arch = numerics_architecture(transformer.architecture(), config.numerics)
    spec = decoder_model(DECODER, arch, "workload.transformer at numerics.zoo.sequence")
    return activation_bytes_per_sample(spec, config.workload.precision, False)


def trained_plan(config: Config, plan: ComputePlan, cluster: Any, elements: int) -> ComputePlan:
    """`plan` resized to a model of `elements` fp32 parameters, at the numerics batch, with the trained model's
    activations (`trained_activations`)."""
    assert config.numerics is not None
    scale = elements * FP32_BYTES / plan.gradient_bytes
    activations = trained_activations(config)
    return replace(
        plan,
        params=elements,
        gradient_bytes=elements * FP32_BYTES,
        parameter_bytes=elements * FP32_BYTES,
        buckets=tuple(replace(b, nbytes=b.nbytes * scale) for b in plan.buckets),
        batch_size=per_worker_batch(config.numerics.global_batch, cluster.world_size),
        activation_bytes_per_sample=activations,
        activation_source="counted" if activations is not None else "none",
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
    backward: float  # one layer's parameter gradients, alive until added into the flat gradient
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
    """FlatOptimizer's state per element: Adam/AdamW's two fp32 moments, SGD's momentum (Adam's step counts are
    one per range stepped: not per element)."""
    if cfg.name in ("adam", "adamw"):
        return 2 * FP32_BYTES
    return FP32_BYTES if cfg.momentum > 0 else 0


def step_bytes(cfg: OptimizerConfig) -> int:
    """Bytes per element of temporaries alive at once in FlatOptimizer's step (the module's text)."""
    if cfg.name in ("adam", "adamw"):
        temporaries = 8 + 2 * FP32_BYTES  # the int64 counts and the two bias corrections
    else:
        temporaries = FP32_BYTES * (2 if cfg.momentum > 0 and cfg.nesterov else 1)
    decayed_gradient = cfg.weight_decay > 0 and cfg.name != "adamw"  # AdamW decays the parameter in place
    return temporaries + FP32_BYTES * int(decayed_gradient)


def gradient_transient(task: Any) -> int:
    """Elements of the largest layer's parameter gradients, which autograd hands back together before they are
    added into the flat gradient (the module's text): a numerics model's layer is a weight and its bias; a zoo
    model's, a zoo layer's tensors."""
    if isinstance(task, Task):
        sizes = task.tensor_sizes  # Linear and Conv2d layers: weight, bias
        return max((sum(sizes[i : i + 2]) for i in range(0, len(sizes), 2)), default=0)
    return max((sum(int(params[n].numel()) for n in names) for params, (_, names) in _zoo_layers(task)), default=0)


def _zoo_layers(task: Any) -> list[tuple[dict[str, torch.Tensor], tuple[str, list[str]]]]:
    params = dict(task.module.named_parameters())
    return [(params, layer) for layer in flat_layout(task.module, zoo_spec(task))]


def zoo_spec(task: Any) -> Any:
    """The zoo model a `ZooTask` trains (the decoder's own for `numerics.model: transformer`)."""
    return getattr(task, "spec", None) or get_model(task.name)


def activation_bytes(task: Any, batch: int, precision: str) -> Optional[float]:
    """What autograd saves for backward on one batch of the trained model (`real.saved_activations`: one layer
    per module that owns parameters, or the decoder's zoo layers), plus backward's transient as
    sim/compute/activations.py takes it: the larger of the largest layer's saved bytes and the cross-entropy's two
    fp32 gradients of the logits' size (with respect to the log-probabilities, then to the logits); None for a
    model this does not count (a zoo model other than the decoder)."""
    if isinstance(task, Task):
        module, loss = task.module, F.cross_entropy
        outputs = task.data.classes  # logits a sample
        layout = [
            (owner or "model", [f"{owner}.{n}" if owner else n for n, _ in sub.named_parameters(recurse=False)])
            for owner, sub in module.named_modules()
            if any(True for _ in sub.parameters(recurse=False))
        ]
    elif getattr(task, "architecture", None) is not None:  # the decoder: its zoo layers
        module, loss = task.module, task.loss
        layout = flat_layout(module, task.spec)
        outputs = task.architecture.vocab * task.cfg.zoo.sequence
    else:
        return None
    # copies, as the worker's indexed batch is: a slice would count the whole data set's storage
    x, y = task.data.x_train[:batch].clone(), task.data.y_train[:batch].clone()
    per_layer = saved_bytes(module, [x], y, loss, layout, precision, torch.device("cpu"))
    transient = max(max(per_layer, default=0), 2 * FP32_BYTES * outputs * len(y))
    return float(sum(per_layer) + transient)


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
        backward=FP32_BYTES * gradient_transient(task),
        step=stepped * step_bytes(optimizer),
    )
