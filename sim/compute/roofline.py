"""The default compute model: each op of a layer takes about the longer of its arithmetic and its
memory traffic, plus the cost of launching its kernels, and under eager PyTorch it cannot start
before the host CPU has issued it (docs/compute_model.md).

Per op, for a batch of B samples at a precision (sim.catalog.gpus.PRECISIONS):

    arithmetic = B * flops / (peak * e_compute),  memory = bytes / (bandwidth * e_memory)
    gpu = (arithmetic^p + memory^p)^(1/p) + kernels * launch_s

a smooth maximum of sharpness p (an op near the ridge point pays for both; a 3x3 convolution on
FP32 cores divides its arithmetic by a fitted Winograd speed-up; a product on tensor cores whose
smaller dimension is w reaches w / (w + tile) of e_compute, a narrow product filling part of each
output tile). The GPU runs the ops in order:
forward layer by layer, then backward from the last layer to the first. Under the `eager`
implementation (what `syncsim real` runs) the CPU issues the kernels one after another at
dispatch_s each (forward, then autograd's backward), so op i finishes at max(finish of op i-1,
when its last kernel is issued) + gpu_i:
a small batch is bound by the CPU, a large one by the GPU. `tuned` implementations (graph
frameworks, CUDA graphs, torch.compile) issue ahead, and the step is the sum of the GPU times;
`fused` ones (XLA, torch.compile, NVIDIA's MXNet and Paddle scripts) also fold each batch norm's
residual add and ReLU into it (ops marked `epilogue`) and compute autocast's FP32 ops (softmax, layer
norm, the loss) in registers on half-precision values, moving no FP32 copies.

The peak follows what PyTorch runs: convolutions on TF32 tensor cores under `fp32` where the GPU
has them (cuDNN's default), matrix products in FP32 unless the precision is `tf32`, both on FP16/BF16
tensor cores under autocast; element-wise ops and lookups on the ordinary cores. Bytes are the op's
activation values at the precision's width (2 under autocast, else 4), plus, on a layer's first op,
its weights once per batch (and under autocast the cast of the FP32 master weights). Backward
costs twice the forward in FLOPs, bytes and kernels (input and weight gradients). The efficiencies
and the launch cost are per GPU, fitted to published training and inference throughputs
(sim/compute/fit.py; figures in sim/catalog/zoo/published_throughput.csv).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.catalog.gpus import GpuSpec, KernelCosts, check_precision
from sim.catalog.zoo.spec import Layer, Op

ACTIVATION_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
AUTOCAST = ("fp16", "bf16")
MASTER_BYTES = 4  # FP32 master weights and their gradients
CAST_BYTES = 6  # autocast reads an FP32 weight and writes its half-precision copy
BACKWARD_FACTOR = 2.0  # input and weight gradients: twice the forward's FLOPs, bytes and kernels
UNITS = ("fp32", "tf32", "tensor")  # arithmetic units, each with its own fitted efficiency
# how the training step is issued: eager PyTorch (kernel by kernel from the CPU), tuned (ahead), or
# fused (ahead, batch norm's epilogues folded in)
IMPLEMENTATIONS = ("eager", "tuned", "fused")
# the units whose products are tiled wide enough for a narrow one to waste part of each tile
TILED_UNITS = ("tf32", "tensor")


def check_implementation(implementation: str) -> str:
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"implementation must be one of: {', '.join(IMPLEMENTATIONS)} (got {implementation!r})")
    return implementation


def arithmetic_unit(gpu: GpuSpec, kind: str, precision: str) -> str:
    """Which unit runs an op of `kind` at `precision` on `gpu`: fp32, tf32 or tensor (FP16/BF16)."""
    check_precision(precision)
    if kind in ("elementwise", "lookup"):
        return "fp32"
    if precision in AUTOCAST:
        return "tensor" if gpu.tensor_peak(precision) > gpu.fp32_tflops else "fp32"
    tf32 = precision == "tf32" or kind == "conv"
    return "tf32" if tf32 and gpu.tf32_tflops > 0 else "fp32"


def peak_flops(gpu: GpuSpec, unit: str, precision: str) -> float:
    if unit == "tensor":
        return gpu.tensor_peak(precision) * 1e12
    return (gpu.tf32_tflops if unit == "tf32" else gpu.fp32_tflops) * 1e12


@dataclass(frozen=True)
class OpTable:
    """A model's ops for one batch and precision, forward then backward, at 100% efficiency: what
    `seconds` turns into times for any constants (the fit evaluates it many times)."""

    layer: np.ndarray  # layer index of each op
    backward: np.ndarray  # bool
    unit: np.ndarray  # index into UNITS
    compute_s: np.ndarray  # arithmetic at the unit's peak
    memory_s: np.ndarray  # bytes at full memory bandwidth
    kernels: np.ndarray
    winograd: np.ndarray  # bool: a 3x3 convolution on FP32 cores (cuDNN's Winograd applies)
    layers: int
    order: np.ndarray  # the ops' indices in the order the GPU runs them
    unaligned: np.ndarray  # bool: a matrix product on tensor cores with a dimension not a multiple of 8
    epilogue: np.ndarray  # bool: fused into the op before it by tuned implementations
    width: np.ndarray | None = None  # a product's smaller dimension (inf or None: wide, or not a product)
    # of memory_s and kernels, what autocast's FP32 ops add by moving FP32 values after a cast kernel
    # (None: nothing); `fused` implementations compute them in FP32 registers on half-precision values
    upcast_s: np.ndarray | None = None
    upcast_kernels: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.width is None:  # every op fills its tiles
            object.__setattr__(self, "width", np.full(np.shape(self.kernels), np.inf))
        for name in ("upcast_s", "upcast_kernels"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, np.zeros(np.shape(self.kernels)))

    def gpu_seconds(self, costs: KernelCosts, implementation: str = "eager") -> np.ndarray:
        """Each op's time on the GPU under `costs` (a `fused` implementation moves autocast's FP32
        ops at half precision, without their cast kernels)."""
        memory_s, kernels = self.memory_s, self.kernels
        if check_implementation(implementation) == "fused":
            memory_s, kernels = memory_s - self.upcast_s, kernels - self.upcast_kernels
        efficiency = np.array([costs.efficiency(unit) for unit in UNITS])[self.unit]
        efficiency = np.where(self.winograd, efficiency * costs.winograd, efficiency)
        efficiency = np.where(self.unaligned, efficiency * costs.unaligned, efficiency)
        if costs.tile:  # a narrow product fills only part of each tile (width inf: the whole tile)
            tiled = np.isin(self.unit, [UNITS.index(unit) for unit in TILED_UNITS])
            width = np.inf if self.width is None else self.width
            efficiency = np.where(tiled, efficiency / (1.0 + costs.tile / width), efficiency)
        p = costs.sharpness
        arithmetic, memory = self.compute_s / efficiency, memory_s / costs.memory
        longer = np.maximum(arithmetic, memory)
        with np.errstate(divide="ignore", invalid="ignore"):  # ops that move and compute nothing
            busy = np.where(longer > 0, longer * ((arithmetic / longer) ** p + (memory / longer) ** p) ** (1 / p), 0.0)
        return busy + kernels * costs.launch_us * 1e-6

    def seconds(self, costs: KernelCosts, implementation: str = "eager") -> np.ndarray:
        """Each op's share of the step under `costs`: its GPU time, plus under `eager` the time
        the GPU idles before the CPU has issued it (they sum to the step). Works along the last
        axis, so a `stack` of tables gives one row of shares per table."""
        gpu = self.gpu_seconds(costs, implementation)
        if implementation == "fused":
            return np.where(self.epilogue, 0.0, gpu)
        if implementation == "tuned":
            return gpu
        if not costs.dispatch_us:
            return gpu
        ordered = np.take_along_axis(gpu, self.order, axis=-1)
        # the host issues every kernel in turn, the backward's too: autograd's engine runs each
        # backward op through the same dispatcher and launch as the forward's, after the forward
        host = np.take_along_axis(self.kernels, self.order, axis=-1)
        issued = np.cumsum(host, axis=-1) * costs.dispatch_us * 1e-6  # its last kernel issued
        done = np.cumsum(ordered, axis=-1)
        before = done - ordered  # GPU work queued ahead of each op
        finish = done + np.maximum(0.0, np.maximum.accumulate(issued - before, axis=-1))
        shares = np.empty_like(gpu)
        np.put_along_axis(shares, self.order, np.diff(finish, axis=-1, prepend=0.0), axis=-1)
        return shares

    def layer_seconds(self, costs: KernelCosts, implementation: str = "eager") -> tuple[np.ndarray, np.ndarray]:
        """Per-layer (forward, backward) seconds under `costs`."""
        times = self.seconds(costs, implementation)
        forward = np.bincount(self.layer[~self.backward], times[~self.backward], minlength=self.layers)
        backward = np.bincount(self.layer[self.backward], times[self.backward], minlength=self.layers)
        return forward, backward


def stack(tables: Sequence[OpTable]) -> OpTable:
    """`tables` as one table of one row each, padded with ops that cost nothing and run last, so
    that `seconds` evaluates them all in one pass (the fit evaluates hundreds of rows per step)."""
    width = max(len(t.order) for t in tables)

    def padded(field: str, fill: object) -> np.ndarray:
        columns = [getattr(t, field) for t in tables]
        out = np.full((len(tables), width), fill, dtype=columns[0].dtype)
        for row, column in zip(out, columns, strict=True):
            row[: len(column)] = column
        return out

    order = np.tile(np.arange(width), (len(tables), 1))
    for row, t in zip(order, tables, strict=True):
        row[: len(t.order)] = t.order
    return OpTable(
        padded("layer", 0),
        padded("backward", True),
        padded("unit", 0),
        padded("compute_s", 0.0),
        padded("memory_s", 0.0),
        padded("kernels", 0.0),
        padded("winograd", False),
        max(t.layers for t in tables),
        order,
        padded("unaligned", False),
        padded("epilogue", False),
        padded("width", np.inf),
        padded("upcast_s", 0.0),
        padded("upcast_kernels", 0.0),
    )


def op_table(gpu: GpuSpec, layers: Sequence[Layer], batch: int, precision: str) -> OpTable:
    """The ops of `layers` for `batch` samples at `precision` on `gpu` (weights on each layer's
    first op; autocast's weight cast as a kernel of its own)."""
    bandwidth = gpu.memory_bandwidth_gbs * 1e9
    width = ACTIVATION_BYTES[check_precision(precision)]
    rows: list[tuple[int, bool, int, float, float, float, bool, bool, bool, float, float, float]] = []
    for index, layer in enumerate(layers):
        weights = weight_bytes(layer, precision)
        # backward reads the weights and writes their gradient; a table's dense gradient (PyTorch's
        # default) is written whole
        gradient = BACKWARD_FACTOR * weights if not layer.rows else float(layer.params * MASTER_BYTES)
        for backward, factor, extra in ((False, 1.0, weights), (True, BACKWARD_FACTOR, gradient)):
            for i, op in enumerate(layer_ops(layer)):
                unit = arithmetic_unit(gpu, op.kind, precision)
                compute = factor * batch * op.flops / peak_flops(gpu, unit, precision)
                values = factor * batch * op.moved
                kernels = factor * op.kernels
                upcast = 0.0
                if op.full_precision and precision in AUTOCAST:  # cast the input (half the values) up
                    moved = values * MASTER_BYTES + values / 2 * (width + MASTER_BYTES)
                    upcast = moved - values * width
                    kernels += factor
                else:
                    moved = values * width
                moved += extra if i == 0 else 0.0
                winograd = op.winograd and unit == "fp32"
                unaligned = not op.aligned and unit != "fp32"
                rows.append(
                    (
                        index,
                        backward,
                        UNITS.index(unit),
                        compute,
                        moved / bandwidth,
                        kernels,
                        winograd,
                        unaligned,
                        op.epilogue,
                        op.width if op.width and op.kind in ("conv", "matmul") else np.inf,
                        upcast / bandwidth,
                        factor if upcast else 0.0,
                    )
                )
        if weights and casts_weights(layer, precision):
            # a cast kernel per tensor (weight, bias), and in backward their gradients' casts back
            # to FP32 (bytes above)
            casts = 2.0 if layer.bias else 1.0
            rows += [
                (index, backward, 0, 0.0, 0.0, casts, False, False, False, np.inf, 0.0, 0.0)
                for backward in (False, True)
            ]
    columns = list(zip(*rows))
    backward = np.array(columns[1], dtype=bool)
    layer = np.array(columns[0], dtype=np.int64)
    # forward layer by layer, then backward from the last layer (each layer's ops in reverse)
    order = np.lexsort(
        (np.where(backward, -np.arange(len(rows)), np.arange(len(rows))), np.where(backward, -layer, layer), backward)
    )
    return OpTable(
        np.array(columns[0], dtype=np.int64),
        np.array(columns[1], dtype=bool),
        np.array(columns[2], dtype=np.int64),
        np.array(columns[3]),
        np.array(columns[4]),
        np.array(columns[5]),
        np.array(columns[6], dtype=bool),
        len(layers),
        order,
        np.array(columns[7], dtype=bool),
        np.array(columns[8], dtype=bool),
        np.array(columns[9]),
        np.array(columns[10]),
        np.array(columns[11]),
    )


def layer_ops(layer: Layer) -> tuple[Op, ...]:
    """The layer's ops; a layer without any (synthetic) is one matrix product moving nothing."""
    return layer.ops or (Op("matmul", layer.forward_flops, 0.0),)


def weight_bytes(layer: Layer, precision: str) -> float:
    """Weights a forward pass reads once per batch (plus autocast's cast of them)."""
    if not layer.params or layer.rows:  # a table: only the looked-up rows move (counted on its op)
        return 0.0
    per_value = MASTER_BYTES + (CAST_BYTES if casts_weights(layer, precision) else 0)
    return layer.params * per_value


def casts_weights(layer: Layer, precision: str) -> bool:
    """Whether autocast casts the layer's weights to half precision: those of convolutions and
    matrix products (normalisations run on their FP32 parameters, tables are not cast)."""
    return precision in AUTOCAST and not layer.rows and layer_ops(layer)[0].kind in ("conv", "matmul")


def model_seconds(
    gpu: GpuSpec,
    costs: KernelCosts,
    layers: Sequence[Layer],
    batch: int,
    precision: str,
    implementation: str = "eager",
) -> tuple[list[float], list[float]]:
    """Per-layer forward and backward seconds of a model for `batch` samples."""
    forward, backward = op_table(gpu, layers, batch, precision).layer_seconds(costs, implementation)
    return forward.tolist(), backward.tolist()
