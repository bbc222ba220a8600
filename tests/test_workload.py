"""Workloads: DDP-style buckets, FLOPs to seconds, synthetic models, jitter."""

from __future__ import annotations

import numpy as np
import pytest

from sim.catalog.gpus import get_gpu
from sim.catalog.zoo import get_model
from sim.compute.roofline import model_seconds
from sim.compute.workload import compute_plan
from sim.config import WorkloadConfig

V100 = get_gpu("V100")


def test_resnet50_buckets_follow_reverse_layers_and_the_cap() -> None:
    plan = compute_plan(WorkloadConfig(model="resnet50", batch_size=64), V100)
    spec = get_model("resnet50")
    assert plan.gradient_bytes == spec.params * 4
    assert sum(b.nbytes for b in plan.buckets) == pytest.approx(spec.params * 4)
    assert all(b.nbytes >= 25e6 for b in plan.buckets[:-1])
    # a bucket closes at the first layer that reaches the cap: without that layer it was below it
    layers = [layer.params * 4 for layer in reversed(spec.layers)]
    edges, total = [], 0.0
    for b in plan.buckets:
        total += b.nbytes
        edges.append(total)
    cumulative = np.cumsum(layers)
    for edge in edges[:-1]:
        i = int(np.searchsorted(cumulative, edge - 1e-6))
        start = edges[edges.index(edge) - 1] if edges.index(edge) else 0.0
        assert cumulative[i] - layers[i] - start < 25e6


def test_compute_time_is_the_roofline_model_layer_by_layer() -> None:
    plan = compute_plan(WorkloadConfig(model="bert_large", batch_size=16), V100)
    forward, backward = model_seconds(V100, V100.costs, get_model("bert_large").layers, 16, "fp32")
    assert plan.forward_s == pytest.approx(sum(forward), rel=1e-12)
    assert plan.backward_s == pytest.approx(sum(backward), rel=1e-12)
    assert sum(b.forward_s for b in plan.buckets) == pytest.approx(sum(forward), rel=1e-12)


def test_activation_checkpointing_adds_each_layers_forward_to_its_backward() -> None:
    """Recomputing every layer's forward in backward: backward = the roofline's backward + its forward, bucket
    by bucket; forward and the buckets' bytes are unchanged."""
    plain = compute_plan(WorkloadConfig(model="bert_large", batch_size=16), V100)
    again = compute_plan(WorkloadConfig(model="bert_large", batch_size=16, activation_checkpointing=True), V100)
    forward, backward = model_seconds(V100, V100.costs, get_model("bert_large").layers, 16, "fp32")
    assert again.forward_s == plain.forward_s
    assert again.backward_s == pytest.approx(sum(backward) + sum(forward), rel=1e-12)
    for a, b in zip(again.buckets, plain.buckets, strict=True):
        assert a.nbytes == b.nbytes
        assert a.backward_s == pytest.approx(b.backward_s + b.forward_s, rel=1e-12)


def test_a_given_efficiency_is_flops_over_that_fraction_of_peak() -> None:
    plan = compute_plan(WorkloadConfig(model="bert_large", batch_size=16, efficiency=0.5), V100)
    per_flop = 16 / (V100.fp32_tflops * 1e12 * 0.5)
    assert plan.forward_s == pytest.approx(get_model("bert_large").forward_flops * per_flop, rel=1e-9)
    assert plan.backward_s == pytest.approx(2 * plan.forward_s, rel=1e-9)


def test_fp16_halves_gradients_and_uses_tensor_cores() -> None:
    fp32 = compute_plan(WorkloadConfig(model="resnet50", batch_size=64, efficiency=0.5), V100)
    fp16 = compute_plan(WorkloadConfig(model="resnet50", batch_size=64, precision="fp16", efficiency=0.5), V100)
    assert fp16.gradient_bytes == fp32.gradient_bytes / 2
    assert fp32.compute_s / fp16.compute_s == pytest.approx(V100.fp16_tflops / V100.fp32_tflops, rel=1e-9)
    default32 = compute_plan(WorkloadConfig(model="resnet50", batch_size=64), V100)
    default16 = compute_plan(WorkloadConfig(model="resnet50", batch_size=64, precision="fp16"), V100)
    assert default16.compute_s < default32.compute_s


