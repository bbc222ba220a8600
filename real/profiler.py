"""`syncsim profile MODEL`: a zoo model's (or your own module's) per-layer forward and backward seconds,
measured here.

The model is the zoo's torch.nn twin (`sim.numerics.zoo_nets`) on a seeded synthetic batch of the
zoo's input shape (224x224 images, 32x32 for the CIFAR networks, 128 BERT tokens, 1,024 GPT-2
tokens, one Criteo example). Timestamps are taken where the work of each layer is enqueued and
done: a forward pre-hook on the modules that own a layer's parameters marks its first use, a
post-accumulate-grad hook on its parameters marks its gradients ready (`sim.compute.profile` says what each
span covers). On a GPU the requested device is made current for the whole measurement (the
module, the batch, autocast and every allocation live there, whichever device was current before),
and the stamps are CUDA events recorded on that device's current stream, read after synchronizing
that device; on the CPU, `time.perf_counter`. After `warmup` untimed iterations, each layer's time is
the median over `repeats` timed ones, recorded with its spread (minimum, quartiles, maximum), as is
the whole iteration's (`step_s`), so that a measurement disturbed by other work shows
(`sim.compute.profile.unsteady_spans`). The precision (fp32, tf32, fp16, bf16) is set as training
sets it (`real.precision`): TF32 switches, and autocast for fp16 and bf16. fp16 profiles the scaled
loss's backward as fp16 training runs it; the loss scale changes no kernel, so it is left out here.
After the timed iterations, one more forward pass measures each layer's activations, the bytes autograd
saves for backward (`real.saved_activations`), untimed: its hooks would otherwise be in the times.

Your own module (`measure_module_profile`, `module:factory`) is built, fed and scored as
`real.user_model` says, its layers stamped the same way, and its profile also records each layer's
parameter shapes, so that it stands for the model (`workload.model: profiled`).
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn

from real.model_input import InputSpec
from real.precision import autocast, check, configure_tf32
from real.saved_activations import saved_bytes
from real.user_model import (
    build_module,
    describe_loss,
    first_calls,
    layout_shapes,
    loss_function,
    module_layout,
    output_tensor,
    sample_inputs,
)
from sim.catalog.zoo import canonical_name, get_model
from sim.catalog.zoo.recsys import CRITEO_HASHED_FEATURES
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS
from sim.compute.profile import MAX_LAYERS, ComputeProfile, LayerTime, Spread
from sim.errors import UsageError
from sim.numerics.zoo_nets import FIELDS, build_zoo_module, flat_layout
from sim.numerics.zoo_task import IMAGE_MODELS, objective, token_sequences

SYMBOLS = 1000  # distinct tokens of the synthetic sequences


def sample_batch(name: str, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch of the zoo model's input shape, with targets for its loss."""
    g = torch.Generator().manual_seed(seed)
    if name in IMAGE_MODELS:
        size = IMAGE_MODELS[name]
        return torch.randn(batch, 3, size, size, generator=g), torch.zeros(batch, dtype=torch.int64)
    if name == "deepfm":
        block = CRITEO_HASHED_FEATURES // FIELDS
        x = torch.arange(FIELDS) * block + torch.randint(block, (batch, FIELDS), generator=g)
        return x, torch.randint(2, (batch,), generator=g).float()
    return token_sequences(name, SEQUENCE_LENGTHS[name], SYMBOLS, batch, g)


def on_device(device: torch.device) -> AbstractContextManager[Any]:
    """`device` made the current CUDA device for the block (a GPU), else nothing: work that names no
    device index (events, synchronize, `cuda` allocations) then lands on it, not on GPU 0."""
    return torch.cuda.device(device) if device.type == "cuda" else nullcontext()


