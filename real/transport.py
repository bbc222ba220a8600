"""Point-to-point messages on any backend and device: the one place real/ calls `dist.isend`/`irecv`.

- **NCCL**: device tensors travel as they are. NCCL has no tags: messages between two ranks match
  in the order they were posted, so `tag` is dropped and the code path is otherwise the same.
- **gloo**: CPU tensors travel as they are. gloo cannot send a CUDA tensor (`writev ... Bad
  address`), so one is staged through a pinned host buffer: a send copies the tensor out first;
  a receive lands in the buffer, and its work's `wait()` copies it into the tensor on the current
  stream without blocking (work queued after `wait()` on that stream sees the data; the host, once
  the stream is synchronized). The send's copy blocks the calling thread until the data is on the
  host, on purpose: gloo hands the buffer to its transport as the send is posted, so the data must
  be there first, and a non-blocking copy would need the same host wait on its event before the
  post (posting later, from another thread, would reorder sends that gloo matches by order). The
  copy waits for the current stream only: in the executor, a waiter thread's own stream
  (`complete`), not the stream the training computes on. `SYNCSIM_STAGE_P2P=1` in the environment,
  or `FORCE_STAGING = True`, stages CPU tensors too, so CI runs the staged path on gloo without a GPU.
- `exchange`: one send and one receive (a ring step). Under NCCL it is one batch
  (`batch_isend_irecv`): two separate calls to the same peer queue on one CUDA stream, and each
  rank's receive would wait in front of the send its peer waits for.
- `complete`: waits for works from a thread of its own without putting any other stream behind
  them (CUDA works are waited for on the thread's own stream; host-only works touch no CUDA API).

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
import threading
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

FORCE_STAGING = os.environ.get("SYNCSIM_STAGE_P2P", "") == "1"  # stage CPU tensors too (tests)

_control: Optional[Any] = None
_local = threading.local()  # per thread: its waiting stream per device


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
        if not self._copied:  # ordered on the current stream: whoever reads `into` next there sees it
            self.into.copy_(self.buffer, non_blocking=True)  # type: ignore[union-attr]
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
    buffer.copy_(tensor)  # blocks until the data is on the host: gloo reads it as the send is posted
    return StagedWork(dist.isend(buffer, dst, group=group, tag=tag), buffer)


def irecv(tensor: torch.Tensor, src: int, tag: int = 0, group: Optional[Any] = None) -> Any:
    """Receive into `tensor` from global rank `src`; the data is in place once the work's `wait()` returns
    (staged: for work queued on the current stream after `wait()`)."""
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


def mark(tensor: torch.Tensor) -> Optional[Any]:
    """For a work whose `wait()` issues further calls (a ring's steps): an event recorded on the current
    stream if `tensor` is on CUDA (else None). Its `wait()` runs on a waiter's stream, which must
    `follow` the event before it touches what the issuing stream wrote."""
    if not tensor.is_cuda:
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(tensor.device))
    return event


def follow(event: Optional[Any]) -> None:
    """Make the current stream wait for `event` (from `mark`; None: nothing to wait for)."""
    if event is not None:
        torch.cuda.current_stream().wait_event(event)


def waiting_stream(device: torch.device) -> Any:
    """This thread's own CUDA stream on `device`, created on first use: where it waits for works."""
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    stream = streams.get(device)
    if stream is None:
        stream = streams[device] = torch.cuda.Stream(device)
    return stream


def complete(works: list[Any], device: Optional[torch.device] = None) -> Optional[Any]:
    """Block this thread until `works` have finished; `device`: the CUDA device whose tensors they
    touch (None or a CPU device: host-only works, such as the protocol's frames on the control group,
    which are waited for on the host alone, without a CUDA call).

    On CUDA a work's `wait()` only makes the thread's current stream wait for it (torch's `Work.wait`),
    and a thread's current stream starts as the device's default stream, which the training computes
    on and after which NCCL orders every later collective. So the waits go on this thread's own stream
    (`waiting_stream`), and the host blocks on an event recorded after them on that stream only: the
    collective counts as finished when the device has finished it, and nothing else queues behind it.
    Returns that event (None for host-only works): a stream that reads the works' results waits on it
    first (`Stream.wait_event`). The current device is set for this thread (NCCL's batched calls need
    it; threads start on GPU 0)."""
    if device is None or device.type != "cuda":
        for work in works:
            work.wait()
        return None
    with torch.cuda.device(device):
        stream = waiting_stream(device)
        with torch.cuda.stream(stream):
            for work in works:
                work.wait()
        done = torch.cuda.Event()
        done.record(stream)
    done.synchronize()
    return done
