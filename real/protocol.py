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

After DONE a worker sends one CLOSE frame per other posted receive, so no receive outlives the
policy. Replies travel on their own tags; a worker matches them by kind and key whatever order
the shard answers in. Point-to-point (rather than torch.distributed.rpc) keeps server traffic on
the same transport, NICs and shaped links as the collectives; rpc is in maintenance mode upstream
and runs its own transport.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, Optional

import torch
import torch.distributed as dist

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


MESSAGE = 1
CLAIM_REPLY = 3
CLOCK_REPLY = 4
REPLY_BASE = 1000  # + key


def frame(
    kind: Kind, key: int = 0, a: int = 0, b: int = 0, value: int = 0, payload: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """One message: the header, then `payload` (float32) if any."""
    size = 0 if payload is None else payload.numel()
    out = torch.empty(HEADER_FLOATS + size, dtype=torch.float32)
    out[:HEADER_FLOATS].view(torch.int64).copy_(torch.tensor([int(kind), key, a, b, value, 0]))
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


def preposted(elements: int) -> int:
    """Receives a shard keeps posted per worker when a frame holds up to `elements` values (both
    sides compute it from the model's size, so a worker knows how many CLOSE frames to send)."""
    return max(1, min(PREPOSTED, POSTED_BYTES // (4 * (HEADER_FLOATS + elements))))


def send(message: torch.Tensor, shard: int) -> Any:
    return dist.isend(message, shard, tag=MESSAGE)


def post(buffer: torch.Tensor, worker: int) -> Any:
    """A shard's receive for the next frame from `worker`."""
    return dist.irecv(buffer, worker, tag=MESSAGE)


def goodbye(shard: int, elements: int) -> list[Any]:
    """DONE, then the CLOSE frames that fill the shard's other posted receives."""
    closes = preposted(elements) - 1
    return [send(frame(Kind.DONE), shard)] + [send(frame(Kind.CLOSE), shard) for _ in range(closes)]