class Clock:
    """Stamps of `device`'s progress: CUDA events on its current stream on a GPU, wall time on the CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"

    def stamp(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start

    def wait(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)


def measure_profile(
    model: str,
    batch: int,
    precision: str = "fp32",
    device: Optional[str] = None,
    warmup: int = 3,
    repeats: int = 10,
    seed: int = 0,
) -> ComputeProfile:
    """Time one training iteration of zoo `model` at `batch` on `device` (default: the current CUDA
    device, else the CPU), layer by layer."""
    check(precision)
    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if where.type == "cuda" and where.index is None:
        where = torch.device("cuda", torch.cuda.current_device())
    with on_device(where):
        return _measure(canonical_name(model), batch, precision, where, warmup, repeats, seed)


def _measure(
    name: str, batch: int, precision: str, where: torch.device, warmup: int, repeats: int, seed: int
) -> ComputeProfile:
    spec = get_model(name)
    torch.manual_seed(seed)
    module = build_zoo_module(name).to(where).train()
    x, y = (t.to(where) for t in sample_batch(name, batch, seed))
    layout = flat_layout(module, spec)
    loss_fn = objective(name)[0]
    layers, steps = _time(module, (x,), y, loss_fn, layout, precision, where, warmup, repeats)
    layers = _with_saved(layers, saved_bytes(module, (x,), y, loss_fn, layout, precision, where))
    return ComputeProfile(
        name, batch, precision, tuple(layers), device_label(where), _notes(warmup, repeats, seed), *_step(steps)
    )


def measure_module_profile(
    target: str,
    inputs: Sequence[InputSpec],
    batch: int,
    classes: Optional[int] = None,
    precision: str = "fp32",
    device: Optional[str] = None,
    warmup: int = 3,
    repeats: int = 10,
    seed: int = 0,
    folder: Optional[Path] = None,
) -> ComputeProfile:
    """Time one training iteration of the user's module `target` (`module:factory`, real.user_model) on a
    seeded batch of `inputs` at `batch`, layer by layer, recording each layer's parameter shapes: a
    profile that stands for the model (`workload.model: profiled`)."""
    check(precision)
    where = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if where.type == "cuda" and where.index is None:
        where = torch.device("cuda", torch.cuda.current_device())
    with on_device(where):
        torch.manual_seed(seed)
        module = build_module(target, folder).to(where).train()
        g = torch.Generator().manual_seed(seed)
        args = [t.to(where) for t in sample_inputs(inputs, batch, g)]
        with torch.no_grad(), autocast(precision, where):  # a first call: the layers' order, the output's shape
            called, out = first_calls(module, lambda: module(*args), target)
        loss_fn, y = loss_function(classes, output_tensor(out, target), g, target)
        layout = module_layout(module, called)
        if len(layout) > MAX_LAYERS:
            raise UsageError(
                f"{target}: {len(layout):,} layers (modules owning parameters); a profile holds {MAX_LAYERS:,}"
            )
        layers, steps = _time(module, args, y, loss_fn, layout, precision, where, warmup, repeats)
        layers = _with_saved(layers, saved_bytes(module, args, y, loss_fn, layout, precision, where))
        shaped = tuple(replace(t, shapes=s) for t, s in zip(layers, layout_shapes(module, layout)))
    notes = {
        "input": [str(spec) for spec in inputs],
        "loss": describe_loss(classes),
        **_notes(warmup, repeats, seed),
    }
    return ComputeProfile(target, batch, precision, shaped, device_label(where), notes, *_step(steps))


def _with_saved(layers: list[LayerTime], saved: list[int]) -> list[LayerTime]:
    return [replace(layer, saved_bytes=nbytes) for layer, nbytes in zip(layers, saved)]


def device_label(where: torch.device) -> str:
    """The device as a profile names it: the GPU's name, or the CPU's kind and its threads."""
    if where.type == "cuda":
        return torch.cuda.get_device_name(where)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def _notes(warmup: int, repeats: int, seed: int) -> dict[str, Any]:
    return {"torch": str(torch.__version__), "warmup": warmup, "repeats": repeats, "statistic": "median", "seed": seed}


def _step(steps: list[float]) -> tuple[float, Spread]:
    return statistics.median(steps), Spread.of(steps)


def _time(
    module: nn.Module,
    args: Sequence[torch.Tensor],
    y: Any,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    layout: list[tuple[str, list[str]]],
    precision: str,
    where: torch.device,
    warmup: int,
    repeats: int,
) -> tuple[list[LayerTime], list[float]]:
    """Each layer's median forward and backward seconds with their spreads, and each timed step's seconds."""
    clock = Clock(where)
    forward_marks: dict[int, Any] = {}
    ready_marks: dict[int, Any] = {}
    counts: dict[int, int] = {}  # parameters of each layer whose gradients are in, this iteration
    handles = _hooks(module, layout, clock, forward_marks, ready_marks, counts)
    configure_tf32(precision)
    samples: list[tuple[list[float], list[float]]] = []
    steps: list[float] = []  # each timed iteration, forward and backward
    try:
        for i in range(warmup + repeats):
            for marks in (forward_marks, ready_marks, counts):
                marks.clear()
            module.zero_grad(set_to_none=True)
            clock.wait()
            start = clock.stamp()
            with autocast(precision, where):
                loss = loss_fn(module(*args), y)
            backward_start = clock.stamp()
            loss.backward()
            end = clock.stamp()
            clock.wait()
            if i >= warmup:
                samples.append(_spans(len(layout), forward_marks, ready_marks, start, backward_start, end, clock))
                steps.append(clock.seconds(start, end))
    finally:
        for handle in handles:
            handle.remove()
    layers = []
    for index, (layer_name, _) in enumerate(layout):
        forward, backward = [s[0][index] for s in samples], [s[1][index] for s in samples]
        layers.append(
            LayerTime(
                layer_name,
                statistics.median(forward),
                statistics.median(backward),
                Spread.of(forward),
                Spread.of(backward),
            )
        )
    return layers, steps


def _hooks(
    module: nn.Module,
    layout: list[tuple[str, list[str]]],
    clock: Clock,
    forward_marks: dict[int, Any],
    ready_marks: dict[int, Any],
    counts: dict[int, int],
) -> list[Any]:
    """Forward pre-hooks on each layer's owning modules (first use wins) and post-accumulate-grad
    hooks on its parameters (the last one ready marks the layer ready)."""
    params = dict(module.named_parameters())
    modules = dict(module.named_modules())
    handles: list[Any] = []
    for index, (_, names) in enumerate(layout):
        owners = {name.rsplit(".", 1)[0] if "." in name else "" for name in names}
        for owner in owners:
            handles.append(modules[owner].register_forward_pre_hook(_first_use(index, clock, forward_marks)))
        for name in names:
            hook = _ready(index, len(names), clock, ready_marks, counts)
            handles.append(params[name].register_post_accumulate_grad_hook(hook))
    return handles


def _first_use(index: int, clock: Clock, marks: dict[int, Any]) -> Callable[..., None]:
    def hook(*_: Any) -> None:
        if index not in marks:
            marks[index] = clock.stamp()

    return hook


def _ready(index: int, count: int, clock: Clock, marks: dict[int, Any], counts: dict[int, int]) -> Callable[..., None]:
    def hook(_: torch.Tensor) -> None:
        counts[index] = counts.get(index, 0) + 1
        if counts[index] == count:  # the layer's last parameter: its gradients are all there
            marks[index] = clock.stamp()

    return hook


def _spans(
    count: int,
    forward_marks: dict[int, Any],
    ready_marks: dict[int, Any],
    start: Any,
    backward_start: Any,
    end: Any,
    clock: Clock,
) -> tuple[list[float], list[float]]:
    """Per layer: forward from its first use to the next first use (the last: to the loss), backward
    from the previous readiness (backward's start, for the first) to its own. A layer never used or
    never ready (unused parameters) gets 0 and its time stays with its neighbour."""
    forward = [0.0] * count
    order = sorted(forward_marks, key=lambda i: clock.seconds(start, forward_marks[i]))
    bounds = [start, *(forward_marks[i] for i in order[1:]), backward_start]  # the first layer takes the lead-in
    for here, (begin, until) in zip(order, zip(bounds, bounds[1:])):
        forward[here] = clock.seconds(begin, until)
    backward = [0.0] * count
    ready = sorted(ready_marks, key=lambda i: clock.seconds(backward_start, ready_marks[i]))
    bounds = [backward_start, *(ready_marks[i] for i in ready[:-1]), end]  # the last layer takes the tail
    for here, (begin, until) in zip(ready, zip(bounds, bounds[1:])):
        backward[here] = clock.seconds(begin, until)
    return forward, backward
