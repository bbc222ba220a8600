"""What the rank executor (real/executor.py) keeps per op, per program and per call in flight, and the
records it leaves for the accounting (real/accounting.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

import torch

from policies.ops import Op

# (step, rank, group key, sequence on the group, op kind, nbytes, issued, finished, bytes received:
# sparse ops only, else -1, and since when and in which step the rank waited for it: its issue and step,
# a launched one's Wait if that began before the call completed, else step -1: it never waited)
CollectiveRecord = tuple[int, int, tuple[int, ...], int, str, int, float, float, int, int, float]
# (step, rank, kind, shard, count, nbytes, issued, finished)
P2PRecord = tuple[int, int, str, int, int, int, float, float]


@dataclass
class Slot:
    """One op of one program item on this rank."""

    op: Op
    program: int
    item: int
    bucket: Optional[int]
    issued: float = -1.0
    seq: int = -1  # collectives: position among this rank's calls on the group
    done: bool = False  # its item may end (a launched collective: once its item started)
    step: int = -1  # the step whose program yielded it (-1: the step `_complete` is given)
    ready: bool = False  # its item has started: a collective may go out when its group is free
    completed: bool = False  # a collective: finished, its result in place
    launched: Optional[Slot] = None  # a Wait: the launched collective it waits for
    waited: tuple[int, float] = (-1, 0.0)  # a launched collective: (step, time) its Wait began, if it did


@dataclass
class Staged:
    """One program handed to `RankExecutor.run`: its items' slots, and the item running."""

    items: list[list[Slot]]
    bucket: Optional[int]
    at: int = 0  # the item running
    started: bool = False  # the current item's point-to-point ops are issued

    @property
    def finished(self) -> bool:
        return self.at >= len(self.items)


@dataclass
class Flight:
    """A slot's issued call or message: the works to wait for, and what to do once they finished."""

    slot: Slot
    works: list[Any]
    finish: Optional[Callable[[], None]]
    nbytes: int
    error: Optional[BaseException] = None
    finished: float = 0.0
    received: Optional[Callable[[], int]] = None
    device: Optional[torch.device] = None  # a collective's: the device its tensors are on
    event: Optional[Any] = None  # CUDA: recorded once the works finished (`transport.complete`)
