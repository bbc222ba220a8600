"""The default compute model (sim/compute/roofline.py) against its closed form, op by op."""

from __future__ import annotations

import pytest

from sim.catalog.gpus import KernelCosts, get_gpu
from sim.catalog.zoo import MODEL_NAMES, get_model
from sim.catalog.zoo.spec import Layer, Op
from sim.compute.roofline import arithmetic_unit, model_seconds, op_table
from sim.config import parse_config
from sim.errors import ConfigError

COSTS = KernelCosts(fp32=0.5, tf32=0.4, tensor=0.25, memory=0.8, launch_us=7.0)
A100, V100, K80 = get_gpu("A100"), get_gpu("V100"), get_gpu("K80")


def single(op: Op, params: int = 0) -> Layer:
    return Layer("x", params, op.flops, ops=(op,))


def test_a_memory_bound_op_takes_its_bytes_over_bandwidth_plus_launches() -> None:
    op = Op("elementwise", flops=1.0, moved=1e6, kernels=3)
    forward, backward = model_seconds(A100, COSTS, [single(op)], 32, "fp32")
    expected = 32 * 1e6 * 4 / (A100.memory_bandwidth_gbs * 1e9 * 0.8) + 3 * 7e-6
    assert forward[0] == pytest.approx(expected, rel=1e-12)
    assert backward[0] == pytest.approx(2 * expected, rel=1e-12)
    half, _ = model_seconds(A100, COSTS, [single(op)], 32, "bf16")  # 2-byte activations under autocast
    assert half[0] == pytest.approx((expected - 3 * 7e-6) / 2 + 3 * 7e-6, rel=1e-12)  # no weights: no cast


def test_a_compute_bound_op_takes_its_flops_over_the_units_peak() -> None:
    op = Op("matmul", flops=1e9, moved=10.0)
    for precision, peak, eff in (("fp32", 19.5, 0.5), ("tf32", 156.0, 0.4), ("fp16", 312.0, 0.25)):
        forward, _ = model_seconds(A100, COSTS, [single(op)], 8, precision)
        assert forward[0] == pytest.approx(8e9 / (peak * 1e12 * eff) + 7e-6, rel=1e-12), precision


def test_weights_are_read_once_per_batch_and_autocast_adds_their_cast() -> None:
    op = Op("matmul", flops=0.0, moved=0.0, kernels=1)
    layer = single(op, params=1_000_000)
    bandwidth = A100.memory_bandwidth_gbs * 1e9 * 0.8
    for batch in (1, 64):
        forward, backward = model_seconds(A100, COSTS, [layer], batch, "fp32")
        assert forward[0] == pytest.approx(4e6 / bandwidth + 7e-6, rel=1e-12)
        assert backward[0] == pytest.approx(8e6 / bandwidth + 14e-6, rel=1e-12)
    forward, _ = model_seconds(A100, COSTS, [layer], 1, "fp16")
    assert forward[0] == pytest.approx(10e6 / bandwidth + 2 * 7e-6, rel=1e-12)  # read 4, write 2 per weight


@pytest.mark.parametrize(
    ("gpu", "kind", "precision", "unit"),
    [
        (A100, "conv", "fp32", "tf32"),  # cuDNN's default on Ampere and later
        (A100, "matmul", "fp32", "fp32"),  # matrix products stay FP32 by default
        (A100, "matmul", "tf32", "tf32"),
        (A100, "matmul", "bf16", "tensor"),
        (A100, "elementwise", "fp16", "fp32"),
        (V100, "conv", "fp32", "fp32"),  # no TF32 before Ampere
        (V100, "conv", "tf32", "fp32"),
        (V100, "conv", "fp16", "tensor"),
        (K80, "matmul", "fp16", "fp32"),  # no tensor cores: autocast buys no arithmetic
    ],
)
def test_each_op_runs_on_the_unit_pytorch_would_use(gpu, kind: str, precision: str, unit: str) -> None:
    assert arithmetic_unit(gpu, kind, precision) == unit


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_zoo_layer_lists_ops_that_add_up_to_its_flops(name: str) -> None:
    for layer in get_model(name).layers:
        assert layer.ops, layer.name
        assert sum(op.flops for op in layer.ops) == pytest.approx(layer.forward_flops, rel=1e-12), layer.name
        assert all(op.moved > 0 for op in layer.ops if op.kind != "lookup" or layer.rows), layer.name


def test_backward_is_twice_forward_without_autocast() -> None:
    layers = get_model("resnet50").layers
    forward, backward = model_seconds(V100, COSTS, layers, 32, "fp32")
    assert backward == pytest.approx([2 * f for f in forward], rel=1e-12)


def test_launches_dominate_small_batches_and_vanish_per_sample_at_large_ones() -> None:
    layers = get_model("resnet32").layers
    table = op_table(A100, layers, 1, "fp32")
    one = sum(sum(t) for t in model_seconds(A100, COSTS, layers, 1, "fp32"))
    assert one == pytest.approx(table.kernels.sum() * 7e-6, rel=0.25)
    per_sample = [sum(sum(t) for t in model_seconds(A100, COSTS, layers, b, "fp32")) / b for b in (1, 64, 4096, 8192)]
    assert per_sample[0] > 10 * per_sample[2]
    assert per_sample[3] == pytest.approx(per_sample[2], rel=0.03)


def test_bf16_on_a_gpu_without_it_is_a_config_error_naming_the_field() -> None:
    raw = {
        "cluster": {"topology": "star", "hosts": 2, "gpu": "V100"},
        "workload": {"model": "resnet50", "precision": "bf16"},
        "policies": [{"name": "ring"}],
    }
    with pytest.raises(ConfigError, match=r"workload\.precision: 'bf16'.*V100.*allowed there: fp32, tf32, fp16"):
        parse_config(raw)
    raw["cluster"]["gpu"] = "A100"
    assert parse_config(raw).workload.precision == "bf16"
