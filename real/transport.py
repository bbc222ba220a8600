"""Point-to-point messages on any backend and device: the one place real/ calls `dist.isend`/`irecv`.

- **NCCL**: device tensors travel as they are. NCCL has no tags: messages between two ranks match
  in the order they were posted, so `tag` is dropped and the code path is otherwise the same.
- **gloo**: CPU tensors travel as they are. gloo cannot send a CUDA tensor (`writev ... Bad
  address`), so one is staged through a pinned host buffer: a send copies the tensor out first;
  a receive lands in the buffer, and its work's `wait()` copies it into the tensor (the data is
  there only after `wait()`). `SYNCSIM_STAGE_P2P=1` in the environment, or `FORCE_STAGING = True`,
  stages CPU tensors too, so CI runs the staged path on gloo without a GPU.
- `exchange`: one send and one receive (a ring step). Under NCCL it is one batch
  (`batch_isend_irecv`): two separate calls to the same peer queue on one CUDA stream, and each
  rank's receive would wait in front of the send its peer waits for.

**The control group** (`open_control`, `control`): barriers, gathering the results, the phases'
agreements and the parameter-server protocol (real/protocol.py) run on a gloo group over host
memory on every backend. The protocol needs what NCCL point-to-point lacks. Replies go out in any
order, matched by tag. Receives stay posted while replies are sent to the same peer, which on NCCL
would block those sends behind them on one stream. A shard's threads wait on the host with a
timeout. And a shard keeps its tensors on the host, outside any NCCL communicator. Collectives
between workers use the training backend (NCCL on GPUs). The group waits at most the run's
`--timeout` for a peer, so a frozen one ends a barrier or gather with an error after that long.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

FORCE_STAGING = os.environ.get("SYNCSIM_STAGE_P2P", "") == "1"  # stage CPU tensors too (tests)

_control: Optional[Any] = None


def open_control(timeout_s: Optional[float] = None) -> Any:
    """Create this process's control group (a gloo group of the whole world; every rank calls it).
    `timeout_s`: how long a barrier, gather or message on it may wait for a peer (the run's
    `--timeout`); None leaves torch's default for a new group, 30 minutes."""
    global _control
    timeout = None if timeout_s is None else timedelta(seconds=timeout_s)
    _control = dist.new_group(backend="gloo", timeout=timeout)
    return _control


def control() -> Optional[Any]:
    """The control group; None (the default group) before `open_control`, as in tests on gloo."""
    return _control


def close_control() -> None:
    global _control
    _control = None


def is_nccl(group: Optional[Any] = None) -> bool:
    return dist.get_backend(group) == "nccl"


def staged(tensor: torch.Tensor, group: Optional[Any] = None) -> bool:
    """Does a message of `tensor` on `group` go through a host buffer?"""
    return not is_nccl(group) and (FORCE_STAGING or tensor.device.type != "cpu")


class StagedWork:
    """A gloo work on a host copy of a tensor; a receive's `wait()` copies the data into place."""

    def __init__(self, work: Any, buffer: torch.Tensor, into: Optional[torch.Tensor] = None) -> None:
        self.work, self.buffer, self.into = work, buffer, into
        self._copied = into is None

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        done = self.work.wait() if timeout is None else self.work.wait(timeout=timeout)
        if not self._copied:
            self.into.copy_(self.buffer)  # type: ignore[union-attr]
            self._copied = True
        return bool(done)

    def is_completed(self) -> bool:
        return bool(self.work.is_completed())


def _host_buffer(tensor: torch.Tensor) -> torch.Tensor:
    return torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=tensor.device.type == "cuda")


def isend(tensor: torch.Tensor, dst: int, tag: int = 0, group: Optional[Any] = None) -> Any:
    """Send `tensor` to global rank `dst`; returns a work (keep `tensor` unchanged until it completes)."""
    if is_nccl(group):
        return dist.isend(tensor, dst, group=group)
    if not staged(tensor, group):
        return dist.isend(tensor, dst, group=group, tag=tag)
    buffer = _host_buffer(tensor)
    buffer.copy_(tensor)  # synchronous: the data is on the host before gloo reads it
    return StagedWork(dist.isend(buffer, dst, group=group, tag=tag), buffer)


def irecv(tensor: torch.Tensor, src: int, tag: int = 0, group: Optional[Any] = None) -> Any:
    """Receive into `tensor` from global rank `src`; the data is in place once the work's `wait()` returns."""
    if is_nccl(group):
        return dist.irecv(tensor, src, group=group)
    if not staged(tensor, group):
        return dist.irecv(tensor, src, group=group, tag=tag)
    buffer = _host_buffer(tensor)
    return StagedWork(dist.irecv(buffer, src, group=group, tag=tag), buffer, into=tensor)


def send(tensor: torch.Tensor, dst: int, tag: int = 0, group: Optional[Any] = None) -> None:
    isend(tensor, dst, tag, group).wait()


def recv(tensor: torch.Tensor, src: int, tag: int = 0, group: Optional[Any] = None) -> None:
    irecv(tensor, src, tag, group).wait()


def exchange(
    outgoing: torch.Tensor, dst: int, incoming: torch.Tensor, src: int, group: Optional[Any] = None
) -> list[Any]:
    """Send `outgoing` to `dst` and receive `incoming` from `src`: [receive work, send work]."""
    if is_nccl(group):
        ops = [dist.P2POp(dist.irecv, incoming, src, group), dist.P2POp(dist.isend, outgoing, dst, group)]
        return list(dist.batch_isend_irecv(ops))
    return [irecv(incoming, src, group=group), isend(outgoing, dst, group=group)]  # posted first: data never waits


def complete(works: list[Any], device: torch.device) -> None:
    """Wait for `works` until `device` has finished them. On CUDA a work's `wait()` only puts the
    current stream behind it, while the executor times and sequences collectives on the host; the
    current device is set for this thread (NCCL's batched calls need it; threads start on GPU 0)."""
    cuda = device.type == "cuda"
    with torch.cuda.device(device) if cuda else nullcontext():
        for work in works:
            work.wait()
        if cuda:
            torch.cuda.current_stream(device).synchronize()
