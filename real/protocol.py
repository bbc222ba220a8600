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
Dense frames and replies are unchanged.

Frames carry float32 values whatever `workload.gradient_precision` says (the header's int64 fields
fill float32 slots, and a shard applies pushes in fp32): a push counts 4 bytes a value, where the
simulator prices a push at the bucket's bytes in `gradient_precision` (2 bytes a value under fp16
and bf16 by default).

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

HEADER_LEN = 6  # kind, key, a, b, value, spare
HEADER_FLOATS = 2 * HEADER_LEN  # float32 slots holding the int64 header
PREPOSTED = 4  # receives a shard keeps posted per worker
POSTED_BYTES = 256 * 2**20  # at most this much memory in posted receives per worker


class Kind(IntEnum):
    PUSH = 1  # grads[a:b] for `key` follow the header
    PULL = 2  # reply: params[a:b] and the seconds the request was held, on REPLY_BASE + key
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


def frame(
    kind: Kind,
    key: int = 0,
    a: int = 0,
    b: int = 0,
    value: int = 0,
    payload: Optional[torch.Tensor] = None,
    spare: int = 0,
) -> torch.Tensor:
    """One message in host memory: the header, then `payload` (float32, from any device) if any."""
    size = 0 if payload is None else payload.numel()
    out = torch.empty(HEADER_FLOATS + size, dtype=torch.float32)
    out[:HEADER_FLOATS].view(torch.int64).copy_(torch.tensor([int(kind), key, a, b, value, spare]))
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


def payload_of(message: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """A copy of a push frame's values (the buffer is posted again right after)."""
    return message[HEADER_FLOATS : HEADER_FLOATS + b - a].clone()


def pack_pairs(index: torch.Tensor, values: torch.Tensor, index_bytes: int) -> torch.Tensor:
    """Pairs as float32 slots: the ids as `index_bytes`-wide integers (bit patterns), then the values
    (on the ids' device)."""
    ids = index.to(_ID_TYPES[index_bytes]).contiguous().view(torch.float32)
    return torch.cat([ids, values.to(device=ids.device, dtype=torch.float32)])


def unpack_pairs(packed: torch.Tensor, index_bytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 ids, values) of `pack_pairs` output; the pair count follows from the length."""
    slots = index_bytes // 4
    n = packed.numel() // (slots + 1)
    ids = packed[: n * slots].clone().view(_ID_TYPES[index_bytes]).to(torch.int64)
    return ids, packed[n * slots : n * (slots + 1)].clone()


def pair_floats(n: int, index_bytes: int) -> int:
    """float32 slots that n packed pairs take."""
    return n * (1 + index_bytes // 4)


def sparse_push(key: int, a: int, b: int, values: torch.Tensor, index_bytes: int, room: int) -> torch.Tensor:
    """A SPARSE_PUSH frame of grads[a:b] (`values`): its non-zero pairs, or the dense values if the
    pairs would not fit the `room` floats of payload a shard's posted receive holds (a nearly dense
    range with wide ids)."""
    index = torch.nonzero(values, as_tuple=True)[0]
    if pair_floats(len(index), index_bytes) > room:
        return frame(Kind.SPARSE_PUSH, key, a, b, -1, values, index_bytes)
    return frame(Kind.SPARSE_PUSH, key, a, b, len(index), pack_pairs(index, values[index], index_bytes), index_bytes)


def sparse_values_of(message: torch.Tensor, a: int, b: int) -> torch.Tensor:
    """grads[a:b] of a received SPARSE_PUSH frame, dense (zero where no pair came)."""
    n, index_bytes = (int(v) for v in message[:HEADER_FLOATS].view(torch.int64)[4:6])
    if n < 0:
        return payload_of(message, a, b)
    index, values = unpack_pairs(message[HEADER_FLOATS : HEADER_FLOATS + pair_floats(n, index_bytes)], index_bytes)
    return torch.zeros(b - a).index_put_((index,), values)


def pull_reply(
    key: int, a: int, b: int, held: float, index_bytes: int, params: torch.Tensor, rows: Optional[torch.Tensor]
) -> torch.Tensor:
    """A sparse pull's reply: the seconds the request was held, then the pairs of `rows` (offsets from
    `a`, on the host) of params[a:b] (on any device), or params[a:b] dense (value -1) where the shard has
    no rows for the round."""
    held_t = torch.tensor([held], dtype=torch.float32)
    if rows is None:
        return frame(Kind.PULL, key, a, b, -1, torch.cat([held_t, params[a:b].cpu()]), index_bytes)
    pairs = pack_pairs(rows, params[a + rows], index_bytes)
    return frame(Kind.PULL, key, a, b, len(rows), torch.cat([held_t, pairs]), index_bytes)


def pull_reply_floats(a: int, b: int, index_bytes: int) -> int:
    """The largest `pull_reply` frame for [a, b) (every element a pair): what a worker posts for it."""
    return HEADER_FLOATS + 1 + pair_floats(b - a, index_bytes)


class PullReply(NamedTuple):
    index: Optional[torch.Tensor]  # offsets from a; None: the whole range, dense
    values: torch.Tensor
    held: float  # seconds the shard held the request
    nbytes: int  # bytes of ids and values that came


def read_pull_reply(reply: torch.Tensor) -> PullReply:
    """What a received `pull_reply` frame carries."""
    _, _, a, b, n = header_of(reply)
    index_bytes = int(reply[:HEADER_FLOATS].view(torch.int64)[5])
    held = float(reply[HEADER_FLOATS])
    body = reply[HEADER_FLOATS + 1 :]
    if n < 0:
        return PullReply(None, body[: b - a].clone(), held, 4 * (b - a))
    floats = pair_floats(n, index_bytes)
    index, values = unpack_pairs(body[:floats], index_bytes)
    return PullReply(index, values, held, 4 * floats)


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
