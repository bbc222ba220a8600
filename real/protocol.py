"""The point-to-point protocol between workers and parameter-server processes.

A worker sends a shard *frames*: one float32 tensor per message, a fixed-size header (int64 kind,
key, a, b, value, spare, stored in the first `HEADER_FLOATS` floats) followed by the payload (a
push's gradient values; nothing for the other kinds), all on tag MESSAGE, so a shard sees each
worker's messages in the order they were sent. A shard keeps receives posted per worker (up to
`PREPOSTED`, fewer for large models: `preposted`), each as large as the largest frame. That
matters on gloo: a point-to-point send whose receive is not posted yet first sends a "ready to
send" notice and waits for the receiver's "ready to receive" before any data moves, and on a
loaded link those notices queue behind tens of milliseconds of data; with the receive already
posted, the data leaves at once. gloo accepts a frame shorter than the posted buffer, which is how
one buffer size serves every kind of message. For the same reason a worker posts the receive for
a reply before it sends the request.

Sparse buckets (ops with a `coding`) travel as (index, value) *pairs* (`pack_pairs`): the ids as
`index_bytes`-wide integers (their bit patterns in float32 slots, as the header's), then the values.
A SPARSE_PUSH frame carries a shard range's non-zero pairs (ids are offsets from `a`); a sparse
PULL asks for the elements the shard's round updated, and its reply is a frame too (`pull_reply`).

Values travel in the *wire* type, `workload.gradient_precision` (the header's `wire` field names it:
`WIRE_CODES`), both ways: pushed gradients and pulled parameters alike, which is what the simulator
prices (a push or pull of a bucket moves its bytes at that width). In fp16 or bf16 two values share
a float32 slot (`pack_values`: their bit patterns, the last slot padded), so the frame stays one
float32 tensor and a value costs 2 bytes. A shard keeps its parameters and applies pushes in fp32
(the master copy); a worker holds what it pulled rounded to the wire type, as mixed-precision
training keeps fp32 master weights beside 16-bit working ones. Numerics mode rounds the same values
the same way (`sim.numerics.replica.through_wire`). Byte counts (`value_bytes`, `PullReply.nbytes`)
leave out the pad.

Frames live in host memory on every backend and device: a push copies its values out of the
worker's device into the frame, and a shard copies them onto its own. They travel on the control
group (`real.transport.control`: gloo, whatever the training backend; real/transport.py says why),
and every send and receive goes through `real.transport`.

After DONE a worker sends one CLOSE frame per other posted receive, so no receive outlives the
policy. Replies travel on their own tags; a worker matches them by kind and key whatever order
the shard answers in. Point-to-point (rather than torch.distributed.rpc) keeps server traffic on
the same transport, NICs and shaped links as the collectives; rpc is in maintenance mode upstream
and runs its own transport.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple, Optional

import torch

from real import transport

HEADER_LEN = 7  # kind, key, a, b, value, spare, wire
HEADER_FLOATS = 2 * HEADER_LEN  # float32 slots holding the int64 header
PREPOSTED = 4  # receives a shard keeps posted per worker
POSTED_BYTES = 256 * 2**20  # at most this much memory in posted receives per worker


class Kind(IntEnum):
    PUSH = 1  # grads[a:b] for `key` follow the header
    PULL = 2  # reply: params[a:b] in the request's `wire` and the seconds it was held, on REPLY_BASE + key
    CLAIM = 3  # shared budget: may I run another iteration? reply on CLAIM_REPLY (value 1: timing in key, a, b)
    TICK = 4  # I finished an iteration (SSP clocks)
    WAIT_CLOCK = 5  # value: min clock; reply on CLOCK_REPLY once every worker reached it
    DONE = 6  # I finished this policy
    CLOSE = 7  # after DONE: fills one of the shard's remaining posted receives
    SPARSE_PUSH = 8  # value: n pairs of grads[a:b] follow, ids `spare` bytes wide (-1: grads[a:b] dense)
    # a PULL with value w > 0 is sparse: reply a `pull_reply` frame of the last round's rows, ids w bytes wide


MESSAGE = 1
CLAIM_REPLY = 3
CLOCK_REPLY = 4
REPLY_BASE = 1000  # + key

WIRE_CODES: dict[Optional[torch.dtype], int] = {None: 0, torch.float16: 1, torch.bfloat16: 2}  # header `wire`
_WIRE_TYPES = {code: dtype for dtype, code in WIRE_CODES.items()}


def value_floats(n: int, wire: Optional[torch.dtype] = None) -> int:
    """float32 slots that n values take in `wire` (None: fp32, one a slot; 16 bits: two a slot)."""
    return n if wire is None else (n + 1) // 2


def value_bytes(n: int, wire: Optional[torch.dtype] = None) -> int:
    """Bytes of n values in `wire` (the pad of an odd count left out)."""
    return n * (4 if wire is None else 2)


def pack_values(values: torch.Tensor, wire: Optional[torch.dtype] = None) -> torch.Tensor:
    """`values` as float32 slots: themselves (None), or their `wire` bit patterns two a slot, on their device."""
    if wire is None:
        return values.reshape(-1).to(torch.float32)
    n = values.numel()
    out = torch.zeros(2 * value_floats(n, wire), dtype=wire, device=values.device)
    out[:n] = values.reshape(-1)
    return out.view(torch.float32)


def unpack_values(slots: torch.Tensor, n: int, wire: Optional[torch.dtype] = None) -> torch.Tensor:
    """A float32 copy of the n values `pack_values` wrote into `slots`."""
    if wire is None:
        return slots[:n].clone()
    return slots[: value_floats(n, wire)].contiguous().view(wire)[:n].to(torch.float32)


def frame(
    kind: Kind,
    key: int = 0,
    a: int = 0,
    b: int = 0,
    value: int = 0,
    payload: Optional[torch.Tensor] = None,
    spare: int = 0,
    wire: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """One message in host memory: the header, then `payload` (float32 slots, from any device) if any;
    `wire`: the type its values travel in (the payload must be packed in it)."""
    size = 0 if payload is None else payload.numel()
    out = torch.empty(HEADER_FLOATS + size, dtype=torch.float32)
    header = torch.tensor([int(kind), key, a, b, value, spare, WIRE_CODES[wire]])
    out[:HEADER_FLOATS].view(torch.int64).copy_(header)
    if payload is not None:
        out[HEADER_FLOATS:] = payload.reshape(-1)
    return out


def claim(last: Any = None) -> torch.Tensor:
    """A claim, carrying the claimant's last iteration (a `policies.phases.Timing`) if any: step in
    `key`, seconds and wait in microseconds in `a` and `b`."""
    if last is None:
        return frame(Kind.CLAIM)
    return frame(Kind.CLAIM, last.step, round(last.seconds * 1e6), round(last.wait_s * 1e6), value=1)


def header_of(message: torch.Tensor) -> tuple[int, int, int, int, int]:
    """(kind, key, a, b, value) of a received frame."""
    kind, key, a, b, value = (int(v) for v in message[:HEADER_FLOATS].view(torch.int64)[:5])
    return kind, key, a, b, value


def wire_of(message: torch.Tensor) -> Optional[torch.dtype]:
    """The type a received frame's values travel in (its header's `wire`)."""
    return _WIRE_TYPES[int(message[:HEADER_FLOATS].view(torch.int64)[6])]


def push(key: int, a: int, b: int, values: torch.Tensor, wire: Optional[torch.dtype] = None) -> torch.Tensor:
    """A PUSH frame of grads[a:b] (`values`, on any device) in `wire`."""
    return frame(Kind.PUSH, key, a, b, payload=pack_values(values, wire), wire=wire)


def payload_of(message: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """A float32 copy of a push frame's b - a values (the buffer is posted again right after)."""
    return unpack_values(message[HEADER_FLOATS:], b - a, wire_of(message))


