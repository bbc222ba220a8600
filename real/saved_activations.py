"""What autograd keeps for backward, per profiled layer: the bytes of the tensors one forward pass saves
(`torch.autograd.graph.saved_tensors_hooks`, whose pack hook sees every tensor an op saves), measured at
the profile's precision (autocast included) on its device.

- **Which layer.** A saved tensor belongs to the layer whose module was called last (a forward pre-hook on
  each module owning the layer's parameters, at every call): its own work, then the parameter-free work
  after it (activations, pooling, the loss after the last layer), as a profile's `forward_s` counts it.
  What is saved before any layer is called goes to the first one called.
- **Once per storage.** Tensors sharing a storage (an output saved by several consumers, a view of it)
  count once, its storage's whole size, for the layer that saved it first: a ReLU's output, which the next
  `Linear` saves again as its input, belongs to the ReLU's layer.
- **Activations only.** Parameters and buffers, their views (a weight's transpose: the same storage) and
  autocast's 16-bit copies of parameters (a chain of cast and view nodes back to the parameter's
  gradient accumulator) are left out: they do not grow with the batch, and the memory model counts the
  weights and their 16-bit copies as parameters (sim/memory/peak.py). Inputs, targets and whatever else
  the batch brings are counted. A frozen parameter's autocast copy has no such chain and is counted.

Inside a region of the module's own `torch.utils.checkpoint` its hooks take precedence, so what backward
recomputes is not seen; the region's input, which it keeps, is: what is measured is what the module, as
written, keeps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, Optional

import torch
from torch import nn

from real.precision import autocast

# autograd nodes that only cast or re-view one input: a saved tensor reached from a parameter through
# these alone is that parameter's (autocast's cast copy, its transpose), not an activation
_SAME_VALUES = {
    "ToCopyBackward",
    "TBackward",
    "TransposeBackward",
    "PermuteBackward",
    "ViewBackward",
    "UnsafeViewBackward",
    "ReshapeAliasBackward",
    "ExpandBackward",
    "AliasBackward",
    "SqueezeBackward",
    "UnsqueezeBackward",
    "SliceBackward",
    "SelectBackward",
    "AsStridedBackward",
    "CloneBackward",
}
_MAX_CHAIN = 16  # cast and view nodes followed back from a saved tensor; a real chain has two or three


def _node_kind(node: Any) -> str:
    return re.sub(r"\d+$", "", type(node).__name__)


class _Ledger:
    """The pack hook's bookkeeping: the layer now running, the storages seen, the bytes per layer."""

    def __init__(self, count: int, state: set[int], state_ids: set[int]) -> None:
        self.current: Optional[int] = None
        self.bytes = [0] * count
        self.lead_in = 0  # saved before any layer was called
        self.seen: set[Any] = set()
        self.state = state  # data pointers of the parameters' and buffers' storages
        self.state_ids = state_ids  # ids of the parameters (what a gradient accumulator holds)

    def _from_state(self, tensor: torch.Tensor, storage: int) -> bool:
        if storage in self.state:
            return True
        node = tensor.grad_fn
        for _ in range(_MAX_CHAIN):
            if node is None:
                return False
            if _node_kind(node) == "AccumulateGrad":
                return id(getattr(node, "variable", None)) in self.state_ids
            if _node_kind(node) not in _SAME_VALUES:
                return False
            inputs = [n for n, _ in node.next_functions if n is not None]
            node = inputs[0] if len(inputs) == 1 else None
        return False

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        try:
            storage = tensor.untyped_storage()
            key: Any = (tensor.device, storage.data_ptr())
            size = storage.nbytes()
        except (RuntimeError, NotImplementedError):  # no plain storage (a sparse or wrapper tensor)
            key, size = id(tensor), tensor.numel() * tensor.element_size()
        if size and key not in self.seen and not (isinstance(key, tuple) and self._from_state(tensor, key[1])):
            self.seen.add(key)
            if self.current is None:
                self.lead_in += size
            else:
                self.bytes[self.current] += size
        return tensor  # autograd keeps the tensor as it would without the hook

    def enter(self, index: int) -> None:
        if self.current is None:
            self.bytes[index] += self.lead_in
            self.lead_in = 0
        self.current = index


def saved_bytes(
    module: nn.Module,
    args: Sequence[torch.Tensor],
    y: Any,
    loss_fn: Callable[[Any, Any], torch.Tensor],
    layout: Sequence[tuple[str, Sequence[str]]],
    precision: str,
    where: torch.device,
) -> list[int]:
    """Per layer of `layout` (its name and its parameters' full names), the bytes of activations autograd
    saves for backward in one forward pass of `module` on `args`, loss included (the module docstring says
    which layer gets what)."""
    state = {t.untyped_storage().data_ptr() for t in (*module.parameters(), *module.buffers()) if t.numel()}
    ledger = _Ledger(len(layout), state, {id(p) for p in module.parameters()})
    modules = dict(module.named_modules())
    handles = []
    for index, (_, names) in enumerate(layout):
        for owner in {name.rsplit(".", 1)[0] if "." in name else "" for name in names}:
            hook = modules[owner].register_forward_pre_hook(lambda *_, i=index: ledger.enter(i))
            handles.append(hook)
    module.zero_grad(set_to_none=True)
    try:
        with torch.autograd.graph.saved_tensors_hooks(ledger.pack, lambda t: t), autocast(precision, where):
            loss = loss_fn(module(*args), y)
    finally:
        for handle in handles:
            handle.remove()
    del loss  # the graph and what it saved are freed here; nothing runs backward
    if ledger.lead_in and ledger.bytes:  # no layer was ever called: the first layer holds it all
        ledger.bytes[0] += ledger.lead_in
    return ledger.bytes
