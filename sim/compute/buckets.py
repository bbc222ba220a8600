"""A model's gradients as DDP's reducer groups them: the layers of a workload (a zoo model, or
synthetic layers), which of them are sparse embedding tables, and the buckets backward closes.

Backward runs through the layers in reverse; each layer's gradients join the open bucket, and a
bucket closes (becomes ready for communication) once it holds at least `bucket_mb`, as DDP's
reducer does. The last bucket closes when backward ends. An embedding table whose gradient is
sparse (`workload.sparsity`) gets a bucket of its own, as DDP gives every sparse gradient.
Each bucket's tensor shapes (`bucket_shapes`) follow from its layers' (`Layer.shapes`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from sim.catalog.zoo import Layer, ModelSpec, get_model
from sim.catalog.zoo.llm import decoder_model
from sim.catalog.zoo.spec import Shape
from sim.config import WorkloadConfig

MB = 1e6
BYTES_PER_VALUE = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}  # one value of each precision
MASTER_BYTES = 4  # one parameter of the fp32 master weights, which every precision keeps


def wire_bytes(cfg: WorkloadConfig) -> int:
    """Bytes one gradient value takes on the wire (`workload.gradient_precision`, auto resolved)."""
    return BYTES_PER_VALUE[cfg.wire_precision]


@dataclass(frozen=True)
class GradientBucket:
    nbytes: float
    backward_s: float  # backward compute between the previous bucket becoming ready and this one
    forward_s: float  # forward compute of the same layers
    layers: tuple[int, ...] = ()  # indices into the model's layers, in the order backward produced them


def model_spec(cfg: WorkloadConfig) -> ModelSpec:
    """The zoo model `cfg.model`, the decoder-only model `workload.transformer` describes
    (sim.catalog.zoo.llm), or the synthetic one: `synthetic_layers` equal layers of v values
    (the gradient's values, rounded per layer), each one tensor as near square as v allows, rows =
    isqrt(v) by cols = v // rows, plus a 1-D tensor of the v - rows * cols values left over when
    there are any. With `sparsity.lookups` each layer is an embedding table instead: v // embedding_dim
    rows of embedding_dim values (sim.compute.sparsity), plus the values left over, likewise."""
    if cfg.model == "transformer":
        assert cfg.transformer is not None  # the config validator ensures it
        arch = cfg.transformer.architecture()
        source = f"workload.transformer ({cfg.transformer.hf_config or 'its numbers'})"
        return decoder_model("transformer", arch, source)
    if cfg.model != "synthetic":
        return get_model(cfg.model)
    assert cfg.gradient_mb is not None and cfg.compute_ms is not None  # the config validator ensures it
    n = cfg.synthetic_layers
    values = int(round(cfg.gradient_mb * MB / wire_bytes(cfg) / n))
    dim = cfg.sparsity.embedding_dim if cfg.sparsity.lookups is not None else 0
    shapes = matrix_shapes(values, values // dim if dim else math.isqrt(values))
    # FLOPs are placeholders; synthetic compute time comes from compute_ms directly.
    layers = tuple(Layer(f"layer{i}", values, 1.0, shapes=shapes) for i in range(n))
    return ModelSpec("synthetic", layers, source="synthetic workload from gradient_mb and compute_ms")


def matrix_shapes(values: int, rows: int) -> tuple[Shape, ...]:
    """`values` as one (rows, values // rows) matrix and a 1-D tensor of what is left over (if any);
    a single 1-D tensor when `rows` is 0, and nothing for no values."""
    if rows <= 0:
        return ((values,),) if values else ()
    cols = values // rows
    rest = values - rows * cols
    return ((rows, cols),) + (((rest,),) if rest else ())


def bucket_shapes(spec: ModelSpec, buckets: Sequence[GradientBucket]) -> tuple[tuple[Shape, ...], ...]:
    """Per bucket, its tensors' shapes: its layers in the order backward produced them (as DDP lays
    them in its flat bucket), each layer's tensors in its module's order (`Layer.shapes`); () when
    a layer of the model has unknown shapes, so no bucket's are known."""
    if not all(layer.shaped for layer in spec.layers):
        return ()
    return tuple(tuple(shape for index in bucket.layers for shape in spec.layers[index].shapes) for bucket in buckets)


def sparse_table(layer: Layer, cfg: WorkloadConfig) -> bool:
    """Is `layer` an embedding table whose gradient is sparse under `cfg.sparsity`?"""
    sp = cfg.sparsity
    if sp.lookups is not None:  # a synthetic workload of tables
        return True
    return layer.lookup is not None and sp.embeddings and layer.params > sp.dense_below


def cut_buckets(
    cfg: WorkloadConfig,
    spec: ModelSpec,
    grad_bytes: Sequence[float],
    forward: Sequence[float],
    backward: Sequence[float],
) -> list[GradientBucket]:
    """The buckets backward closes, in the order it closes them, from each layer's gradient bytes
    and its forward and backward seconds."""
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
    return buckets