def test_gradient_precision_sets_the_bytes_gradients_travel_in() -> None:
    """auto: 16-bit gradients under fp16 and bf16; fp32 (DDP's default under autocast) doubles the
    bytes and every sparse value's width; parameters are the fp32 master weights in every precision."""
    spec = get_model("deepfm")

    def plan(**kw: str) -> object:
        return compute_plan(WorkloadConfig(model="deepfm", batch_size=64, efficiency=0.5, **kw), V100)

    auto, wide = plan(precision="fp16"), plan(precision="fp16", gradient_precision="fp32")
    narrow = plan(precision="fp32", gradient_precision="bf16")
    assert auto.gradient_bytes == spec.params * 2 and narrow.gradient_bytes == spec.params * 2
    assert wide.gradient_bytes == spec.params * 4
    assert sum(b.nbytes for b in wide.buckets) == pytest.approx(spec.params * 4)
    assert {layout.value_bytes for layout in wide.layouts} == {4}
    assert {layout.value_bytes for layout in auto.layouts} == {2}
    assert auto.parameter_bytes == wide.parameter_bytes == narrow.parameter_bytes == spec.params * 4
    assert wide.compute_s == auto.compute_s
    synthetic = WorkloadConfig(
        model="synthetic", gradient_mb=8, compute_ms=9, precision="fp16", gradient_precision="fp32"
    )
    assert compute_plan(synthetic, V100).gradient_bytes == pytest.approx(8e6)  # gradient_mb is on the wire


def test_efficiency_override() -> None:
    base = compute_plan(WorkloadConfig(model="vgg16", batch_size=8, efficiency=0.5), V100)
    half = compute_plan(WorkloadConfig(model="vgg16", batch_size=8, efficiency=0.25), V100)
    assert half.compute_s == pytest.approx(2 * base.compute_s)


def test_synthetic_plan() -> None:
    plan = compute_plan(
        WorkloadConfig(model="synthetic", gradient_mb=100, compute_ms=90, bucket_mb=20, synthetic_layers=10), V100
    )
    assert plan.compute_s == pytest.approx(0.090) and plan.forward_s == pytest.approx(0.030)
    assert [b.nbytes for b in plan.buckets] == pytest.approx([20e6] * 5)
    assert [b.backward_s for b in plan.buckets] == pytest.approx([0.012] * 5)


def test_bucket_larger_than_model_gives_one_bucket() -> None:
    plan = compute_plan(WorkloadConfig(model="resnet50", bucket_mb=1000), V100)
    assert len(plan.buckets) == 1


def _bucket_values(shapes: tuple[tuple[int, ...], ...]) -> int:
    return sum(int(np.prod(shape)) for shape in shapes)


def test_synthetic_layers_are_near_square_matrices_and_fill_their_buckets() -> None:
    """0.5 MB of fp32 in 5 layers: 25,000 values a layer; isqrt(25,000) = 158 (158^2 = 24,964, 159^2 =
    25,281), 25,000 // 158 = 158, 36 values left over. 0.25 MB buckets close after 3 layers (0.3 MB),
    then the last 2: layers 4, 3, 2 and 1, 0 in backward order."""
    from sim.engine.run import model_info

    cfg = WorkloadConfig(model="synthetic", gradient_mb=0.5, compute_ms=5, bucket_mb=0.25, synthetic_layers=5)
    plan = compute_plan(cfg, V100)
    layer = ((158, 158), (36,))
    assert [b.layers for b in plan.buckets] == [(4, 3, 2), (1, 0)]
    assert plan.bucket_shapes == (layer * 3, layer * 2)
    assert model_info(plan).bucket_shapes == plan.bucket_shapes
    for bucket, shapes in zip(plan.buckets, plan.bucket_shapes):
        assert _bucket_values(shapes) * 4 == bucket.nbytes  # 25,000 values of 4 bytes a layer


