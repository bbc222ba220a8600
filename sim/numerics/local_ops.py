"""What a policy's local ops (`policies.ops.LocalOp`) do to one worker's flat tensors, on both backends.

A `TensorStore` holds one worker's named 1-D tensors: `parameters` and `gradients` (views the backend
owns) and the buffers the policy declared (`Policy.buffers`), plus the state of each policy-owned
optimizer (`OptimizerStep.state`). Numerics mode keeps one store per simulated worker, the real backend
one per process; both call `apply` with the element ranges the op acts on (`op_ranges`), so they leave
the same bits.

Rules:
- `Combine`: every term is read (over the ranges) before `out` is written; summed in fp32 in term order.
- `OptimizerStep`: torch.optim's update rules, elementwise over the ranges. sgd: g += weight_decay * p;
  buf = momentum * buf + g (buf = g at the first step, as torch starts it); p -= lr * (g + momentum * buf
  if nesterov else buf). adamw: p *= 1 - lr * weight_decay; m, v moments with bias correction by each
  element's own step count (fragments step at different times); p -= lr * m_hat / (sqrt(v_hat) + eps),
  with sqrt(v_hat) = sqrt(v) / sqrt(1 - beta2^t) as torch computes it.
- `Encode`: v = source (+ residual); top-k keeps the ceil(topk * n) largest magnitudes of v over the ranges
  (ties: the lower index first) and zeroes the rest; a wire type then rounds what is kept (`wire_cast.round_trip`
  on the ranges' values laid end to end, blocks starting at the first); out = that, residual = v - out.
- `Broadcast` (a collective, but what it does to the members is a copy): `take_from`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import torch

from policies.factor_ops import FactorOp
from policies.lowrank import FactorBuffer, Shape
from policies.ops import Broadcast, Combine, Encode, LocalOp, OptimizerStep
from policies.tensors import GRADIENTS, PARAMETERS, Buffer, Codec, Fragment, Optimizer
from sim.errors import PolicyError
from sim.numerics.lowrank_rules import Factors, Placed
from sim.numerics.wire_cast import round_trip

Range = tuple[int, int]


def phase_buffers(policies: Sequence[object]) -> list[Buffer | FactorBuffer]:
    """The buffers of every phase policy (`Policy.buffers`), each name once; a name two policies
    declare differently is a PolicyError."""
    found: dict[str, Buffer | FactorBuffer] = {}
    for policy in policies:
        for buffer in policy.buffers():  # type: ignore[attr-defined]
            seen = found.setdefault(buffer.name, buffer)
            if seen != buffer:
                raise PolicyError(
                    f"buffer {buffer.name!r} is declared as {seen!r} and {buffer!r} by two phases' policies; "
                    "give the buffers different names"
                )
    return list(found.values())


def op_ranges(bucket_ranges: Sequence[Range], region: Range, fragment: Optional[Fragment]) -> list[Range]:
    """The element ranges an op acts on: its hook's `region`, or with a `fragment` (whole-model hooks)
    the ranges of the fragment's buckets, in bucket order."""
    if fragment is None:
        return [region]
    return [bucket_ranges[b] for b in fragment.buckets(len(bucket_ranges))]


