"""The default compute model (sim/compute/roofline.py) against its closed form, op by op."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.catalog.gpus import SHARPNESS_MAX, KernelCosts, get_gpu
from sim.catalog.zoo import MODEL_NAMES, get_model
from sim.catalog.zoo.spec import Layer, Op
from sim.compute.roofline import arithmetic_unit, model_seconds, op_table, stack
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


def test_the_smooth_maximum_runs_from_the_sum_to_the_longer_of_the_two() -> None:
    op = Op("matmul", flops=1e9, moved=1e8)
    arithmetic = 1e9 / (A100.fp32_tflops * 1e12 * 0.5)
    memory = 1e8 * 4 / (A100.memory_bandwidth_gbs * 1e9 * 0.8)
    summed = replace(COSTS, sharpness=1.0, launch_us=0.0)
    assert model_seconds(A100, summed, [single(op)], 1, "fp32")[0][0] == pytest.approx(arithmetic + memory)
    sharp = replace(summed, sharpness=SHARPNESS_MAX)
    assert model_seconds(A100, sharp, [single(op)], 1, "fp32")[0][0] == pytest.approx(max(arithmetic, memory), rel=0.03)


def test_an_unaligned_product_is_slower_on_tensor_cores_only() -> None:
    aligned, unaligned = Op("matmul", 1e9, 1.0), Op("matmul", 1e9, 1.0, aligned=False)
    costs = replace(COSTS, unaligned=0.25, launch_us=0.0)
    for precision, factor in (("fp16", 4.0), ("tf32", 4.0), ("fp32", 1.0)):
        fast = model_seconds(A100, costs, [single(aligned)], 8, precision)[0][0]
        slow = model_seconds(A100, costs, [single(unaligned)], 8, precision)[0][0]
        assert slow == pytest.approx(factor * fast, rel=1e-6), precision


def test_a_narrow_product_fills_part_of_each_tile_on_tensor_cores_only() -> None:
    """Width 64 at tile 192: 64 / (64 + 192) = 1/4 of the unit's efficiency, so 4x the time on
    TF32 and FP16 tensor cores; FP32 cores and a product of unknown width (0) keep their speed."""
    wide, narrow = Op("matmul", 1e9, 1.0), Op("matmul", 1e9, 1.0, width=64)
    conv = Op("conv", 1e9, 1.0, width=64)
    costs = replace(COSTS, tile=192.0, launch_us=0.0)
    for precision, factor in (("fp16", 4.0), ("tf32", 4.0), ("fp32", 1.0)):
        fast = model_seconds(A100, costs, [single(wide)], 8, precision)[0][0]
        slow = model_seconds(A100, costs, [single(narrow)], 8, precision)[0][0]
        assert slow == pytest.approx(factor * fast), precision
        untiled = model_seconds(A100, replace(costs, tile=0.0), [single(narrow)], 8, precision)[0][0]
        assert untiled == pytest.approx(fast), precision
    peak = 8e9 / (A100.fp16_tflops * 1e12 * 0.25)  # the closed form under fp16, conv as matmul
    assert model_seconds(A100, costs, [single(conv)], 8, "fp16")[0][0] == pytest.approx(4 * peak)


def test_autocast_keeps_full_precision_ops_in_fp32_after_a_cast() -> None:
    op = Op("elementwise", 0.0, 1e6, full_precision=True)
    costs = replace(COSTS, launch_us=1.0)
    bandwidth = A100.memory_bandwidth_gbs * 1e9 * 0.8
    fp32 = model_seconds(A100, costs, [single(op)], 1, "fp32")[0][0]
    assert fp32 == pytest.approx(4e6 / bandwidth + 1e-6)
    fp16 = model_seconds(A100, costs, [single(op)], 1, "fp16")[0][0]
    # values at 4 bytes, and half of them (the input) read at 2 and written at 4 by the cast kernel
    assert fp16 == pytest.approx((4e6 + 0.5e6 * 6) / bandwidth + 2e-6)


def test_autocast_casts_the_weights_and_bias_of_products_but_not_of_norms() -> None:
    costs = replace(COSTS, launch_us=1.0)
    linear = Layer("fc", 1_000_000 + 1000, 0.0, ops=(Op("matmul", 0.0, 0.0),), bias=True)
    norm = Layer("ln", 2000, 0.0, ops=(Op("elementwise", 0.0, 0.0),))
    bandwidth = A100.memory_bandwidth_gbs * 1e9 * 0.8
    forward, backward = model_seconds(A100, costs, [linear, norm], 1, "fp16")
    assert forward[0] == pytest.approx(1_001_000 * 10 / bandwidth + 3e-6)  # the product, two casts
    assert forward[1] == pytest.approx(2000 * 4 / bandwidth + 1e-6)  # FP32 parameters read as they are
    assert backward[0] == pytest.approx(1_001_000 * 20 / bandwidth + 4e-6)  # the gradients cast back


def test_eager_issue_binds_small_batches_and_vanishes_at_large_ones() -> None:
    layers = get_model("resnet50").layers
    costs = replace(COSTS, dispatch_us=40.0)
    table = op_table(A100, layers, 1, "fp16")
    forward_kernels = table.kernels[~table.backward].sum()
    tiny = table.seconds(costs, "eager")
    # the CPU issues the kernels one at a time, forward then backward; the GPU cannot finish before
    # the last one
    assert tiny.sum() > table.kernels.sum() * 40e-6 > 2 * forward_kernels * 40e-6
    assert tiny.sum() > 1.5 * table.seconds(costs, "tuned").sum()
    large = op_table(A100, layers, 512, "fp16")
    assert large.seconds(costs, "eager").sum() == pytest.approx(large.seconds(costs, "tuned").sum(), rel=0.01)


def test_eager_issue_follows_the_queue_recurrence() -> None:
    """Op i finishes at max(op i-1 finished, its last kernel issued) + its GPU time."""
    layers = get_model("vgg16").layers
    costs = replace(COSTS, dispatch_us=25.0)
    table = op_table(A100, layers, 4, "fp16")
    gpu = table.gpu_seconds(costs)
    finish = issued = 0.0
    for i in table.order:  # forward, then the backward that autograd's engine issues after it
        issued += table.kernels[i] * 25e-6
        finish = max(finish, issued) + gpu[i]
    assert table.seconds(costs, "eager").sum() == pytest.approx(finish, rel=1e-9)


def test_the_gpu_runs_the_forward_in_layer_order_then_the_backward_in_reverse() -> None:
    table = op_table(A100, get_model("resnet32").layers, 8, "fp32")
    order = table.order
    forward = [table.layer[i] for i in order if not table.backward[i]]
    backward = [table.layer[i] for i in order if table.backward[i]]
    assert forward == sorted(forward) and backward == sorted(backward, reverse=True)
    assert not table.backward[order[: len(forward)]].any()


def test_fused_implementations_drop_the_epilogues_of_batch_norm() -> None:
    layers = get_model("resnet50").layers
    table = op_table(A100, layers, 64, "fp16")
    tuned, fused = table.seconds(COSTS, "tuned"), table.seconds(COSTS, "fused")
    assert table.epilogue.any() and (fused[table.epilogue] == 0).all()
    assert fused[~table.epilogue] == pytest.approx(tuned[~table.epilogue])
    with pytest.raises(ValueError, match="implementation must be one of: eager, tuned, fused"):
        table.seconds(COSTS, "compiled")


@pytest.mark.parametrize("implementation", ["eager", "tuned", "fused"])
def test_stacked_tables_give_each_tables_own_shares(implementation: str) -> None:
    costs = replace(get_gpu("A100").costs, dispatch_us=20.0)
    tables = [
        op_table(A100, get_model("resnet32").layers, 64, "fp32"),
        op_table(A100, get_model("vgg16").layers, 8, "fp16"),
        op_table(A100, get_model("resnet32").layers, 2, "fp16"),  # CPU-bound under eager
    ]
    shares = stack(tables).seconds(costs, implementation)
    assert shares.shape == (3, max(len(t.order) for t in tables))
    for row, table in zip(shares, tables, strict=True):
        own = table.seconds(costs, implementation)
        assert row[: len(own)] == pytest.approx(own, rel=1e-12, abs=1e-15)
        assert not row[len(own) :].any()  # the padding costs nothing


def test_eager_dispatch_charges_every_kernel_forward_then_backward() -> None:
    """Under `eager` the host issues every kernel at dispatch_us each, the forward's from Python and
    then the backward's from autograd's engine. One layer by hand, memory-bound, no launch cost:
    forward 10 us on the GPU with 5 kernels, backward 20 us with 10, dispatch 10 us. Forward's last
    kernel is issued at 5 x 10 = 50 us and the GPU then needs its 10 us: forward's share is 60 us.
    Backward's last kernel is issued at 50 + 10 x 10 = 150 us, after the GPU has drained, so it
    finishes at 150 + 20 = 170 us: a share of 110 us (20 us if the engine kept ahead for free)."""
    import numpy as np

    from sim.compute.roofline import OpTable

    us = 1e-6
    table = OpTable(
        layer=np.array([0, 0]),
        backward=np.array([False, True]),
        unit=np.array([0, 0]),
        compute_s=np.array([0.0, 0.0]),
        memory_s=np.array([10 * us, 20 * us]),
        kernels=np.array([5.0, 10.0]),
        winograd=np.array([False, False]),
        layers=1,
        order=np.array([0, 1]),
        unaligned=np.array([False, False]),
        epilogue=np.array([False, False]),
    )
    costs = KernelCosts(fp32=1.0, tf32=1.0, tensor=1.0, memory=1.0, launch_us=0.0, dispatch_us=10.0)
    forward, backward = table.layer_seconds(costs, "eager")
    assert forward[0] == pytest.approx(60 * us, rel=1e-12)
    assert backward[0] == pytest.approx(110 * us, rel=1e-12), "roofline: backward kernels issued for free"
    assert table.layer_seconds(costs, "tuned") == (pytest.approx([10 * us]), pytest.approx([20 * us]))


def test_fused_implementations_move_autocasts_fp32_ops_at_half_precision_without_the_cast() -> None:
    """Eager autocast casts a softmax's half-precision input up (a kernel reading 2 and writing 4
    bytes per value, for the half of the values it reads) and moves every value at 4 bytes; a fused
    implementation (torch.compile, XLA) computes it in registers on the 2-byte values."""
    op = Op("elementwise", flops=0.0, moved=1e6, kernels=1, full_precision=True)
    bandwidth = A100.memory_bandwidth_gbs * 1e9 * 0.8
    eager, _ = model_seconds(A100, COSTS, [single(op)], 8, "bf16")
    assert eager[0] == pytest.approx((8e6 * 4 + 4e6 * (2 + 4)) / bandwidth + 2 * 7e-6, rel=1e-12)
    fused, backward = model_seconds(A100, COSTS, [single(op)], 8, "bf16", "fused")
    assert fused[0] == pytest.approx(8e6 * 2 / bandwidth + 7e-6, rel=1e-12)
    assert backward[0] == pytest.approx(2 * fused[0], rel=1e-12)
    same, _ = model_seconds(A100, COSTS, [single(op)], 8, "fp32", "fused")  # no autocast: nothing to drop
    assert same[0] == pytest.approx(8e6 * 4 / bandwidth + 7e-6, rel=1e-12)


def test_an_a100_40gb_moves_its_bytes_at_its_own_bandwidth() -> None:
    """The A100 40GB's HBM2 runs at 1,555 GB/s (the 80GB module's HBM2e at 2,039); the arithmetic is the same."""
    from sim.catalog.gpus import memory_variant

    small = memory_variant("A100", 40)
    op = Op("elementwise", flops=1.0, moved=1e6, kernels=3)
    forward, _ = model_seconds(small, COSTS, [single(op)], 32, "fp32")
    assert forward[0] == pytest.approx(32 * 1e6 * 4 / (1555e9 * 0.8) + 3 * 7e-6, rel=1e-12)
    matmul = Op("matmul", flops=1e9, moved=10.0)
    assert model_seconds(small, COSTS, [single(matmul)], 8, "bf16")[0] == pytest.approx(
        model_seconds(A100, COSTS, [single(matmul)], 8, "bf16")[0], rel=1e-6
    )
    with pytest.raises(ValueError, match="no 16 GB variant of GPU 'A100'; variants: A100 40GB"):
        memory_variant("A100", 16)


def test_a_k80_die_computes_at_its_base_clock() -> None:
    """2,496 FP32 cores of a GK210 die, 2 FLOPs each per cycle at the 562 MHz base clock."""
    op = Op("matmul", flops=1e9, moved=0.0)
    forward, _ = model_seconds(K80, COSTS, [single(op)], 4, "fp32")
    assert forward[0] == pytest.approx(4e9 / (2496 * 2 * 562e6 * 0.5) + 7e-6, rel=1e-12)


def test_explicit_attention_under_torch_autocast_moves_softmax_and_dropout_in_fp32() -> None:
    """Scale and mask move the scores at 2 bytes (2 kernels); softmax and dropout read and write
    FP32 (4 values at 4 bytes each per score) after a cast of the scores (read 2, write 4 bytes, for
    half the values; one more kernel). Under FP32, or as Apex O2 ran it, 8 values at the activation width."""
    from sim.catalog.zoo.builders import attention_core

    seq, d, heads = 64, 128, 2
    scores = heads * seq * seq
    bandwidth = A100.memory_bandwidth_gbs * 1e9
    cases = (
        (True, "bf16", 4 * scores * 2 + 4 * scores * 4 + 2 * scores * 6, 5),
        (True, "fp32", 8 * scores * 4, 4),
        (False, "bf16", 8 * scores * 2, 4),
    )
    for autocast, precision, expected, kernels in cases:
        layer = attention_core(Layer("qkv", 0, 0.0), seq, d, heads, "explicit", autocast=autocast)
        table = op_table(A100, [layer], 1, precision)
        forward = ~table.backward  # heads split, Q·K^T, then the element-wise ops on the scores
        ops = slice(2, 4) if autocast else slice(2, 3)
        assert table.memory_s[forward][ops].sum() * bandwidth == pytest.approx(expected, rel=1e-12)
        assert table.kernels[forward][ops].sum() == kernels
