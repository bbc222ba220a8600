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
