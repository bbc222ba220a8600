"""GPU specifications: vendor peak figures plus the fraction of peak that real training reaches.

Peaks are from NVIDIA's datasheets. Default efficiencies are derived from published ResNet-50
training throughputs as  images/s * training FLOPs per image / peak  (see docs/zoo.md, which
gives every figure and its source); tests/test_gpus.py recomputes them from the model zoo.
"""

from __future__ import annotations

from dataclasses import dataclass

PRECISIONS: tuple[str, ...] = ("fp32", "fp16")
_POSITIVE_FIELDS = (
    "fp32_tflops",
    "fp16_tflops",
    "memory_gb",
    "memory_bandwidth_gbs",
    "intra_host_gbps",
)


def _check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of: {', '.join(PRECISIONS)} (got {precision!r})")
    return precision


def _check_efficiency(name: str, field: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"GPU {name!r}: {field} must be in (0, 1], got {value}")


@dataclass(frozen=True)
class GpuSpec:
    """One GPU (one die, as a cloud instance exposes it)."""

    name: str
    fp32_tflops: float  # peak dense FP32
    fp16_tflops: float  # peak dense FP16/BF16 on tensor cores (= fp32 figure when the GPU has none)
    memory_gb: float
    memory_bandwidth_gbs: float  # GB/s
    intra_host_gbps: float  # per-GPU intra-host link, per direction, Gbit/s (NVLink, else PCIe)
    efficiency_fp32: float  # default fraction of peak reached by real training
    efficiency_fp16: float

    def __post_init__(self) -> None:
        for field in _POSITIVE_FIELDS:
            if getattr(self, field) <= 0:
                raise ValueError(f"GPU {self.name!r}: {field} must be > 0")
        _check_efficiency(self.name, "efficiency_fp32", self.efficiency_fp32)
        _check_efficiency(self.name, "efficiency_fp16", self.efficiency_fp16)

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s at `precision` ("fp32" or "fp16")."""
        tflops = self.fp32_tflops if _check_precision(precision) == "fp32" else self.fp16_tflops
        return tflops * 1e12

    def default_efficiency(self, precision: str) -> float:
        """The fraction of peak that training reaches at `precision` unless told otherwise."""
        return self.efficiency_fp32 if _check_precision(precision) == "fp32" else self.efficiency_fp16

    def compute_seconds(self, flops: float, precision: str, efficiency: float | None = None) -> float:
        """Seconds to execute `flops` at `precision`: flops / (peak * efficiency)."""
        if flops < 0:
            raise ValueError(f"flops must be >= 0, got {flops}")
        if efficiency is None:
            efficiency = self.default_efficiency(precision)
        else:
            _check_efficiency(self.name, "efficiency", efficiency)
        return flops / (self.peak_flops(precision) * efficiency)


# Efficiencies measured on ResNet-50 (derivation in docs/zoo.md).
_V100_FP32_EFF = 0.578  # 367 img/s, DeepLearningExamples PyTorch, DGX-1 V100 16GB
_V100_FP16_EFF = 0.237  # 1,200 img/s, same table, mixed precision

_GPUS: dict[str, GpuSpec] = {
    # One GK210 die of a K80 board (the board's 8.73 TFLOPS boost figure is for two dies).
    # Kepler has no fast FP16, so fp16 runs at the fp32 rate and efficiency.
    "K80": GpuSpec("K80", 4.37, 4.37, 12.0, 240.0, 126.0, 0.277, 0.277),
    # P100 SXM2. Its 21.2 TFLOPS half-precision rate needs paired FP16 arithmetic without tensor
    # cores, so, per the field's definition, fp16 is modelled as the fp32 figure.
    "P100": GpuSpec("P100", 10.6, 10.6, 16.0, 732.0, 640.0, 0.482, 0.482),
    "V100": GpuSpec("V100", 15.7, 125.0, 16.0, 900.0, 1200.0, _V100_FP32_EFF, _V100_FP16_EFF),
    # A100 SXM4 80GB. Its FP32 efficiency reuses V100's: NVIDIA publishes TF32, not FP32, figures.
    "A100": GpuSpec("A100", 19.5, 312.0, 80.0, 2039.0, 2400.0, _V100_FP32_EFF, 0.196),
    # H100 SXM5: no comparable published figure, so both efficiencies reuse V100's.
    "H100": GpuSpec("H100", 67.0, 989.4, 80.0, 3350.0, 3600.0, _V100_FP32_EFF, _V100_FP16_EFF),
}

GPU_NAMES: tuple[str, ...] = tuple(_GPUS)


def get_gpu(name: str) -> GpuSpec:
    """The GPU called `name` (case-insensitive)."""
    key = name.strip().upper() if isinstance(name, str) else None
    if key not in _GPUS:
        raise ValueError(f"unknown GPU {name!r}; choose one of: {', '.join(GPU_NAMES)}")
    return _GPUS[key]
