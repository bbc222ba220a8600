"""GPU specifications: vendor peak figures plus the constants of the default compute model.

Peaks are from NVIDIA's datasheets (docs/zoo.md). The constants (what fraction of each peak and of
memory bandwidth real training reaches, what a kernel launch and an eager dispatch cost) are fitted
to published throughputs and this project's measured steps (sim/compute/fit.py, docs/compute_model.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

# fp32: PyTorch's defaults (cuDNN may use TF32 for convolutions, matrix products stay FP32);
# tf32: TF32 for both; fp16 / bf16: autocast to that type (FP32 master weights and gradients).
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
_POSITIVE_FIELDS = (
    "fp32_tflops",
    "fp16_tflops",
    "memory_gb",
    "memory_bandwidth_gbs",
    "intra_host_gbps",
)


# Winograd F(4x4, 3x3) does a 3x3 convolution with 4x fewer multiplications (Lavin & Gray 2016,
# arXiv:1509.09308; cuDNN's non-fused Winograd algorithm uses it for FP32).
WINOGRAD_MAX = 4.0
# A smooth maximum (a^p + b^p)^(1/p) at p = 32 is within 2.2% of max(a, b).
SHARPNESS_MAX = 32.0


def check_precision(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of: {', '.join(PRECISIONS)} (got {precision!r})")
    return precision


def _check_efficiency(name: str, field: str, value: float) -> None:
    if not 0.0 < value <= 1.0:
        raise ValueError(f"GPU {name!r}: {field} must be in (0, 1], got {value}")


@dataclass(frozen=True)
class KernelCosts:
    """A GPU's fitted constants for the default compute model (sim/compute/roofline.py): the fraction of
    peak each arithmetic unit reaches (FP32 cores, TF32 and FP16/BF16 tensor cores), the fraction of
    memory bandwidth, the GPU time one kernel costs beyond its work, how much faster than their
    FLOPs say 3x3 convolutions run on FP32 cores (cuDNN's Winograd), how sharply an op's time turns
    from its memory traffic to its arithmetic, the host CPU's time to issue one kernel from
    eager PyTorch, tensor cores' speed on a product misaligned for them, and the width at which a
    narrow product on tensor cores reaches half their efficiency."""

    fp32: float
    tf32: float
    tensor: float
    memory: float
    launch_us: float
    winograd: float = 1.0  # speed-up of 3x3 stride-1 convolutions on FP32 cores, 1 to WINOGRAD_MAX
    # exponent of the smooth maximum of arithmetic and memory time, 1 (their sum) to SHARPNESS_MAX
    # (practically the larger of the two)
    sharpness: float = SHARPNESS_MAX
    dispatch_us: float = 0.0  # eager PyTorch: CPU time to issue one kernel (0: issued ahead)
    unaligned: float = 1.0  # tensor cores' speed on a product with a dimension not a multiple of 8
    # the smaller dimension at which a matrix product or convolution reaches half its unit's
    # efficiency (0: every product reaches it whole)
    tile: float = 0.0
    source: str = ""  # where the figures were fitted (sim/compute/fit.py)

    def __post_init__(self) -> None:
        for name in ("fp32", "tf32", "tensor", "memory", "unaligned"):
            _check_efficiency("kernel costs", name, getattr(self, name))
        if self.launch_us < 0:
            raise ValueError(f"kernel costs: launch_us must be >= 0, got {self.launch_us}")
        if not 1.0 <= self.winograd <= WINOGRAD_MAX:
            raise ValueError(f"kernel costs: winograd must be in [1, {WINOGRAD_MAX}], got {self.winograd}")
        if not 1.0 <= self.sharpness <= SHARPNESS_MAX:
            raise ValueError(f"kernel costs: sharpness must be in [1, {SHARPNESS_MAX}], got {self.sharpness}")
        if self.dispatch_us < 0:
            raise ValueError(f"kernel costs: dispatch_us must be >= 0, got {self.dispatch_us}")
        if self.tile < 0:
            raise ValueError(f"kernel costs: tile must be >= 0, got {self.tile}")

    def efficiency(self, unit: str) -> float:
        """The fitted fraction of peak of `unit` (fp32, tf32 or tensor)."""
        return float(getattr(self, unit))


@dataclass(frozen=True)
class GpuSpec:
    """One GPU (one die, as a cloud instance exposes it)."""

    name: str
    fp32_tflops: float  # peak dense FP32
    fp16_tflops: float  # peak dense FP16 on tensor cores (= fp32 figure when the GPU has none)
    memory_gb: float
    memory_bandwidth_gbs: float  # GB/s
    intra_host_gbps: float  # per-GPU intra-host link, per direction, Gbit/s (NVLink, else PCIe)
    costs: KernelCosts  # the default compute model's constants (sim/compute/roofline.py)
    tf32_tflops: float = 0.0  # peak dense TF32 on tensor cores; 0: none (before Ampere)
    bf16_tflops: float = 0.0  # peak dense BF16 on tensor cores; 0: no BF16 arithmetic
    sms: int = 0  # streaming multiprocessors (what a communication kernel's blocks take from compute)

    def __post_init__(self) -> None:
        for field in _POSITIVE_FIELDS:
            if getattr(self, field) <= 0:
                raise ValueError(f"GPU {self.name!r}: {field} must be > 0")
        if self.tf32_tflops < 0 or self.bf16_tflops < 0:
            raise ValueError(f"GPU {self.name!r}: tf32_tflops and bf16_tflops must be >= 0")

    def tensor_peak(self, precision: str) -> float:
        """Peak TFLOPS of autocast matrix products at `precision` (fp16 or bf16)."""
        if precision == "bf16":
            if not self.bf16_tflops:
                raise ValueError(f"precision 'bf16': the {self.name} has no BF16 arithmetic; allowed: fp32, tf32, fp16")
            return self.bf16_tflops
        return self.fp16_tflops

    def peak_flops(self, precision: str) -> float:
        """Peak FLOP/s of matrix products at `precision`."""
        check_precision(precision)
        if precision in ("fp16", "bf16"):
            return self.tensor_peak(precision) * 1e12
        if precision == "tf32" and self.tf32_tflops:
            return self.tf32_tflops * 1e12
        return self.fp32_tflops * 1e12

    def compute_seconds(self, flops: float, precision: str, efficiency: float) -> float:
        """Seconds to execute `flops` at `precision` at a given fraction of peak (`workload.efficiency`)."""
        if flops < 0:
            raise ValueError(f"flops must be >= 0, got {flops}")
        _check_efficiency(self.name, "efficiency", efficiency)
        return flops / (self.peak_flops(precision) * efficiency)


# 2,496 FP32 cores x 2 FLOPs x 562 MHz (Tesla K80 datasheet: 5.6 TFLOPS per board at base clocks)
K80_BASE_TFLOPS = 2496 * 2 * 0.562e-3

# Fitted by sim/compute/fit.py to sim/catalog/zoo/published_throughput.csv and measured_steps.csv
# (docs/compute_model.md);
# tests/test_compute_fit.py refits them and checks these figures.
_FITTED: dict[str, KernelCosts] = {
    "K80": KernelCosts(
        0.478, 0.763, 0.83, 0.72, 22.6, 2.88, 5.94, 21.7, 0.294, 110, source="12 published + 0 measured rows"
    ),
    "P100": KernelCosts(
        0.61, 0.763, 0.83, 0.721, 22.6, 2.88, 5.94, 21.7, 0.294, 110, source="8 published + 0 measured rows"
    ),
    "V100": KernelCosts(
        0.698, 0.763, 0.829, 0.721, 22.7, 2.88, 5.94, 21.7, 0.294, 110, source="47 published + 0 measured rows"
    ),
    "A100": KernelCosts(
        0.648, 0.763, 0.831, 0.721, 22.6, 2.88, 5.94, 21.7, 0.295, 110, source="37 published + 0 measured rows"
    ),
    "H100": KernelCosts(
        0.759, 0.763, 0.83, 0.72, 22.6, 2.88, 5.94, 21.7, 0.294, 110, source="36 published + 32 measured rows"
    ),
}

_GPUS: dict[str, GpuSpec] = {
    # One GK210 die of a K80 board at its base clock of 562 MHz: the datasheet's 5.6 TFLOPS per board
    # (8.73 at the 875 MHz boost) for two dies. The two dies share the board's 300 W, so under dense
    # arithmetic on both autoboost finds little headroom above the base clock; published K80 training
    # (TensorFlow's benchmarks, the P100 beside it in the same software) runs 4.2x slower than the P100,
    # as the base clock's peak (3.8x) says and the boost clock's (2.4x) does not.
    # Kepler has no fast FP16, so fp16 runs at the fp32 rate.
    "K80": GpuSpec("K80", K80_BASE_TFLOPS, K80_BASE_TFLOPS, 12.0, 240.0, 126.0, _FITTED["K80"], sms=13),
    # P100 SXM2. Its 21.2 TFLOPS half-precision rate needs paired FP16 arithmetic without tensor
    # cores, so, per the field's definition, fp16 is modelled as the fp32 figure.
    "P100": GpuSpec("P100", 10.6, 10.6, 16.0, 732.0, 640.0, _FITTED["P100"], sms=56),
    "V100": GpuSpec("V100", 15.7, 125.0, 16.0, 900.0, 1200.0, _FITTED["V100"], sms=80),
    # A100 SXM4 80GB.
    "A100": GpuSpec(
        "A100", 19.5, 312.0, 80.0, 2039.0, 2400.0, _FITTED["A100"], tf32_tflops=156.0, bf16_tflops=312.0, sms=108
    ),
    # H100 SXM5 (dense figures: the datasheet's headline ones assume 2:4 sparsity).
    "H100": GpuSpec(
        "H100", 67.0, 989.4, 80.0, 3350.0, 3600.0, _FITTED["H100"], tf32_tflops=494.7, bf16_tflops=989.4, sms=132
    ),
    # H200 SXM: the H100's GH100 die with 141 GB of HBM3e at 4.8 TB/s; its kernels cost what the H100's do.
    "H200": GpuSpec(
        "H200", 67.0, 989.4, 141.0, 4800.0, 3600.0, _FITTED["H100"], tf32_tflops=494.7, bf16_tflops=989.4, sms=132
    ),
    # B200 (HGX/DGX B200, 1,000 W): NVIDIA's HGX B200 table gives per 8-GPU board 36 PFLOPS FP16/BF16 and
    # 18 PFLOPS TF32 on tensor cores (with 2:4 sparsity: dense is half) and 600 TFLOPS FP32; the DGX B200
    # datasheet 1,440 GB of HBM3e at 64 TB/s in all, and NVLink 5 at 1.8 TB/s per GPU (900 GB/s each way).
    # 148 SMs is what the CUDA runtime reports on it (no datasheet states it). No published or measured
    # step on a B200 is in the tables yet, so its kernels take the H100's fitted costs as a stand-in
    # (the newest fitted generation; SAME_DIE says so): a guess that Blackwell's efficiencies and
    # launch costs are Hopper's, not a fit.
    "B200": GpuSpec(
        "B200", 75.0, 2250.0, 180.0, 8000.0, 7200.0, _FITTED["H100"], tf32_tflops=1125.0, bf16_tflops=2250.0, sms=148
    ),
}

# Memory variants of a GPU in the catalog: (name, memory in GB) -> bandwidth in GB/s. The A100 SXM4
# 40GB has HBM2 at 1,555 GB/s (NVIDIA A100 datasheet), the 80GB module HBM2e at 2,039; the dies and
# their clocks are the same. Published rows name the module (DGX A100 40GB, "A100 40GB").
MEMORY_VARIANTS: dict[tuple[str, int], float] = {("A100", 40): 1555.0}


def memory_variant(name: str, memory_gb: int) -> GpuSpec:
    """The GPU `name` with `memory_gb` of memory (0: the catalog's module), at that module's bandwidth."""
    gpu = get_gpu(name)
    if not memory_gb or memory_gb == gpu.memory_gb:
        return gpu
    key = (gpu.name, int(memory_gb))
    if key not in MEMORY_VARIANTS:
        known = ", ".join(f"{n} {m}GB" for n, m in MEMORY_VARIANTS)
        raise ValueError(f"no {memory_gb} GB variant of GPU {name!r}; variants: {known}")
    return replace(gpu, memory_gb=float(memory_gb), memory_bandwidth_gbs=MEMORY_VARIANTS[key])


# GPUs that take another's fitted kernel constants, having no published rows of their own: the same die
# (H200), or a stand-in until rows exist (B200: a different die, see its entry)
SAME_DIE: dict[str, str] = {"H200": "H100", "B200": "H100"}
FITTED_GPUS: tuple[str, ...] = tuple(name for name in _GPUS if name not in SAME_DIE)

GPU_NAMES: tuple[str, ...] = tuple(_GPUS)


def get_gpu(name: str) -> GpuSpec:
    """The GPU called `name` (case-insensitive)."""
    key = name.strip().upper() if isinstance(name, str) else None
    if key not in _GPUS:
        raise ValueError(f"unknown GPU {name!r}; choose one of: {', '.join(GPU_NAMES)}")
    return _GPUS[key]
