"""real/executor.py's completion path and real/transport.py's `complete`, on the CPU with a fake
`torch.cuda`: which stream a collective is waited for on, what is synchronized, how many threads a
collective costs, and that host-only messages make no CUDA call at all."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, Optional
from unittest import mock

import pytest

torch = pytest.importorskip("torch")

from policies.ops import AllReduce, Group, Push  # noqa: E402
from real import executor as ex  # noqa: E402
from real import transport  # noqa: E402
from real.collectives import RingReduceScatter  # noqa: E402

GPU = torch.device("cuda", 0)


class FakeStream:
    def __init__(self, name: str) -> None:
        self.name, self.syncs, self.waited = name, 0, []

    def synchronize(self) -> None:
        self.syncs += 1

    def wait_event(self, event: FakeEvent) -> None:
        self.waited.append(event)


class FakeEvent:
    def __init__(self, log: list) -> None:
        self.log, self.stream = log, None

    def record(self, stream: Optional[FakeStream] = None) -> None:
        self.stream = stream
        self.log.append(("record", stream.name if stream else None))

    def synchronize(self) -> None:
        self.log.append(("event-sync", self.stream.name if self.stream else None))


class FakeCuda:
    """Streams per thread as torch keeps them: each thread starts on the device's default stream."""

    def __init__(self) -> None:
        self.default = FakeStream("default")
        self.local = threading.local()
        self.log: list = []
        self.device_syncs = 0
        self.made: list[FakeStream] = []

    def current_stream(self, device: Any = None) -> FakeStream:
        return getattr(self.local, "stream", self.default)

    @contextmanager
    def stream(self, s: FakeStream):
        before = self.current_stream()
        self.local.stream = s
        try:
            yield s
        finally:
            self.local.stream = before

    def Stream(self, device: Any = None) -> FakeStream:  # noqa: N802 - torch's name
        s = FakeStream(f"private-{len(self.made)}")
        self.made.append(s)
        return s

    def Event(self, *args: Any, **kwargs: Any) -> FakeEvent:  # noqa: N802 - torch's name
        return FakeEvent(self.log)

    @contextmanager
    def device(self, d: Any):
        yield

    def synchronize(self, device: Any = None) -> None:
        self.device_syncs += 1

    def install(self, monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
        for name in ("current_stream", "stream", "Stream", "Event", "device", "synchronize"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        return self


class Work:
    """A work whose `wait()` notes the stream current on the waiting thread (and can be held)."""

    def __init__(self, cuda: Optional[FakeCuda] = None, hold: Optional[threading.Event] = None) -> None:
        self.cuda, self.hold, self.streams = cuda, hold, []

    def wait(self) -> bool:
        if self.hold is not None:
            assert self.hold.wait(10)
        if self.cuda is not None:
            self.streams.append(self.cuda.current_stream())
        return True


def _executor(device: torch.device = GPU) -> ex.RankExecutor:
    replica = SimpleNamespace(params=SimpleNamespace(device=device, is_cuda=device.type == "cuda"))
    return ex.RankExecutor(0, "test", None, replica, [1], None, 10.0, None)  # type: ignore[arg-type]


def _collective(ranks: tuple[int, ...] = (0, 1)) -> ex.Slot:
    return ex.Slot(AllReduce(group=Group(ranks), nbytes=4.0), 0, 0, None, issued=0.0)


def _run(executor: ex.RankExecutor, flight: ex.Flight) -> None:
    executor._launch(flight)
    (done,) = executor._wait()
    executor._complete(0, done)


def test_a_collective_is_waited_for_off_the_compute_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under NCCL `work.wait()` puts the waiting thread's current stream behind the collective: on the
    default stream, every later kernel and collective would queue behind it (issue 34, item 1)."""
    cuda = FakeCuda().install(monkeypatch)
    work, order = Work(cuda), []
    executor = _executor()
    finish = lambda: order.append(list(cuda.default.waited))  # noqa: E731 - what the reader waited on
    _run(executor, ex.Flight(_collective(), [work], finish, 4))
    (stream,) = work.streams
    assert stream is not cuda.default and stream in cuda.made
    assert cuda.default.syncs == 0 and cuda.device_syncs == 0  # no drain of the compute stream or device
    # the host waited for an event recorded on the private stream after the wait, and the compute stream
    # waited on that same event before `finish` read the results
    assert ("record", stream.name) in cuda.log and ("event-sync", stream.name) in cuda.log
    ((event,),) = order
    assert event.stream is stream


def test_each_waiter_keeps_one_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda().install(monkeypatch)
    executor, works = _executor(), [Work(cuda) for _ in range(5)]
    for work in works:
        _run(executor, ex.Flight(_collective(), [work], None, 4))
    assert len({id(w.streams[0]) for w in works}) == 1 and len(cuda.made) == 1


def test_sequential_collectives_reuse_one_waiter_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collective costs no thread start once the executor runs (issue 34, item 7)."""
    started = []
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started.append(self.name)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    executor = _executor(torch.device("cpu"))
    for _ in range(20):
        _run(executor, ex.Flight(_collective(), [Work()], None, 4))
    assert len(started) == 1


def test_a_held_collective_does_not_hold_back_another() -> None:
    executor, hold = _executor(torch.device("cpu")), threading.Event()
    slow, fast = _collective((0, 1)), _collective((0, 2))
    executor._launch(ex.Flight(slow, [Work(hold=hold)], None, 4))
    executor._launch(ex.Flight(fast, [Work()], None, 4))
    (first,) = executor._wait()
    assert first.slot is fast
    hold.set()
    (second,) = executor._wait()
    assert second.slot is slow


def test_host_only_messages_make_no_cuda_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parameter-server frames are host tensors on the gloo control group: waiting for them must not
    synchronize the GPU the replica lives on (issue 34, item 12)."""
    calls = []
    for name in ("current_stream", "stream", "Stream", "Event", "device", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: calls.append(_n) or mock.MagicMock())
    executor = _executor()  # the replica is on a GPU
    slot = ex.Slot(Push(shard=0, nbytes=4.0), 0, 0, None, issued=0.0)
    _run(executor, ex.Flight(slot, [Work()], None, 4))
    assert calls == []
    assert transport.complete([Work()], None) is None and calls == []


def test_a_staged_receive_copies_into_place_without_blocking() -> None:
    """The copy out of the pinned buffer is queued on the current stream, not waited for (item 12)."""
    into = mock.MagicMock()
    buffer = torch.zeros(3)
    work = transport.StagedWork(mock.MagicMock(), buffer, into=into)
    work.wait()
    into.copy_.assert_called_once_with(buffer, non_blocking=True)


def test_a_ring_follows_the_issuing_stream_before_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ring reduce-scatter issues its steps from the waiter's stream: that stream must first wait for
    the issuing stream's copies of the data (an event recorded at issue), else NCCL reads them early."""
    calls = []
    monkeypatch.setattr(transport, "mark", lambda tensor: "issued")
    monkeypatch.setattr(transport, "follow", lambda event: calls.append(("follow", event)))

    def exchange(out: Any, right: int, incoming: Any, left: int, pg: Any) -> list:
        calls.append(("exchange", right))
        return []

    monkeypatch.setattr(transport, "exchange", exchange)
    ring = RingReduceScatter(torch.arange(4.0), [(0, 2), (2, 4)], (0, 1), 0, None)
    ring.wait()
    assert calls == [("follow", "issued"), ("exchange", 1)]


def test_mark_and_follow_order_a_waiter_stream_after_the_issuing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = FakeCuda().install(monkeypatch)
    tensor = mock.MagicMock(is_cuda=True, device=GPU)
    event = transport.mark(tensor)
    assert event.stream is cuda.default
    private = cuda.Stream()
    with cuda.stream(private):
        transport.follow(event)
    assert private.waited == [event] and cuda.default.waited == []
    assert transport.mark(torch.zeros(1)) is None
