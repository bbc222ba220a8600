"""From a model and a GPU to one iteration's compute timeline and gradient buckets.

Backward runs through the layers in reverse; each layer's gradients join the open bucket, and a
bucket closes (becomes ready for communication) once it holds at least `bucket_mb`, as DDP's
reducer does. The last bucket closes when backward ends. Backward costs twice the forward FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import WorkloadConfig
from sim.gpus import GpuSpec
from sim.zoo import Layer, ModelSpec, get_model

MB = 1e6
BYTES_PER_VALUE = {"fp32": 4, "fp16": 2}


@dataclass(frozen=True)
class GradientBucket:
    nbytes: float
    backward_s: float  # backward compute between the previous bucket becoming ready and this one


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


def compute_plan(cfg: WorkloadConfig, gpu: GpuSpec) -> ComputePlan:
    """The per-iteration timeline of `cfg` on `gpu`."""
    spec = model_spec(cfg)
    width = BYTES_PER_VALUE[cfg.precision]
    if cfg.model == "synthetic":
        assert cfg.compute_ms is not None
        total = cfg.compute_ms * 1e-3
        flops_scale = total / (3.0 * spec.forward_flops)  # seconds per forward FLOP
        grad_bytes = [cfg.gradient_mb * MB / len(spec.layers)] * len(spec.layers)  # type: ignore[operator]
    else:
        # seconds per per-sample FLOP for the whole batch
        flops_scale = cfg.batch_size * gpu.compute_seconds(1.0, cfg.precision, cfg.efficiency)
        grad_bytes = [layer.params * width for layer in spec.layers]
    forward_s = spec.forward_flops * flops_scale
    buckets: list[GradientBucket] = []
    cap = cfg.bucket_mb * MB
    open_bytes, open_s = 0.0, 0.0
    for layer, nbytes in zip(reversed(spec.layers), reversed(grad_bytes)):
        open_bytes += nbytes
        open_s += 2.0 * layer.forward_flops * flops_scale
        if open_bytes >= cap:
            buckets.append(GradientBucket(open_bytes, open_s))
            open_bytes, open_s = 0.0, 0.0
    if open_bytes > 0 or not buckets:
        buckets.append(GradientBucket(open_bytes, open_s))
    total = float(sum(grad_bytes))
    return ComputePlan(spec.name, cfg.batch_size, forward_s, tuple(buckets), spec.params, total, total)
