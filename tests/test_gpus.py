"""GPU table: datasheet figures and the FLOPs-at-an-efficiency arithmetic (the default compute
model's constants are checked in tests/test_compute_fit.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalog.gpus import GPU_NAMES, PRECISIONS, GpuSpec, KernelCosts, get_gpu

# Vendor datasheet peaks (TFLOPS): FP32, and dense FP16 on tensor cores where there are any.
DATASHEET = {
    "V100": (15.7, 125.0),
    "A100": (19.5, 312.0),
    "H100": (67.0, 1979.0 / 2),  # the datasheet's 1,979 is with 2:4 sparsity
    # NVIDIA's HGX B200 table, per 8 GPUs: 600 TFLOPS FP32, 36 PFLOPS FP16 with sparsity (dense: half)
    "B200": (600.0 / 8, 36000.0 / 8 / 2),
}
# Dense TF32 and BF16 tensor-core peaks (the datasheets' headline figures are with sparsity).
TENSOR_PEAKS = {
    "A100": (312.0 / 2, 312.0),
    "H100": (989.4 / 2, 989.4),
    "B200": (18000.0 / 8 / 2, 36000.0 / 8 / 2),  # HGX B200: 18 PFLOPS TF32, 36 BF16, per 8 GPUs, with sparsity
}
K80_BOARD_BASE_FP32_TFLOPS = 5.6  # two GK210 dies at the 562 MHz base clock (8.73 at the boost clock)


def test_required_gpus_are_listed() -> None:
    assert {"K80", "V100", "A100", "H100"} <= set(GPU_NAMES)
    assert all(get_gpu(name).name == name for name in GPU_NAMES)


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_peaks_match_datasheets(name: str) -> None:
    fp32, fp16 = DATASHEET[name]
    gpu = get_gpu(name)
    assert gpu.peak_flops("fp32") == pytest.approx(fp32 * 1e12, rel=1e-3)
    assert gpu.peak_flops("fp16") == pytest.approx(fp16 * 1e12, rel=1e-3)


def test_b200_memory_and_nvlink_match_the_dgx_b200_datasheet() -> None:
    """DGX B200: 8 GPUs with 1,440 GB of HBM3e at 64 TB/s in all; NVLink 5 at 1.8 TB/s per GPU, both
    directions together (NVIDIA's DGX B200 datasheet)."""
    b200 = get_gpu("B200")
    assert b200.memory_gb == 1440 / 8 and b200.memory_bandwidth_gbs == 64000 / 8
    assert b200.intra_host_gbps == 1800 / 2 * 8  # GB/s each way -> Gbit/s
    assert b200.costs == get_gpu("H100").costs  # no B200 rows to fit: the H100's stand in


def test_k80_is_one_die_without_fast_fp16() -> None:
    k80 = get_gpu("K80")
    assert k80.fp32_tflops == pytest.approx(K80_BOARD_BASE_FP32_TFLOPS / 2, rel=5e-3)
    assert k80.fp16_tflops == k80.fp32_tflops


@pytest.mark.parametrize("name", sorted(TENSOR_PEAKS))
def test_tf32_and_bf16_peaks_match_datasheets(name: str) -> None:
    tf32, bf16 = TENSOR_PEAKS[name]
    gpu = get_gpu(name)
    assert gpu.peak_flops("tf32") == pytest.approx(tf32 * 1e12, rel=1e-3)
    assert gpu.peak_flops("bf16") == pytest.approx(bf16 * 1e12, rel=1e-3)


@pytest.mark.parametrize("name", ["K80", "P100", "V100"])
def test_before_ampere_tf32_is_fp32_and_bf16_is_refused(name: str) -> None:
    gpu = get_gpu(name)
    assert gpu.peak_flops("tf32") == gpu.peak_flops("fp32")
    with pytest.raises(ValueError, match="precision 'bf16'.*allowed: fp32, tf32, fp16"):
        gpu.peak_flops("bf16")


@given(
    st.sampled_from(GPU_NAMES),
    st.sampled_from(PRECISIONS),
    st.floats(0, 1e18, allow_nan=False),
    st.floats(0.01, 1.0),
)
def test_compute_seconds_is_flops_over_effective_rate(
    name: str, precision: str, flops: float, efficiency: float
) -> None:
    gpu = get_gpu(name)
    if precision == "bf16" and not gpu.bf16_tflops:
        return
    tflops = {"fp32": gpu.fp32_tflops, "tf32": gpu.tf32_tflops or gpu.fp32_tflops}.get(precision, gpu.fp16_tflops)
    expected = flops / (tflops * 1e12 * efficiency)
    assert math.isclose(gpu.compute_seconds(flops, precision, efficiency), expected, rel_tol=1e-12)


@given(st.text(max_size=8).filter(lambda s: s not in PRECISIONS))
def test_unknown_precision_names_the_allowed_values(precision: str) -> None:
    gpu = get_gpu("V100")
    for call in (lambda: gpu.peak_flops(precision), lambda: gpu.compute_seconds(1.0, precision, 0.5)):
        with pytest.raises(ValueError, match="precision must be one of: fp32, tf32, fp16, bf16"):
            call()


@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5])
def test_efficiency_outside_unit_interval_is_rejected(bad: float) -> None:
    with pytest.raises(ValueError, match="efficiency"):
        get_gpu("A100").compute_seconds(1e9, "fp16", efficiency=bad)


def test_negative_flops_are_rejected() -> None:
    with pytest.raises(ValueError, match="flops"):
        get_gpu("A100").compute_seconds(-1.0, "fp32", 0.5)


def test_spec_validates_its_fields() -> None:
    costs = get_gpu("V100").costs
    with pytest.raises(ValueError, match="memory_gb"):
        GpuSpec("X", 1.0, 1.0, 0.0, 1.0, 1.0, costs)
    with pytest.raises(ValueError, match="tf32_tflops"):
        GpuSpec("X", 1.0, 1.0, 1.0, 1.0, 1.0, costs, tf32_tflops=-1.0)
    with pytest.raises(ValueError, match="tensor must be in"):
        KernelCosts(0.5, 0.5, 1.5, 0.5, 1.0)
    with pytest.raises(ValueError, match="launch_us"):
        KernelCosts(0.5, 0.5, 0.5, 0.5, -1.0)
    with pytest.raises(ValueError, match="tile must be >= 0"):
        KernelCosts(0.5, 0.5, 0.5, 0.5, 1.0, tile=-1.0)


@pytest.mark.parametrize("alias", ["v100", "a100", " H100 ", "k80"])
def test_names_are_case_insensitive(alias: str) -> None:
    assert get_gpu(alias).name == alias.strip().upper()


@given(st.text(max_size=8).filter(lambda s: s.strip().upper() not in GPU_NAMES))
def test_unknown_gpu_lists_the_names(name: str) -> None:
    with pytest.raises(ValueError) as info:
        get_gpu(name)
    assert str(info.value) == f"unknown GPU {name!r}; choose one of: {', '.join(GPU_NAMES)}"