class TensorStore:
    """One worker's named flat tensors, its factor buffers (`lowrank_rules.Factors`, per bucket region) and
    its policy-owned optimizers' state. `shapes`: the model's tensors in flat order (what factor ops factor),
    or a function giving a region's tensors."""

    def __init__(
        self,
        parameters: torch.Tensor,
        gradients: torch.Tensor,
        buffers: Sequence[Buffer | FactorBuffer] = (),
        shapes: Sequence[Shape] | Callable[[Range], list[Placed]] = (),
    ) -> None:
        self.tensors: dict[str, torch.Tensor] = {PARAMETERS: parameters, GRADIENTS: gradients}
        self.factors = Factors([b for b in buffers if isinstance(b, FactorBuffer)], shapes, gradients)
        for buffer in buffers:
            if isinstance(buffer, FactorBuffer):
                continue
            if buffer.initial == "parameters":
                self.tensors[buffer.name] = parameters.detach().clone()
            else:
                self.tensors[buffer.name] = torch.zeros_like(parameters)
        self.states: dict[str, dict[str, torch.Tensor]] = {}  # OptimizerStep.state -> named state tensors

    def tensor(self, name: str) -> torch.Tensor:
        found = self.tensors.get(name)
        if found is None:
            raise KeyError(f"no buffer {name!r}; buffers: {', '.join(sorted(self.tensors))}")
        return found

    def restart(self, model: torch.Tensor, buffers: Sequence[Buffer | FactorBuffer]) -> None:
        """A phase switch: the buffers start again (a copy of `model`, or zeros), factors and optimizers
        lose their state."""
        for buffer in buffers:
            if isinstance(buffer, Buffer):
                tensor = self.tensors[buffer.name]
                tensor.copy_(model) if buffer.initial == "parameters" else tensor.zero_()
        self.factors.clear()
        self.states.clear()

    def apply(self, op: LocalOp, ranges: Sequence[Range]) -> None:
        if isinstance(op, FactorOp):
            self.factors.apply(op, self.tensor, ranges)
        elif isinstance(op, Combine):
            values = [(coef, _read(self.tensor(name), ranges)) for coef, name in op.terms]
            total = values[0][1] * values[0][0]
            for coef, v in values[1:]:
                total = total + coef * v
            _write(self.tensor(op.out), ranges, total)
        elif isinstance(op, OptimizerStep):
            self._step(op, ranges)
        elif isinstance(op, Encode):
            source = _read(self.tensor(op.source), ranges)
            if op.residual is not None:
                source = source + _read(self.tensor(op.residual), ranges)
            out = encoded(source, op.codec)
            _write(self.tensor(op.target), ranges, out)
            if op.residual is not None:
                _write(self.tensor(op.residual), ranges, source - out)
        else:
            raise TypeError(f"no tensor rule for {type(op).__name__}")

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps: the policy's buffers (not the parameters and gradients, which the model
        holds), its optimizers' state and its factors, as copies."""
        return {
            "tensors": {k: t.detach().clone() for k, t in self.tensors.items() if k not in (PARAMETERS, GRADIENTS)},
            "states": {k: {n: t.detach().clone() for n, t in v.items()} for k, v in self.states.items()},
            "factors": {key: t.detach().clone() for key, t in self.factors.tensors.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Back to a `state_dict`: buffers copied in place, optimizer state and factors replaced (on this
        store's device)."""
        device = self.tensor(PARAMETERS).device
        for name, tensor in state["tensors"].items():
            self.tensor(name).copy_(tensor)
        self.states = {k: {n: t.clone().to(device) for n, t in v.items()} for k, v in state["states"].items()}
        self.factors.tensors = {key: t.clone().to(device) for key, t in state["factors"].items()}

    def take_from(self, source: TensorStore, op: Broadcast, ranges: Sequence[Range]) -> None:
        """`op` (a Broadcast) from `source`'s store to this one over `ranges`: the tensor `op.buffer`, or
        with `op.state` every state tensor of that optimizer (dropped here where `source` has none yet:
        its first step starts from zeros on both)."""
        if op.state is None:
            _write(self.tensor(op.buffer), ranges, _read(source.tensor(op.buffer), ranges))
            return
        theirs = source.states.get(op.state)
        if theirs is None:
            self.states.pop(op.state, None)
            return
        mine = self._state(op.state, tuple(theirs), theirs[next(iter(theirs))])
        for name, tensor in theirs.items():
            _write(mine[name], ranges, _read(tensor, ranges))

    def _state(self, key: str, names: Sequence[str], like: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = {}
        for name in names:
            if name not in state:
                dtype = torch.int64 if name == "t" else like.dtype
                state[name] = torch.zeros(like.shape, dtype=dtype, device=like.device)
        return state

    def _step(self, op: OptimizerStep, ranges: Sequence[Range]) -> None:
        opt = op.optimizer
        target = self.tensor(op.params)
        p, g = _read(target, ranges), _read(self.tensor(op.grad), ranges)
        if opt.name == "sgd":
            if opt.weight_decay:
                g = g + opt.weight_decay * p
            if opt.momentum == 0:
                _write(target, ranges, p - opt.lr * g)
                return
            state = self._state(op.state, ("momentum",), target)
            buf = _read(state["momentum"], ranges) * opt.momentum + g
            _write(state["momentum"], ranges, buf)
            _write(target, ranges, p - opt.lr * (g + opt.momentum * buf if opt.nesterov else buf))
            return
        _write(target, ranges, adamw(p, g, self._state(op.state, ("m", "v", "t"), target), ranges, opt))


def adamw(
    p: torch.Tensor, g: torch.Tensor, state: dict[str, torch.Tensor], ranges: Sequence[Range], opt: Optimizer
) -> torch.Tensor:
    """p after one AdamW step (torch.optim.AdamW's rule); updates `state`'s m, v and t over `ranges`."""
    beta1, beta2 = opt.betas
    t = _read(state["t"], ranges) + 1
    m = _read(state["m"], ranges) * beta1 + (1 - beta1) * g
    v = _read(state["v"], ranges) * beta2 + (1 - beta2) * g * g
    for name, value in (("t", t), ("m", m), ("v", v)):
        _write(state[name], ranges, value)
    p = p * (1 - opt.lr * opt.weight_decay)
    bias1 = 1 - torch.pow(beta1, t.to(p.dtype))
    bias2 = 1 - torch.pow(beta2, t.to(p.dtype))
    return p - opt.lr * (m / bias1) / (v.sqrt() / bias2.sqrt() + opt.eps)


def encoded(values: torch.Tensor, codec: Codec) -> torch.Tensor:
    """`values` (fp32, one region laid end to end) as they arrive after `codec`."""
    out = values
    if codec.topk is not None:
        n = values.numel()
        k = min(n, math.ceil(codec.topk * n))
        keep = torch.sort(values.abs(), descending=True, stable=True).indices[:k] if k < n else None
        if keep is not None:
            out = torch.zeros_like(values)
            out[keep] = values[keep]
    if codec.wire is not None and codec.wire != "fp32":
        out = round_trip(out.contiguous(), codec.wire, codec.block)
    return out


def _read(t: torch.Tensor, ranges: Sequence[Range]) -> torch.Tensor:
    """The values of `t` over `ranges`, end to end (a copy)."""
    if len(ranges) == 1:
        a, b = ranges[0]
        return t[a:b].clone()
    return torch.cat([t[a:b] for a, b in ranges])


def _write(t: torch.Tensor, ranges: Sequence[Range], values: torch.Tensor) -> None:
    offset = 0
    for a, b in ranges:
        t[a:b] = values[offset : offset + b - a]
        offset += b - a
