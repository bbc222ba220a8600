"""A user's own `torch.nn.Module` for `syncsim profile module:factory`: the file that defines it (found
as policy plug-ins are, docs/policies.md), the module its factory builds, its layers and its loss.

Its layers are the modules that own trainable parameters directly (`named_parameters(recurse=False)`;
a leaf `Linear` or a custom module's own `nn.Parameter`), in the order a forward pass first calls them.
A layer whose module is never called (another module's code reads its weights) comes after those, in
parameter order. Frozen parameters (`requires_grad=False`) get no gradient, so they belong to no layer.

The loss is the output's mean, or with `classes` the cross-entropy against ids drawn uniformly from
[0, classes), one per position of the output's last dimension (which must be `classes` long). The
output is the forward's tensor, or the first item of a tuple, list or mapping it returns.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import torch
from torch import nn
from torch.nn import functional as F

from policies.registry import exec_file
from real.model_input import TARGET_FORM, InputSpec, parse_target
from sim.errors import UsageError

ROOT_LAYER = "(root)"  # the name of the layer of parameters the top module owns itself
Layout = list[tuple[str, list[str]]]  # per layer: its name and its parameters' full names


def _refuse(target: str, why: str) -> UsageError:
    return UsageError(f"{target}: {why}")


def _split(target: str) -> tuple[str, str]:
    """`parse_target`, its argument error as a UsageError (for callers other than argparse)."""
    try:
        return parse_target(target)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None


def module_file(target: str, folder: Optional[Path] = None) -> Path:
    """The `module.py` of `module:factory`, in `folder` (default: the working directory); nothing imported."""
    module, _ = _split(target)
    file = (folder or Path.cwd()) / f"{module}.py"
    if not file.is_file():
        raise _refuse(target, f"no file {module}.py in {file.parent}; expected {TARGET_FORM}")
    return file.resolve()


def load_factory(target: str, folder: Optional[Path] = None) -> Callable[[], Any]:
    """Run the file's top-level code once, as module `module`, and return its `factory`. A module of that
    name imported from elsewhere (installed, or another file) is refused: the file would shadow it."""
    module_name, factory = _split(target)
    file = module_file(target, folder)
    loaded = sys.modules.get(module_name)
    if loaded is None:
        found = importlib.util.find_spec(module_name)
        if found is not None and found.origin and Path(found.origin).resolve() != file:
            raise _refuse(target, f"{file.name} would shadow the installed module {module_name!r}; rename the file")
        try:
            loaded = exec_file(module_name, file)
        except Exception as exc:  # the file's own error, in one line
            raise _refuse(target, f"running {file.name} raised {type(exc).__name__}: {exc}") from None
        if loaded is None:
            raise _refuse(target, f"{file} cannot be loaded as a Python file")
    elif (there := getattr(loaded, "__file__", None)) is None or Path(there).resolve() != file:
        raise _refuse(target, f"{file.name} would shadow the module {module_name!r} already imported; rename the file")
    obj: Any = loaded
    for part in factory.split("."):
        if not hasattr(obj, part):
            raise _refuse(target, f"{file.name} defines no {factory!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise _refuse(target, f"{factory!r} is not callable; expected a function or class returning an nn.Module")
    return obj


def build_module(target: str, folder: Optional[Path] = None) -> nn.Module:
    """The module `factory()` returns (its errors, or anything else returned, in one line)."""
    factory = load_factory(target, folder)
    try:
        module = factory()
    except Exception as exc:
        raise _refuse(target, f"calling it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(module, nn.Module):
        raise _refuse(target, f"returned a {type(module).__name__}, not a torch.nn.Module")
    if not any(p.requires_grad for p in module.parameters()):
        raise _refuse(target, "the module has no trainable parameters: nothing to synchronize")
    return module


def output_tensor(out: Any, target: str) -> torch.Tensor:
    """The tensor a loss is taken of: the output, or the first item of a tuple, list or mapping."""
    first = out
    if isinstance(out, Mapping):
        first = next(iter(out.values()), None)
    elif isinstance(out, Sequence) and not isinstance(out, str):
        first = out[0] if len(out) else None
    if not isinstance(first, torch.Tensor) or not first.is_floating_point():
        raise _refuse(
            target,
            f"forward returned {type(out).__name__}; expected a float tensor (or a tuple or mapping whose "
            "first item is one)",
        )
    return first


def first_calls(module: nn.Module, run: Callable[[], Any], target: str) -> tuple[list[str], Any]:
    """The names of `module`'s submodules in the order one call of `run` first calls them, and its output."""
    order: dict[str, None] = {}
    handles = [
        sub.register_forward_pre_hook(lambda *_, name=name: order.setdefault(name, None))
        for name, sub in module.named_modules()
    ]
    try:
        out = run()
    except Exception as exc:  # the user's forward on the batch the flags describe: its error in one line
        raise _refuse(target, f"forward on the --input batch raised {type(exc).__name__}: {exc}") from None
    finally:
        for handle in handles:
            handle.remove()
    return list(order), out


def module_layout(module: nn.Module, called: Sequence[str]) -> Layout:
    """Per layer (a module owning trainable parameters directly), its name and its parameters' full
    names (as `named_parameters` gives them, a tied weight once), in the order of `called`, then the
    uncalled owners in parameter order."""
    owned: dict[str, list[str]] = {}
    for name, param in module.named_parameters():
        if param.requires_grad:
            owned.setdefault(name.rsplit(".", 1)[0] if "." in name else "", []).append(name)
    order = [owner for owner in called if owner in owned] + [owner for owner in owned if owner not in called]
    return [(owner or ROOT_LAYER, owned[owner]) for owner in order]


def layout_shapes(module: nn.Module, layout: Layout) -> list[tuple[tuple[int, ...], ...]]:
    """Per layer, its parameters' shapes in its module's order."""
    params = dict(module.named_parameters())
    return [tuple(tuple(params[name].shape) for name in names) for _, names in layout]


def loss_function(classes: Optional[int], output: torch.Tensor, generator: torch.Generator, target: str) -> Any:
    """The loss `loss(out, y)` and its targets `y` for an output shaped like `output`: the output's mean
    (no targets), or cross-entropy against seeded ids below `classes`."""
    if classes is None:
        return (lambda out, _: output_tensor(out, target).mean()), None
    if output.dim() < 2 or output.shape[-1] != classes:
        raise UsageError(
            f"--classes: {classes}, but the output of {target} is shaped {tuple(output.shape)}; cross-entropy "
            f"needs its last dimension to be the {classes} classes (or leave --classes out: the loss is the mean)"
        )
    y = torch.randint(classes, tuple(output.shape[:-1]), generator=generator).to(output.device)

    def loss(out: Any, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output_tensor(out, target).reshape(-1, classes), y.reshape(-1))

    return loss, y


def describe_loss(classes: Optional[int]) -> str:
    """The loss as the profile's notes record it."""
    return "mean of the output" if classes is None else f"cross-entropy over {classes} classes, uniform targets"


def sample_inputs(inputs: Sequence[InputSpec], batch: int, generator: torch.Generator) -> list[torch.Tensor]:
    """One seeded batch per `--input`, in order (the forward's positional arguments)."""
    return [spec.batch(batch, generator) for spec in inputs]
