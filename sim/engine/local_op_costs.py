"""What a local op (`policies.ops.LocalOp`: Combine, OptimizerStep, Encode) costs the GPU it runs on.

A local op is an elementwise pass over its region of fp32 buffers (4 bytes a value), so it is bound by
memory bandwidth: its time is the bytes it reads and writes divided by the GPU's memory bandwidth
(`GpuSpec.memory_bandwidth_gbs`), each buffer read or written once:

- `Combine` reads each of its terms and writes `out`: (terms + 1) passes.
- `OptimizerStep` reads the parameters and the gradient and writes the parameters, and reads and writes
  each state tensor of its optimizer: sgd with momentum one (the momentum buffer; none without momentum),
  adamw two (the moments): 3 + 2 * states passes.
- `Encode` reads `source` and writes its target, and with a residual reads and writes that too: 2 or 4
  passes; a codec with a `wire` other than fp32 adds the quantize pass a cast costs on the wire
  (`sim.engine.wire_costs.cast_bytes`: read fp32, write the wire form). Top-k's selection is not priced.

Where: on the GPU at its memory bandwidth, or, with `cluster.host_memory_gbs` set, on the host's CPU at
that rate (`local_op_bandwidth`), as PRIME's DiLoCo does: it keeps the anchor, the pseudo-gradient and the
outer optimizer's state in host memory and runs the outer step there (arXiv 2412.01152, section 2.1).

Region: a bucket hook's op covers that bucket's parameters (its gradient bytes times the model's parameter
ratio, over 4), a whole-model hook's op the model's (`parameter_bytes / 4`), narrowed to the buckets of its
`fragment` (`policies.tensors.fragment_bytes`). The engine charges the time as compute of the rank that
issues the op, at its place in the program (sim/engine/launches.py); one in a bucket's program runs beside
the rest of backward, as a wire cast does (sim/engine/wire_costs.py), and a slow worker's factor does not
stretch it. Factor ops (`policies.factor_ops`, PowerSGD's) are priced by sim/engine/factor_costs.py, on the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from policies.factor_ops import FactorOp
from policies.lowrank import FactorBuffer
from policies.ops import Combine, Encode, LocalOp, OptimizerStep
from policies.tensors import Fragment, fragment_bytes
from sim.engine.factor_costs import factor_seconds
from sim.engine.wire_costs import MASTER_TYPE, cast_bytes

VALUE_BYTES = 4.0  # buffers are fp32 (policies.tensors.Buffer)
OPTIMIZER_STATES = {"sgd": 1, "adamw": 2}  # state tensors read and written per step (sgd: with momentum)


def local_op_bandwidth(gpu_memory_gbs: float, host_memory_gbs: Optional[float]) -> float:
    """Bytes per second a local op streams: the host's memory rate when one is given, else the GPU's."""
    return (host_memory_gbs if host_memory_gbs is not None else gpu_memory_gbs) * 1e9


def passes(op: LocalOp) -> int:
    """fp32 passes over the region `op` reads and writes (the module's rules; the codec's cast aside)."""
    if isinstance(op, Combine):
        return len(op.terms) + 1
    if isinstance(op, OptimizerStep):
        opt = op.optimizer
        states = 0 if opt.name == "sgd" and opt.momentum == 0 else OPTIMIZER_STATES[opt.name]
        return 3 + 2 * states
    if isinstance(op, Encode):
        return 4 if op.residual else 2
    return len(op.reads) + len(op.writes)  # a LocalOp of another kind: what it names


def op_bytes(op: LocalOp, elements: float) -> float:
    """Bytes `op` moves through memory over a region of `elements` values."""
    moved = passes(op) * VALUE_BYTES * elements
    if isinstance(op, Encode) and op.codec.wire is not None:
        moved += cast_bytes(elements, MASTER_TYPE, op.codec.wire, op.codec.block)
    return moved


class LocalOpCosts:
    """Seconds of each local op on one model and GPU: `bucket_bytes` are the gradient buckets in bytes,
    `parameter_ratio` parameter bytes per gradient byte (`ModelInfo.parameter_ratio`)."""

    def __init__(
        self,
        bucket_bytes: Sequence[float],
        parameter_ratio: float,
        memory_bytes_per_s: float,
        factors: Optional[FactorPricing] = None,
    ) -> None:
        """`factors`: what factor ops (`policies.factor_ops`) need, when the policy declares factor buffers."""
        self.bucket_bytes = tuple(float(b) for b in bucket_bytes)
        self.ratio, self.bandwidth, self.factors = parameter_ratio, memory_bytes_per_s, factors
        self._seconds: dict[tuple[LocalOp, Optional[int]], float] = {}

    def elements(self, fragment: Optional[Fragment], bucket: Optional[int]) -> float:
        """fp32 values of the region: the bucket's (if in the fragment), else the fragment's or the model's."""
        if bucket is not None:
            inside = fragment is None or bucket % fragment.count == fragment.index
            return self.bucket_bytes[bucket] * self.ratio / VALUE_BYTES if inside else 0.0
        return fragment_bytes(self.bucket_bytes, fragment) * self.ratio / VALUE_BYTES

    def seconds(self, op: LocalOp, bucket: Optional[int]) -> float:
        """Time of `op` in a hook of `bucket` (None: a whole-model hook)."""
        key = (op, bucket)
        found = self._seconds.get(key)
        if found is None:
            if isinstance(op, FactorOp):
                found = self._factor_seconds(op, bucket)
            else:
                elements = self.elements(getattr(op, "fragment", None), bucket)
                found = op_bytes(op, elements) / self.bandwidth if self.bandwidth > 0 else 0.0
            self._seconds[key] = found
        return found

    def _factor_seconds(self, op: FactorOp, bucket: Optional[int]) -> float:
        pricing = self.factors
        if pricing is None or bucket is None or bucket >= len(pricing.bucket_shapes):
            return 0.0  # the backend refuses such an op before it runs (no factor buffers, no bucket)
        buffer = pricing.buffers.get(op.factors[0]) if op.factors else None
        if buffer is None:
            return 0.0
        layout = buffer.lowrank.layout(pricing.bucket_shapes[bucket])
        return factor_seconds(
            op, layout, buffer.side, pricing.memory_bytes_per_s, pricing.flops_per_s, pricing.launch_s
        )


@dataclass(frozen=True)
class FactorPricing:
    """What pricing factor ops takes: the policy's factor buffers by name, each bucket's tensor shapes,
    and the GPU's memory bandwidth, fp32 peak and cost per kernel (sim/engine/factor_costs.py)."""

    buffers: Mapping[str, FactorBuffer]
    bucket_shapes: tuple[tuple[tuple[int, ...], ...], ...]
    memory_bytes_per_s: float
    flops_per_s: float
    launch_s: float = 0.0
