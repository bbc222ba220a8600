"""What an op's element type costs the GPU: the casts around a collective whose `wire` differs from
the type its tensor is kept in (docs/policies.md, "Precision on the wire").

A member casts (quantizes) its tensor before the collective and casts the result back after it: two
memory-bound passes, each reading one form of the tensor and writing the other, at the GPU's memory
bandwidth (`GpuSpec.memory_bandwidth_gbs`). They are charged on the collective's own timeline (its
communicator), before its flows start and after they end, as a compress hook's casts precede and
follow its collective on the stream that issues it; backward compute runs beside them untouched.
The owner's decode, fp32 sum and re-encode of a scaled type's chunks inside the reduction are not
charged (1/p of the tensor, overlapped with the ring's transfers).
"""

from __future__ import annotations

from policies.ops import Collective, Payload
from policies.wire import wire_nbytes, wire_type

MASTER_TYPE = "fp32"  # parameters are kept in fp32 master weights under every precision


def source_type(op: Collective, gradient_type: str) -> str:
    """The type `op`'s tensor is kept in: the workload's gradient type for gradients, else fp32."""
    return gradient_type if op.payload is Payload.GRADIENTS else MASTER_TYPE


def cast_seconds(op: Collective, gradient_type: str, memory_bytes_per_s: float) -> tuple[float, float]:
    """(before, after): seconds of the quantize pass before `op`'s transfers and of the dequantize pass
    after them; (0, 0) without a `wire`, in the tensor's own type, or for a group of one."""
    if op.wire is None or op.group.size < 2 or memory_bytes_per_s <= 0:
        return 0.0, 0.0
    kept = source_type(op, gradient_type)
    if op.wire == kept:
        return 0.0, 0.0
    elements = float(op.elements or 0.0)
    one_pass = (elements * wire_type(kept).bits / 8 + op.nbytes) / memory_bytes_per_s  # read one form, write the other
    return one_pass, one_pass


def cast_bytes(elements: float, kept: str, wire: str, block: int) -> float:
    """Bytes one cast pass of `elements` values moves: it reads them in `kept` and writes them in `wire`
    (values and per-block scales), or back; 0 when the two types are one."""
    if wire == kept:
        return 0.0
    return elements * wire_type(kept).bits / 8 + wire_nbytes(elements, wire, block)
