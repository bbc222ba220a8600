"""GPU table: datasheet figures, the efficiency derivations, and the time arithmetic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.gpus import GPU_NAMES, PRECISIONS, GpuSpec, get_gpu
from sim.zoo import get_model
from sim.zoo.cnn import resnet50_layers

# Vendor datasheet peaks (TFLOPS): FP32, and dense FP16 on tensor cores where there are any.
DATASHEET = {
    "V100": (15.7, 125.0),
    "A100": (19.5, 312.0),
    "H100": (67.0, 1979.0 / 2),  # the datasheet's 1,979 is with 2:4 sparsity
}
K80_BOARD_FP32_TFLOPS = 8.73  # two GK210 dies, boost clock

# Published single-GPU ResNet-50 training throughputs (images/s) behind the default efficiencies:
# (gpu, precision, images/s, ResNet-50 variant that was measured).
MEASURED = [
    ("V100", "fp32", 367.0, "v1.5"),  # NVIDIA DeepLearningExamples, PyTorch, DGX-1 V100 16GB
    ("V100", "fp16", 1200.0, "v1.5"),  # same table, mixed precision
    ("A100", "fp16", 2470.0, "v1.5"),  # same README, DGX A100 80GB, mixed precision
    ("P100", "fp32", 219.0, "v1"),  # TensorFlow benchmarks (May 2017), DGX-1 P100, synthetic
    ("K80", "fp32", 51.9, "v1"),  # TensorFlow benchmarks (May 2017), GCE, 1 die, synthetic
]


def resnet50_training_flops(variant: str) -> float:
    if variant == "v1.5":
        return get_model("resnet50").training_flops
    return 3 * sum(layer.forward_flops for layer in resnet50_layers(stride_in_1x1=True))


def test_required_gpus_are_listed() -> None:
    assert {"K80", "V100", "A100", "H100"} <= set(GPU_NAMES)
    assert all(get_gpu(name).name == name for name in GPU_NAMES)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_peaks_match_datasheets(name: str) -> None:
    fp32, fp16 = DATASHEET[name]
    gpu = get_gpu(name)
    assert gpu.peak_flops("fp32") == pytest.approx(fp32 * 1e12, rel=1e-3)
    assert gpu.peak_flops("fp16") == pytest.approx(fp16 * 1e12, rel=1e-3)


def test_k80_is_one_die_without_fast_fp16() -> None:
    k80 = get_gpu("K80")
    assert k80.fp32_tflops == pytest.approx(K80_BOARD_FP32_TFLOPS / 2, rel=5e-3)
    assert k80.fp16_tflops == k80.fp32_tflops


@pytest.mark.parametrize(("name", "precision", "images_s", "variant"), MEASURED)
def test_default_efficiency_reproduces_the_published_throughput(
    name: str, precision: str, images_s: float, variant: str
) -> None:
    gpu = get_gpu(name)
    derived = images_s * resnet50_training_flops(variant) / gpu.peak_flops(precision)
    assert gpu.default_efficiency(precision) == pytest.approx(derived, rel=0.01)
    seconds = gpu.compute_seconds(resnet50_training_flops(variant), precision)
    assert 1 / seconds == pytest.approx(images_s, rel=0.01)


def test_gpus_without_a_figure_reuse_v100_efficiencies() -> None:
    v100 = get_gpu("V100")
    assert get_gpu("H100").efficiency_fp32 == v100.efficiency_fp32
    assert get_gpu("H100").efficiency_fp16 == v100.efficiency_fp16
    assert get_gpu("A100").efficiency_fp32 == v100.efficiency_fp32


@pytest.mark.parametrize("name", GPU_NAMES)
def test_mixed_precision_is_never_slower(name: str) -> None:
    gpu = get_gpu(name)
    assert gpu.compute_seconds(1e12, "fp16") <= gpu.compute_seconds(1e12, "fp32")
    assert 0 < gpu.efficiency_fp32 <= 1 and 0 < gpu.efficiency_fp16 <= 1


@given(
    st.sampled_from(GPU_NAMES),
    st.sampled_from(PRECISIONS),
    st.floats(0, 1e18, allow_nan=False),
    st.one_of(st.none(), st.floats(0.01, 1.0)),
)
def test_compute_seconds_is_flops_over_effective_rate(
    name: str, precision: str, flops: float, efficiency: float | None
) -> None:
    gpu = get_gpu(name)
    tflops = gpu.fp32_tflops if precision == "fp32" else gpu.fp16_tflops
    eff = efficiency if efficiency is not None else gpu.default_efficiency(precision)
    expected = flops / (tflops * 1e12 * eff)
    assert math.isclose(gpu.compute_seconds(flops, precision, efficiency), expected, rel_tol=1e-12)


@given(st.text(max_size=8).filter(lambda s: s not in PRECISIONS))
def test_unknown_precision_names_the_allowed_values(precision: str) -> None:
    gpu = get_gpu("V100")
    for call in (lambda: gpu.peak_flops(precision), lambda: gpu.compute_seconds(1.0, precision)):
        with pytest.raises(ValueError, match="precision must be one of: fp32, fp16"):
            call()


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5])
def test_efficiency_outside_unit_interval_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="efficiency"):
        get_gpu("A100").compute_seconds(1e9, "fp16", efficiency=bad)


def test_negative_flops_are_rejected() -> None:
    with pytest.raises(ValueError, match="flops"):
        get_gpu("A100").compute_seconds(-1.0, "fp32")


def test_spec_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="efficiency_fp16"):
        GpuSpec("X", 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.0)
    with pytest.raises(ValueError, match="memory_gb"):
        GpuSpec("X", 1.0, 1.0, 0.0, 1.0, 1.0, 0.5, 0.5)


@pytest.mark.parametrize("alias", ["v100", "a100", " H100 ", "k80"])
def test_names_are_case_insensitive(alias: str) -> None:
    assert get_gpu(alias).name == alias.strip().upper()


@given(st.text(max_size=8).filter(lambda s: s.strip().upper() not in GPU_NAMES))
def test_unknown_gpu_lists_the_names(name: str) -> None:
    with pytest.raises(ValueError) as info:
        get_gpu(name)
    assert str(info.value) == f"unknown GPU {name!r}; choose one of: {', '.join(GPU_NAMES)}"
