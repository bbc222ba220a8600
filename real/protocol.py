"""The point-to-point protocol between workers and parameter-server processes.

Every message starts with a fixed-size int64 header sent on tag HEADER; a push's values follow on
tag PAYLOAD. Replies travel on their own tags, so a worker matches them by kind and key whatever
order the server answers in. Point-to-point (rather than torch.distributed.rpc) keeps server traffic
on the same transport, NICs and shaped links as the collectives, on gloo and NCCL alike; rpc is in
maintenance mode upstream and runs its own transport.
"""

from __future__ import annotations

from enum import IntEnum

import torch

HEADER_LEN = 6  # kind, key, a, b, value, spare


class Kind(IntEnum):
    PUSH = 1  # value: unused; a push of grads[a:b] for `key` follows on PAYLOAD
    PULL = 2  # reply: params[a:b] and the seconds the request was held, on REPLY_BASE + key
    CLAIM = 3  # shared budget: may I run another iteration? reply on CLAIM_REPLY
    TICK = 4  # I finished an iteration (SSP clocks)
    WAIT_CLOCK = 5  # value: min clock; reply on CLOCK_REPLY once every worker reached it
    DONE = 6  # I finished this policy


HEADER = 1
PAYLOAD = 2
CLAIM_REPLY = 3
CLOCK_REPLY = 4
REPLY_BASE = 1000  # + key


def header(kind: Kind, key: int = 0, a: int = 0, b: int = 0, value: int = 0) -> torch.Tensor:
    return torch.tensor([int(kind), key, a, b, value, 0], dtype=torch.int64)


def empty_header() -> torch.Tensor:
    return torch.zeros(HEADER_LEN, dtype=torch.int64)
