"""From a model and a GPU to one iteration's compute timeline and gradient buckets.

Backward runs through the layers in reverse; each layer's gradients join the open bucket, and a
bucket closes (becomes ready for communication) once it holds at least `bucket_mb`, as DDP's
reducer does. The last bucket closes when backward ends. An embedding table whose gradient is
sparse (`workload.sparsity`) gets a bucket of its own, as DDP gives every sparse gradient. Backward
time comes from the default compute model (sim/roofline.py: per op, the longer of arithmetic and
memory traffic, plus kernel launches), or from FLOPs at a given fraction of peak
(`workload.efficiency`, backward twice the forward), or from a measured profile
(`workload.profile`, sim.profile) that gives every layer's forward and backward seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sim.config import WorkloadConfig
from sim.gpus import GpuSpec
from sim.profile import check_profile, read_profile
from sim.roofline import model_seconds
from sim.zoo import Layer, ModelSpec, get_model

if TYPE_CHECKING:
    from sim.sparsity import BucketLayout

MB = 1e6
BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # gradient values on the wire


@dataclass(frozen=True)
class GradientBucket:
    nbytes: float
    backward_s: float  # backward compute between the previous bucket becoming ready and this one
    forward_s: float  # forward compute of the same layers
    layers: tuple[int, ...] = ()  # indices into the model's layers, in the order backward produced them


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
    layouts: tuple[BucketLayout, ...] = ()  # per bucket: which rows are non-zero (sim.sparsity)

    @property
    def backward_s(self) -> float:
        return sum(b.backward_s for b in self.buckets)

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s


def model_spec(cfg: WorkloadConfig) -> ModelSpec:
    if cfg.model != "synthetic":
        return get_model(cfg.model)
    assert cfg.gradient_mb is not None and cfg.compute_ms is not None  # the config validator ensures it
    n = cfg.synthetic_layers
    values = cfg.gradient_mb * MB / BYTES_PER_VALUE[cfg.precision] / n
    # FLOPs are placeholders; synthetic compute time comes from compute_ms directly.
    layers = tuple(Layer(f"layer{i}", int(round(values)), 1.0) for i in range(n))
    return ModelSpec("synthetic", layers, source="synthetic workload from gradient_mb and compute_ms")


def sparse_table(layer: Layer, cfg: WorkloadConfig) -> bool:
    """Is `layer` an embedding table whose gradient is sparse under `cfg.sparsity`?"""
    sp = cfg.sparsity
    if sp.lookups is not None:  # a synthetic workload of tables
        return True
    return layer.lookup is not None and sp.embeddings and layer.params > sp.dense_below


def layer_seconds(cfg: WorkloadConfig, spec: ModelSpec, gpu: GpuSpec) -> tuple[float, list[float], list[float]]:
    """The forward pass's seconds, and each layer's forward and backward seconds: measured
    (`profile`), spread over FLOPs (a synthetic model's `compute_ms`, or a given `efficiency`, with
    backward twice the forward), or else the default compute model (sim/roofline.py)."""
    if cfg.profile is not None:  # measured times replace any estimate, layer by layer
        profile = read_profile(cfg.profile)
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
    forward, backward = model_seconds(gpu, gpu.costs, spec.layers, cfg.batch_size, cfg.precision)
    return sum(forward), forward, backward


def compute_plan(cfg: WorkloadConfig, gpu: GpuSpec) -> ComputePlan:
    """The per-iteration timeline of `cfg` on `gpu`."""
    spec = model_spec(cfg)
    if cfg.model == "synthetic":
        grad_bytes = [cfg.gradient_mb * MB / len(spec.layers)] * len(spec.layers)  # type: ignore[operator]
    else:
        grad_bytes = [layer.params * BYTES_PER_VALUE[cfg.precision] for layer in spec.layers]
    forward_s, forward, backward = layer_seconds(cfg, spec, gpu)
    buckets: list[GradientBucket] = []
    cap = cfg.bucket_mb * MB
    open_bytes, open_s, open_f, members = 0.0, 0.0, 0.0, []
    for index in reversed(range(len(spec.layers))):
        if sparse_table(spec.layers[index], cfg) and members:  # close the open bucket first
            buckets.append(GradientBucket(open_bytes, open_s, open_f, tuple(members)))
            open_bytes, open_s, open_f, members = 0.0, 0.0, 0.0, []
        open_bytes += grad_bytes[index]
        open_s += backward[index]
        open_f += forward[index]
        members.append(index)
        if open_bytes >= cap or sparse_table(spec.layers[index], cfg):
            buckets.append(GradientBucket(open_bytes, open_s, open_f, tuple(members)))
            open_bytes, open_s, open_f, members = 0.0, 0.0, 0.0, []
    if open_bytes > 0 or not buckets:
        buckets.append(GradientBucket(open_bytes, open_s, open_f, tuple(members)))
    total = float(sum(grad_bytes))
    from sim.sparsity import bucket_layouts  # it reads the buckets cut here

    layouts = bucket_layouts(cfg, spec, buckets)
    return ComputePlan(spec.name, cfg.batch_size, forward_s, tuple(buckets), spec.params, total, total, layouts)
