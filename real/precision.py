"""The workload's `precision` on real hardware: what a forward and backward pass compute in.

| precision | matmuls | convolutions | autocast | loss scaling |
| --- | --- | --- | --- | --- |
| fp32 | fp32 | TF32 allowed (PyTorch's defaults) | off | no |
| tf32 | TF32 | TF32 | off | no |
| fp16 | fp16 | fp16 | float16 | dynamic (`LossScale`) |
| bf16 | bf16 | bf16 | bfloat16 | no (bf16 has fp32's range) |

Master weights and optimizer state stay fp32 in every mode: autocast computes in the low precision
but returns the gradient of the fp32 parameters. The type that gradient travels in is the
workload's `gradient_precision` (real/collectives.py).

fp16 runs the same on the CPU as on a GPU: CPU autocast has float16 kernels (torch >= 2.x), and
the loss scale applies there too, so CI runs the very path a GPU takes (slower, and nobody trains
fp16 on a CPU for speed). TF32 only exists on NVIDIA GPUs; on the CPU tf32 computes in fp32.

The loss scale does not use `torch.amp.GradScaler`. GradScaler skips an optimizer step whose
gradient overflowed. Here the gradient goes to a policy's collectives or parameter servers before
any step, and a skipped step would need every rank and shard to agree to skip it. Instead a rank
whose gradient overflowed halves its scale and computes the gradient again (the batch is the same).
Every rank therefore always sends a finite gradient. The scale grows 2x after `growth_interval`
clean steps, as GradScaler's does. A retry first puts back the module's buffers as they were before
the first try (BatchNorm's running statistics and batch count), so an overflow leaves them as one
forward on the batch would.

One rank's overflow makes the other ranks wait, at the next collective, for its recompute. That
is the price of per-rank recompute, and it is kept: under GradScaler with data-parallel training an
overflow anywhere turns every rank's all-reduced gradient non-finite, and every rank throws away the
whole iteration (compute and communication) and the update with it; here the step loses one rank's
compute and no update, and needs no agreement between ranks and shards. What was missing is the
attribution: the recompute shows only as that rank's longer compute and the others' wait. So each
worker records the steps it recomputed and how often (`overflows`; `RankReport.overflows`, `ranks.csv`). A lower
initial scale would make early retries rarer but would also flush more small fp16 gradients to zero
in the short runs here, which never reach `growth_interval` to grow it back; the initial scale stays
GradScaler's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Optional

import torch

from sim.catalog.gpus import PRECISIONS

_AUTOCAST = {"fp16": torch.float16, "bf16": torch.bfloat16}


def check(precision: str, field: str = "precision") -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"{field}: {precision!r}; allowed: {', '.join(PRECISIONS)}")
    return precision


def configure_tf32(precision: str) -> None:
    """Set the process's TF32 switches: tf32 allows it in matmuls and convolutions; every other
    precision keeps PyTorch's defaults (convolutions only), for the fp32 work outside autocast."""
    check(precision)
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    torch.backends.cudnn.allow_tf32 = True


def autocast(precision: str, device: torch.device | str) -> AbstractContextManager[Any]:
    """The context a forward (and its backward) runs in: autocast for fp16 and bf16, else nothing."""
    check(precision)
    dtype = _AUTOCAST.get(precision)
    if dtype is None:
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


class LossScale:
    """Dynamic loss scaling with recompute on overflow (see the module docstring)."""

    def __init__(
        self, init: float = 2.0**16, growth_interval: int = 2000, min_scale: float = 1.0, max_tries: int = 32
    ) -> None:
        self.scale, self.growth_interval, self.min_scale, self.max_tries = init, growth_interval, min_scale, max_tries
        self.clean = 0  # steps since the scale last changed
        self.overflows = 0  # recomputed gradients, in all

    def gradient(self, compute: Any, rewind: Optional[Callable[[], None]] = None) -> tuple[torch.Tensor, float]:
        """`compute(scale)` -> (gradient of scale x loss divided by scale, loss); retried at half the
        scale while the gradient is not finite, each retry after `rewind()` (which undoes what a try
        changed besides its result: the module's buffers)."""
        for attempt in range(self.max_tries):
            if attempt and rewind is not None:
                rewind()
            grad, loss = compute(self.scale)
            if bool(torch.isfinite(grad).all()):
                self.clean += 1
                if self.clean >= self.growth_interval:
                    self.scale, self.clean = self.scale * 2.0, 0
                return grad, loss
            if self.scale <= self.min_scale or not math.isfinite(loss):
                break  # the loss itself diverged: scaling cannot help
            self.overflows += 1
            self.scale, self.clean = max(self.scale / 2.0, self.min_scale), 0
        raise FloatingPointError(
            f"fp16: the gradient is not finite even at loss scale {self.scale:g} (loss {loss}); try bf16 or fp32"
        )


class PrecisionTask:
    """A numerics task (`sim.numerics.tasks.Task`, `ZooTask`) whose `gradient` runs in `precision` on
    `device`; everything else is the task's own. Under fp16 the task's module buffers are saved
    before each gradient and put back before a retry (see the module docstring)."""

    def __init__(self, task: Any, precision: str, device: torch.device) -> None:
        self.task, self.precision, self.device = task, check(precision), device
        self.loss_scale = LossScale() if precision == "fp16" else None
        self._saved: list[torch.Tensor] = []  # the module's buffers before this gradient's first try

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def gradient(
        self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, out: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, float]:
        """`out`: passed on (a task with `gradient_in_place` writes the gradient into it)."""
        into = {} if out is None else {"out": out}

        def compute(scale: Optional[float] = None) -> tuple[torch.Tensor, float]:
            with autocast(self.precision, self.device):
                if scale is None:
                    return self.task.gradient(flat, x, y, **into)
                return self.task.gradient(flat, x, y, loss_scale=scale, **into)

        if self.loss_scale is None:
            return compute()
        module = getattr(self.task, "module", None)
        buffers = list(module.buffers()) if isinstance(module, torch.nn.Module) else []
        if not buffers:
            return self.loss_scale.gradient(compute)
        if [(b.shape, b.dtype, b.device) for b in buffers] != [(s.shape, s.dtype, s.device) for s in self._saved]:
            self._saved = [torch.empty_like(b) for b in buffers]
        with torch.no_grad():
            torch._foreach_copy_(self._saved, buffers)  # one fused copy, not a kernel per buffer

        def rewind() -> None:
            with torch.no_grad():
                torch._foreach_copy_(buffers, self._saved)

        return self.loss_scale.gradient(compute, rewind)


def overflows(task: Any) -> int:
    """Gradients `task` (a `PrecisionTask`, or any task) has recomputed after an fp16 overflow, in all."""
    scale = getattr(task, "loss_scale", None)
    return scale.overflows if isinstance(scale, LossScale) else 0
