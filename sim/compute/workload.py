"""From a model and a GPU to one iteration's compute timeline and gradient buckets (cut as
`sim.compute.buckets` says), with each sparse bucket's row layout (`sim.compute.sparsity`). Backward
time comes from the default compute model (sim/compute/roofline.py: per op, about the longer of
arithmetic and memory traffic, plus kernel launches, issued as `workload.implementation` says), or
from FLOPs at a given fraction of peak (`workload.efficiency`, backward twice the forward), or from a measured profile
(`workload.profile`, sim.compute.profile) that gives every layer's forward and backward seconds.
The profile of a user's own module (`workload.model: profiled`) gives its layers as well: their
tensors' shapes, so their gradient bytes at the workload's precision, in the order it measured them,
and, where it measured them, the activations each saved for backward (so the peak memory's activations).
The optimizer step (`workload.optimizer_ms`, once every `accumulation_steps` iterations) is apart from
forward and backward; at 0 it is part of their time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from sim.catalog.gpus import GpuSpec
from sim.catalog.zoo import ModelSpec
from sim.catalog.zoo.spec import Layer, Shape
from sim.compute.activations import activation_bytes_per_sample, activation_type_bytes
from sim.compute.buckets import MASTER_BYTES, MB, GradientBucket, bucket_shapes, cut_buckets, model_spec, wire_bytes
from sim.compute.profile import ComputeProfile, check_profile, check_run, read_profile
from sim.compute.roofline import model_seconds
from sim.compute.sparsity import BucketLayout, bucket_layouts
from sim.config import WorkloadConfig
from sim.config.schema import PROFILED
from sim.errors import ConfigError


@dataclass(frozen=True)
class ComputePlan:
    """One iteration of one worker at nominal speed."""

    model: str
    batch_size: int
    forward_s: float
    buckets: tuple[GradientBucket, ...]
    params: int
    gradient_bytes: float
    parameter_bytes: float  # one replica's parameters at training precision
    layouts: tuple[BucketLayout, ...] = ()  # per bucket: which rows are non-zero (sim.compute.sparsity)
    overlap_backward: bool = True  # False: buckets go to the policy only once backward ends
    accumulation_steps: int = 1  # iterations (micro-batches) per optimizer step
    optimizer_s: float = 0.0  # the optimizer step, after every accumulation_steps-th iteration's communication
    # per bucket, its tensors' shapes (sim.compute.buckets.bucket_shapes); (): not known
    bucket_shapes: tuple[tuple[Shape, ...], ...] = ()
    # peak activation bytes per sample of a micro-batch (sim.compute.activations); None: the model gives no
    # activation sizes (a synthetic gradient, a profiled module whose profile has no saved bytes)
    activation_bytes_per_sample: Optional[float] = None
    # where those sizes come from: counted (the model's builder, every layer), measured (a profile), estimated
    # (half of what each op moves, for layers no builder counted), none
    activation_source: str = "none"

    sync_every_micro_batch: bool = True  # False: only the micro-batch before the optimizer step communicates

    def updates_after(self, step: int) -> bool:
        """Does iteration `step` (0-based) end with the optimizer step?"""
        return self.optimizer_s > 0 and (step + 1) % self.accumulation_steps == 0

    def syncs_gradients(self, step: int) -> bool:
        """Does iteration `step` hand its gradient to the policy (`workload.accumulation_sync`)?"""
        return self.sync_every_micro_batch or (step + 1) % self.accumulation_steps == 0

    @property
    def backward_s(self) -> float:
        return sum(b.backward_s for b in self.buckets)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s


def profiled_spec(profile: ComputeProfile, batch_size: int, precision: str) -> ModelSpec:
    """The model a user module's profile stands for (`workload.model: profiled`): a layer per profiled
    layer, in its order, with its tensors' shapes and, where measured, the activations it saved for backward.
    FLOPs are unknown and unused: the profile gives the times."""
    if not profile.shaped:
        raise ConfigError(
            f"workload.profile: a profile of the zoo model {profile.model!r} records no layer shapes, so it cannot "
            f"stand for the model; set workload.model: {profile.model}, or profile your own module "
            "with `syncsim profile module:factory` (docs/profiles.md)"
        )
    check_run(profile, batch_size, precision)
    # measured bytes at the workload's batch and precision (check_run), as values of the training type per
    # sample: `activation_bytes_per_sample` multiplies them back by that type's size, exactly these bytes
    per_value = batch_size * activation_type_bytes(precision)
    layers = tuple(
        Layer(
            t.name,
            t.params,
            0.0,
            shapes=t.shapes or (),
            saved=None if t.saved_bytes is None else t.saved_bytes / per_value,
        )
        for t in profile.layers
    )
    return ModelSpec(profile.model, layers, source=f"profiled on {profile.device}")


def layer_seconds(
    cfg: WorkloadConfig, spec: ModelSpec, gpu: GpuSpec, profile: Optional[ComputeProfile] = None
) -> tuple[float, list[float], list[float]]:
    """The forward pass's seconds, and each layer's forward and backward seconds: measured
    (`profile`, read from `cfg.profile` unless given), spread over FLOPs (a synthetic model's `compute_ms`,
    or a given `efficiency`, with backward twice the forward), or else the default compute model
    (sim/compute/roofline.py)."""
    if cfg.profile is not None:  # measured times replace any estimate, layer by layer
        profile = profile or read_profile(cfg.profile)
        if cfg.model != PROFILED:  # a profiled model's layers are the profile's own
            check_profile(profile, spec.name, [layer.name for layer in spec.layers], cfg.batch_size, cfg.precision)
        return profile.forward_s, [t.forward_s for t in profile.layers], [t.backward_s for t in profile.layers]
    if cfg.model == "synthetic" or cfg.efficiency is not None:
        if cfg.model == "synthetic":
            assert cfg.compute_ms is not None
            scale = cfg.compute_ms * 1e-3 / (3.0 * spec.forward_flops)  # seconds per forward FLOP
        else:  # seconds per per-sample FLOP for the whole batch
            scale = cfg.batch_size * gpu.compute_seconds(1.0, cfg.precision, cfg.efficiency)
        forward = [layer.forward_flops * scale for layer in spec.layers]
        return spec.forward_flops * scale, forward, [2.0 * f for f in forward]
    forward, backward = model_seconds(gpu, gpu.costs, spec.layers, cfg.batch_size, cfg.precision, cfg.implementation)
    return sum(forward), forward, backward


def compute_plan(cfg: WorkloadConfig, gpu: GpuSpec) -> ComputePlan:
    """The per-iteration timeline of `cfg` on `gpu`."""
    profile = read_profile(cfg.profile) if cfg.profile is not None else None
    spec = (
        profiled_spec(profile, cfg.batch_size, cfg.precision)
        if profile is not None and cfg.model == PROFILED
        else model_spec(cfg)
    )
    if cfg.model == "synthetic":
        grad_bytes = [cfg.gradient_mb * MB / len(spec.layers)] * len(spec.layers)  # type: ignore[operator]
    else:
        grad_bytes = [layer.params * wire_bytes(cfg) for layer in spec.layers]
    forward_s, forward, backward = layer_seconds(cfg, spec, gpu, profile)
    if cfg.activation_checkpointing == "selective":  # a block's layers whose output was not kept run again
        if not any(layer.block >= 0 for layer in spec.layers):
            raise ConfigError(
                f"workload.activation_checkpointing: selective keeps chosen ops of each transformer block, and "
                f"{spec.name} has none; allowed for it: true, false (selective: model transformer, llama3_8b, ...)"
            )
        again = [layer.block >= 0 and layer.selective_recompute for layer in spec.layers]
        backward = [b + f * a for b, f, a in zip(backward, forward, again)]
    elif cfg.activation_checkpointing:  # each layer's backward first runs its forward again
        backward = [b + f for b, f in zip(backward, forward)]
    buckets = cut_buckets(cfg, spec, grad_bytes, forward, backward)
    total = float(sum(grad_bytes))
    # parameters are the fp32 master weights in every precision (autocast computes in 16 bits from
    # them), so parameter averaging moves 4 bytes a value whatever type gradients travel in
    if cfg.model == "synthetic":
        parameter_bytes = total * MASTER_BYTES / wire_bytes(cfg)
    else:
        parameter_bytes = float(spec.params * MASTER_BYTES)
    layouts = bucket_layouts(cfg, spec, buckets)
    # no activation sizes: a gradient size, or a profile that measured no saved bytes (written before them)
    unsized = cfg.model == "synthetic" or (cfg.model == PROFILED and (profile is None or profile.saved_bytes is None))
    return ComputePlan(
        spec.name,
        cfg.batch_size,
        forward_s,
        tuple(buckets),
        spec.params,
        total,
        parameter_bytes,
        layouts,
        cfg.overlap_backward,
        cfg.accumulation_steps,
        cfg.optimizer_ms * 1e-3,
        bucket_shapes(spec, buckets),
        None if unsized else activation_bytes_per_sample(spec, cfg.precision, cfg.activation_checkpointing),
        activation_source=activation_source(cfg, spec, unsized),
        sync_every_micro_batch=cfg.accumulation_sync == "every",
    )


def activation_source(cfg: WorkloadConfig, spec: ModelSpec, unsized: bool) -> str:
    """Where a plan's activation sizes come from (`ComputePlan.activation_source`)."""
    if unsized:
        return "none"
    if cfg.model == PROFILED:
        return "measured"
    return "counted" if all(layer.saved is not None for layer in spec.layers) else "estimated"