def test_synthetic_tables_are_embedding_dim_wide_and_each_its_own_sparse_bucket() -> None:
    """With lookups every synthetic layer is a table: 25,000 values // 64 = 390 rows of 64 (24,960
    values), 40 left over; a sparse table gets a bucket of its own."""
    from sim.config.sparsity import SparsityConfig

    sparsity = SparsityConfig(lookups=10, embedding_dim=64)
    cfg = WorkloadConfig(
        model="synthetic", gradient_mb=0.5, compute_ms=5, bucket_mb=25, synthetic_layers=5, sparsity=sparsity
    )
    plan = compute_plan(cfg, V100)
    assert [b.layers for b in plan.buckets] == [(4,), (3,), (2,), (1,), (0,)]
    assert plan.bucket_shapes == (((390, 64), (40,)),) * 5
    assert all(_bucket_values(s) * 4 == b.nbytes == 100_000 for s, b in zip(plan.bucket_shapes, plan.buckets))


@pytest.mark.parametrize("gradient_precision", ["fp32", "fp16"])
def test_resnet50_bucket_shapes_hold_each_buckets_bytes(gradient_precision: str) -> None:
    """Every bucket's tensors times the bytes of a gradient value are its bytes, and all buckets'
    tensors are ResNet-50's 25,557,032 parameters (He et al.; torchvision's count)."""
    from sim.engine.run import model_info

    cfg = WorkloadConfig(model="resnet50", batch_size=64, efficiency=0.5, gradient_precision=gradient_precision)
    info = model_info(compute_plan(cfg, V100), gradient_precision)
    width = {"fp32": 4, "fp16": 2}[gradient_precision]
    assert len(info.bucket_shapes) == len(info.bucket_bytes) > 1
    for shapes, nbytes in zip(info.bucket_shapes, info.bucket_bytes):
        assert _bucket_values(shapes) * width == nbytes
    assert sum(_bucket_values(shapes) for shapes in info.bucket_shapes) == 25_557_032
    # backward produces the classifier first: its bias (1000,) after its weight (1000, 2048)
    assert info.bucket_shapes[0][:2] == ((1000, 2048), (1000,))
    assert info.bucket_shapes[-1][-1] == (64, 3, 7, 7)  # the stem's convolution closes the last bucket


def test_deepfm_sparse_tables_have_buckets_of_their_own_shape() -> None:
    """DeepFM: the 10^6 x 10 embedding table and the first-order weights (10^6 x 1 and the global bias)
    are sparse buckets of their own; the dense MLP (390 -> 400 -> 400 -> 400 -> 1) the third."""
    plan = compute_plan(WorkloadConfig(model="deepfm", batch_size=64, efficiency=0.5), V100)
    assert [layout.sparse for layout in plan.layouts] == [False, True, True]
    assert plan.bucket_shapes[1] == ((1_000_000, 10),) and plan.bucket_shapes[2] == ((1_000_000, 1), (1,))
    dense = ((1, 400), (1,), (400, 400), (400,), (400, 400), (400,), (400, 390), (400,))
    assert plan.bucket_shapes[0] == dense
    for shapes, bucket in zip(plan.bucket_shapes, plan.buckets):
        assert _bucket_values(shapes) * 4 == bucket.nbytes


def test_a_model_with_a_layer_of_unknown_shapes_has_no_bucket_shapes() -> None:
    from sim.catalog.zoo import Layer, ModelSpec
    from sim.compute.buckets import GradientBucket, bucket_shapes

    known, unknown, empty = Layer("a", 6, 1.0, shapes=((2, 3),)), Layer("b", 4, 1.0), Layer("c", 0, 1.0)
    buckets = [GradientBucket(40.0, 0.0, 0.0, (1, 0))]
    assert bucket_shapes(ModelSpec("m", (known, unknown)), buckets) == ()
    assert bucket_shapes(ModelSpec("m", (known, empty)), buckets) == (((2, 3),),)