def pack_pairs(
    index: torch.Tensor, values: torch.Tensor, index_bytes: int, wire: Optional[torch.dtype] = None
) -> torch.Tensor:
    """Pairs as float32 slots: the ids as `index_bytes`-wide integers (bit patterns), then the values
    in `wire` (`pack_values`), on the ids' device."""
    ids = index.to(_ID_TYPES[index_bytes]).contiguous().view(torch.float32)
    return torch.cat([ids, pack_values(values.to(ids.device), wire)])


def pair_count(floats: int, index_bytes: int, wire: Optional[torch.dtype] = None, per_id: int = 1) -> int:
    """How many ids a `floats`-slot message of ids each followed by `per_id` values holds (ids first,
    then every value): the inverse of `pair_floats`. In 16 bits 2 x floats = n (2 x slots + per_id)
    plus at most 1 (the pad), and 2 x slots + per_id >= 3, so the floor division finds n."""
    slots = index_bytes // 4
    if wire is None:
        return floats // (slots + per_id)
    return 2 * floats // (2 * slots + per_id)


def unpack_pairs(
    packed: torch.Tensor, index_bytes: int, wire: Optional[torch.dtype] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 ids, float32 values) of `pack_pairs` output; the pair count follows from the length."""
    slots = index_bytes // 4
    n = pair_count(packed.numel(), index_bytes, wire)
    ids = packed[: n * slots].clone().view(_ID_TYPES[index_bytes]).to(torch.int64)
    return ids, unpack_values(packed[n * slots :], n, wire)


def pair_floats(n: int, index_bytes: int, wire: Optional[torch.dtype] = None, per_id: int = 1) -> int:
    """float32 slots that n packed ids, each with `per_id` values, take."""
    return n * (index_bytes // 4) + value_floats(n * per_id, wire)


def pair_bytes(n: int, index_bytes: int, wire: Optional[torch.dtype] = None, per_id: int = 1) -> int:
    """Bytes of n ids and their values (the simulator's count: `index_bytes` an id, the wire's width a value)."""
    return n * index_bytes + value_bytes(n * per_id, wire)


def sparse_push(
    key: int, a: int, b: int, values: torch.Tensor, index_bytes: int, room: int, wire: Optional[torch.dtype] = None
) -> torch.Tensor:
    """A SPARSE_PUSH frame of grads[a:b] (`values`) in `wire`: its non-zero pairs, or the dense values
    if the pairs would not fit the `room` floats of payload a shard's posted receive holds (a nearly
    dense range with wide ids)."""
    index = torch.nonzero(values, as_tuple=True)[0]
    if pair_floats(len(index), index_bytes, wire) > room:
        return frame(Kind.SPARSE_PUSH, key, a, b, -1, pack_values(values, wire), index_bytes, wire)
    pairs = pack_pairs(index, values[index], index_bytes, wire)
    return frame(Kind.SPARSE_PUSH, key, a, b, len(index), pairs, index_bytes, wire)


def sparse_values_of(message: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """grads[a:b] of a received SPARSE_PUSH frame, dense (zero where no pair came)."""
    n, index_bytes = (int(v) for v in message[:HEADER_FLOATS].view(torch.int64)[4:6])
    if n < 0:
        return payload_of(message, a, b)
    wire = wire_of(message)
    body = message[HEADER_FLOATS : HEADER_FLOATS + pair_floats(n, index_bytes, wire)]
    index, values = unpack_pairs(body, index_bytes, wire)
    return torch.zeros(b - a).index_put_((index,), values)


def push_bytes(message: torch.Tensor) -> int:
    """Bytes of ids and values a PUSH or SPARSE_PUSH frame carries (what the simulator prices)."""
    kind, _, a, b, n = header_of(message)
    wire = wire_of(message)
    if kind == Kind.PUSH or n < 0:
        return value_bytes(b - a, wire)
    return pair_bytes(n, int(message[:HEADER_FLOATS].view(torch.int64)[5]), wire)


def dense_reply(params: torch.Tensor, held: float, wire: Optional[torch.dtype] = None) -> torch.Tensor:
    """A dense pull's reply (no header: the worker knows what it asked for): params[a:b] (`params`,
    on any device) in `wire`, then the seconds the request was held."""
    return torch.cat([pack_values(params, wire).cpu(), torch.tensor([held], dtype=torch.float32)])


def dense_reply_floats(n: int, wire: Optional[torch.dtype] = None) -> int:
    """The float32 slots of a `dense_reply` of n values."""
    return value_floats(n, wire) + 1


def read_dense_reply(reply: torch.Tensor, n: int, wire: Optional[torch.dtype] = None) -> tuple[torch.Tensor, float]:
    """(values, seconds held) of a `dense_reply` of n values: the values a view of `reply` in `wire`
    (pinned if it is: `copy_` converts them as it copies them onto a device without a sync)."""
    return reply[: value_floats(n, wire)].view(wire or torch.float32)[:n], float(reply[-1])


def pull_reply(
    key: int,
    a: int,
    b: int,
    held: float,
    index_bytes: int,
    params: torch.Tensor,
    rows: Optional[torch.Tensor],
    wire: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """A sparse pull's reply: the seconds the request was held, then the pairs of `rows` (offsets from
    `a`, on the host) of params[a:b] (on any device), or params[a:b] dense (value -1) where the shard has
    no rows for the round; values in `wire`."""
    held_t = torch.tensor([held], dtype=torch.float32)
    if rows is None:
        dense = pack_values(params[a:b], wire).cpu()
        return frame(Kind.PULL, key, a, b, -1, torch.cat([held_t, dense]), index_bytes, wire)
    pairs = pack_pairs(rows, params[a + rows], index_bytes, wire)
    return frame(Kind.PULL, key, a, b, len(rows), torch.cat([held_t, pairs]), index_bytes, wire)


def pull_reply_floats(a: int, b: int, index_bytes: int, wire: Optional[torch.dtype] = None) -> int:
    """The largest `pull_reply` frame for [a, b) (every element a pair): what a worker posts for it."""
    return HEADER_FLOATS + 1 + pair_floats(b - a, index_bytes, wire)


class PullReply(NamedTuple):
    index: Optional[torch.Tensor]  # offsets from a; None: the whole range, dense
    values: torch.Tensor
    held: float  # seconds the shard held the request
    nbytes: int  # bytes of ids and values that came
    wire: Optional[torch.dtype]  # the type the values came in (they are float32 now)


def read_pull_reply(reply: torch.Tensor) -> PullReply:
    """What a received `pull_reply` frame carries."""
    _, _, a, b, n = header_of(reply)
    index_bytes = int(reply[:HEADER_FLOATS].view(torch.int64)[5])
    wire = wire_of(reply)
    held = float(reply[HEADER_FLOATS])
    body = reply[HEADER_FLOATS + 1 :]
    if n < 0:
        return PullReply(None, unpack_values(body, b - a, wire), held, value_bytes(b - a, wire), wire)
    index, values = unpack_pairs(body[: pair_floats(n, index_bytes, wire)], index_bytes, wire)
    return PullReply(index, values, held, pair_bytes(n, index_bytes, wire), wire)


_ID_TYPES = {4: torch.int32, 8: torch.int64}


def preposted(elements: int) -> int:
    """Receives a shard keeps posted per worker when a frame holds up to `elements` values (both
    sides compute it from the model's size, so a worker knows how many CLOSE frames to send)."""
    return max(1, min(PREPOSTED, POSTED_BYTES // (4 * (HEADER_FLOATS + elements))))


def send(message: torch.Tensor, shard: int) -> Any:
    return transport.isend(message, shard, MESSAGE, transport.control())


def post(buffer: torch.Tensor, worker: int) -> Any:
    """A shard's receive for the next frame from `worker`."""
    return transport.irecv(buffer, worker, MESSAGE, transport.control())


def reply(tensor: torch.Tensor, worker: int, tag: int) -> Any:
    """A shard's answer (a pull's values, a claim's grant, a clock's release) on `tag`."""
    return transport.isend(tensor, worker, tag, transport.control())


def expect(buffer: torch.Tensor, shard: int, tag: int) -> Any:
    """A worker's receive for the answer on `tag`, posted before it asks."""
    return transport.irecv(buffer, shard, tag, transport.control())


def goodbye(shard: int, elements: int) -> list[Any]:
    """DONE, then the CLOSE frames that fill the shard's other posted receives."""
    closes = preposted(elements) - 1
    return [send(frame(Kind.DONE), shard)] + [send(frame(Kind.CLOSE), shard) for _ in range(closes)]
