"""A parameter-server shard as a process: receives pushes, applies them, answers pulls.

The rules are the simulator's (`sim/engine/servers.py`): a synchronous shard sums one push per worker for
each (key, round) and applies the mean once, answering a worker's k-th pull of a key after round k
is applied; an asynchronous shard applies every push on arrival and answers pulls at once, recording
each update's staleness. Shard 0 also keeps the workers' clocks (SSP's bound) and, for policies with
a shared budget (ASP, SSP), hands out the phase's updates one claim at a time (`SharedClaims`, the
simulator's rule; an adaptive phase's claims carry timings its policy observes, policies.phases).
A server serves one phase; a phased policy builds a new one on the same tensors after each switch.

Every wait is bounded by the run's timeout (a worker that died or froze must not hold a shard
forever): each receive from a worker, and the main loop waiting for any message. A shard can be
made to die or freeze before one of its updates to rehearse failures (`worker.crash_point`).

Sparse pushes arrive as (index, value) pairs and are applied as the dense range they stand for
(zeros add nothing, so the parameters are numerics mode's). A synchronous shard remembers which
elements each round of a sparse key touched, and answers a sparse pull of that round with just
those (`protocol.pull_reply`); a pull it has no such round for (asynchronous, or a restarted
shard's first read) gets the dense range.

Values travel in the frame's `wire` type (`workload.gradient_precision`, real/protocol.py): pushes
arrive as float32 copies of their 16-bit values and are applied to the shard's fp32 parameters; a
pull is answered in the type its request names.

Devices: the shard's parameters and optimizer state may live on a GPU; frames are host tensors
(real/protocol.py), so pushed values are copied onto the device as they are applied, and replies
are read off it. The bookkeeping (`touched`, sparse rows) stays on the host.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

import torch
import torch.distributed as dist

from policies.ops import ServerSpec
from policies.phases import Timing
from real import protocol as wire
from real.placement import host_copy
from real.worker import crash_point, fail_now, room_for_snapshot, wait_all
from sim.engine.phase_budget import SharedClaims
from sim.numerics.servers import ServerTensors, Update


@dataclass(frozen=True)
class Evaluation:
    """When a shard copies its parameters for evaluation after the run."""

    every: int  # iterations between copies
    keys: int  # buckets pushed to the shard
    iterations: int  # the policy's iterations (the last is evaluated from the final state)
    t0: float  # perf_counter at the policy's start
    before: int = 0  # worker-iterations of the phases before this one (policies.phases)


class ShardServer:
    def __init__(
        self,
        spec: ServerSpec,
        workers: int,
        tensors: ServerTensors,
        coordinator: bool,
        claims: Optional[SharedClaims],
        evaluation: Optional[Evaluation] = None,
        touched: Optional[torch.Tensor] = None,
        start: int = 0,
        timeout_s: Optional[float] = None,
    ) -> None:
        """`claims`: the shared budget a coordinator hands out (asynchronous phases); `touched`: the
        elements pushed to this shard in earlier phases; `start`: the phase's first step (a shard
        started mid-run holds the checkpoint: each worker's first pull of a key reads it at once);
        `timeout_s`: how long a receive may wait (None: the process group's timeout)."""
        self.spec, self.workers, self.tensors = spec, workers, tensors
        self.timeout_s = timeout_s
        self._crash = crash_point(dist.get_rank()) if dist.is_initialized() else -1
        self.coordinator, self.claims = coordinator, claims
        self.evaluation = evaluation
        self.snapshots: list[tuple[int, float, torch.Tensor]] = []  # (iteration, seconds, parameters)
        n = tensors.params.numel()
        self.touched = touched if touched is not None else torch.zeros(n, dtype=torch.bool)  # pushed here
        self.staleness: list[tuple[int, int]] = []  # (rank, staleness) per applied asynchronous update
        self.applied = 0
        self._sends: list[Any] = []  # reply works in flight (their tensors must outlive them)
        self._pushed: dict[tuple[int, int], int] = defaultdict(int)  # (rank, key) -> rounds pushed
        first = -1 if start > 0 else 0  # a restarted shard's checkpoint counts as round -1
        self._pulled: dict[tuple[int, int], int] = defaultdict(lambda: first)  # (rank, key) -> next round
        self._count: dict[tuple[int, int], int] = defaultdict(int)  # (key, round) -> pushes received
        self._done_rounds: set[tuple[int, int]] = set()
        # (key, round) -> pulls held for it: (rank, key, a, b, arrival, round, index bytes)
        self._waiting: dict[tuple[int, int], list[tuple[int, int, int, int, float, int, int]]] = defaultdict(list)
        self._applied_to: dict[int, int] = defaultdict(int)  # key -> updates applied
        self._sent_version: dict[tuple[int, int], int] = defaultdict(int)  # (rank, key) -> version last sent
        self._rows: dict[tuple[int, int], tuple[int, torch.Tensor]] = {}  # (key, round) -> (a, touched) sparse
        self._replies: dict[tuple[int, int], int] = defaultdict(int)  # (key, round) -> pulls answered
        self._clock = [start] * workers
        self._clock_waiters: list[tuple[int, int, float]] = []  # (rank, min clock, arrival)
        self._finished = 0

    def serve(self) -> None:
        """Answer messages until every worker has said it finished the policy.

        One receiving thread per worker keeps every worker's pushes flowing at once (a single loop
        receiving one payload at a time would hold the others' pull requests behind it); the
        main thread applies and replies in arrival order."""
        inbox: queue.Queue = queue.Queue()
        threads = [
            threading.Thread(target=self._receive, args=(w, inbox), daemon=True, name=f"syncsim-shard-rx-{w}")
            for w in range(self.workers)
        ]
        for thread in threads:
            thread.start()
        while self._finished < self.workers:
            src, kind, key, a, b, value, values, arrival = self._next(inbox)  # values: a PULL's reply type
            if isinstance(kind, BaseException):
                raise kind
            if kind in (wire.Kind.PUSH, wire.Kind.SPARSE_PUSH):
                self._push(src, key, a, b, values, sparse=kind == wire.Kind.SPARSE_PUSH)
            elif kind == wire.Kind.PULL:
                self._pull(src, key, a, b, arrival, index_bytes=value, on_wire=values)
            elif kind == wire.Kind.CLAIM:
                last = Timing(src, key, a / 1e6, b / 1e6) if value else None
                granted = self.claims is None or self.claims.claim(last)
                self._send(torch.tensor([int(granted)]), src, wire.CLAIM_REPLY)
            elif kind == wire.Kind.TICK:
                self._clock[src] += 1
                self._answer_clocks()
            elif kind == wire.Kind.WAIT_CLOCK:
                self._clock_waiters.append((src, value, arrival))
                self._answer_clocks()
            elif kind == wire.Kind.DONE:
                self._finished += 1
                self._clock[src] = 2**62  # a finished worker holds nobody back
                self._answer_clocks()
            else:
                raise RuntimeError(f"shard {self.spec.shard}: unknown message kind {kind} from rank {src}")
            self._sends = [w for w in self._sends if not w.is_completed()]
        if self.timeout_s is None:
            for work in self._sends:
                work.wait()
        else:
            wait_all(self._sends, self.timeout_s)

    def _next(self, inbox: queue.Queue) -> tuple:
        """The next message; the receiving threads time out first (a margin later: none did, a bug)."""
        if self.timeout_s is None:
            return inbox.get()
        try:
            return inbox.get(timeout=self.timeout_s + 5.0)
        except queue.Empty:
            raise RuntimeError(
                f"parameter-server shard {self.spec.shard}: no message from any worker in {self.timeout_s + 5.0:g} s"
            ) from None

    def _receive(self, src: int, inbox: queue.Queue) -> None:
        """Worker `src`'s messages, in its order, into `inbox`, with receives always posted for it
        (protocol.py: a posted receive spares gloo's send/receive handshake)."""
        try:
            elements = self.tensors.params.numel()
            posted = wire.preposted(elements)
            buffers = [torch.empty(wire.HEADER_FLOATS + elements) for _ in range(posted)]
            works = [wire.post(buffer, src) for buffer in buffers]
            i = 0
            while True:
                self._wait(works[i])
                arrival, message = time.perf_counter(), buffers[i]
                kind, key, a, b, value = wire.header_of(message)
                values = None
                if kind == wire.Kind.PUSH:
                    values = wire.payload_of(message, a, b)
                elif kind == wire.Kind.SPARSE_PUSH:
                    values = wire.sparse_values_of(message, a, b)
                elif kind == wire.Kind.PULL:
                    values = wire.wire_of(message)  # the type to reply in
                if kind == wire.Kind.DONE:
                    for j in range(1, posted):  # the CLOSE frames that follow DONE
                        self._wait(works[(i + j) % posted])
                    inbox.put((src, kind, key, a, b, value, values, arrival))
                    return
                works[i] = wire.post(message, src)
                i = (i + 1) % posted
                inbox.put((src, kind, key, a, b, value, values, arrival))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            inbox.put((src, exc, 0, 0, 0, 0, None, 0.0))

    def _wait(self, work: Any) -> None:
        if self.timeout_s is None:
            work.wait()  # gloo: the process group's timeout
        else:
            work.wait(timeout=timedelta(seconds=self.timeout_s))

    def _push(self, rank: int, key: int, a: int, b: int, values: torch.Tensor, sparse: bool = False) -> None:
        rnd = self._pushed[(rank, key)]
        self._pushed[(rank, key)] = rnd + 1
        update = Update(rank, a, b, values.to(self.tensors.params.device))
        self.touched[a:b] = True
        if not self.spec.sync:
            self._rehearse_crash()
            self.staleness.append((rank, self._applied_to[key] - self._sent_version[(rank, key)]))
            self.tensors.apply_async(update)
            self._applied_to[key] += 1
            self.applied += 1
            self._maybe_snapshot()
            return
        self.tensors.add(self.spec.shard, key, rnd, update)
        if sparse:
            _, touched = self._rows.setdefault((key, rnd), (a, torch.zeros(b - a, dtype=torch.bool)))
            touched |= values != 0
        self._count[(key, rnd)] += 1
        if self._count[(key, rnd)] == self.workers:
            self._rehearse_crash()
            del self._count[(key, rnd)]
            self.tensors.apply_round(self.spec.shard, key, rnd)
            self._applied_to[key] += 1
            self.applied += 1
            self._done_rounds.add((key, rnd))
            self._maybe_snapshot()
            for pull in self._waiting.pop((key, rnd), ()):
                self._reply(*pull)

    def _rehearse_crash(self) -> None:
        """Die or freeze instead of applying update number `applied`, if SYNCSIM_REAL_CRASH says so."""
        if self.applied == self._crash:
            fail_now()

    def _maybe_snapshot(self) -> None:
        """Copy the parameters when the updates applied complete another `every` iterations: rounds of
        every key (synchronous), or iterations x workers updates (asynchronous, as numerics mode counts)."""
        e = self.evaluation
        if e is None:
            return
        if self.spec.sync:
            iteration = e.before // self.workers + min(self._applied_to[key] for key in range(e.keys))
        else:
            iteration = (e.before + self.applied // e.keys) // self.workers
        done = self.snapshots[-1][0] if self.snapshots else 0
        if iteration > done and iteration % e.every == 0 and iteration < e.iterations:
            if room_for_snapshot(self.snapshots, self.tensors.params):
                self.snapshots.append((iteration, time.perf_counter() - e.t0, host_copy(self.tensors.params)))

    def _pull(
        self,
        rank: int,
        key: int,
        a: int,
        b: int,
        arrival: float,
        index_bytes: int = 0,
        on_wire: Optional[torch.dtype] = None,
    ) -> None:
        """`index_bytes` > 0: a sparse pull, answered with the rows round `rnd` touched; `on_wire`:
        the type the request asks the values in."""
        rnd = self._pulled[(rank, key)]
        self._pulled[(rank, key)] = rnd + 1
        if self.spec.sync and rnd >= 0 and (key, rnd) not in self._done_rounds:
            self._waiting[(key, rnd)].append((rank, key, a, b, arrival, rnd, index_bytes, on_wire))
            return
        self._reply(rank, key, a, b, arrival, rnd, index_bytes, on_wire)

    def _reply(
        self,
        rank: int,
        key: int,
        a: int,
        b: int,
        arrival: float,
        rnd: int = -1,
        index_bytes: int = 0,
        on_wire: Optional[torch.dtype] = None,
    ) -> None:
        """Send params[a:b] and, last, the seconds the request waited for its round (dense pulls), or
        a `pull_reply` frame (sparse pulls); values in `on_wire` (the shard's own stay fp32)."""
        self._sent_version[(rank, key)] = self._applied_to[key]
        held = time.perf_counter() - arrival
        params = self.tensors.params
        if index_bytes:
            rows = self._touched(key, rnd, a, b)
            reply = wire.pull_reply(key, a, b, held, index_bytes, params, rows, on_wire)
        else:
            reply = wire.dense_reply(params[a:b], held, on_wire)
        self._send(reply, rank, wire.REPLY_BASE + key)

    def _touched(self, key: int, rnd: int, a: int, b: int) -> Optional[torch.Tensor]:
        """Offsets from `a` of the elements round `rnd` of `key` updated (None: not known, send all);
        the round's record goes once every worker has read it."""
        if not self.spec.sync or (key, rnd) not in self._rows:
            return None
        start, touched = self._rows[(key, rnd)]
        self._replies[(key, rnd)] += 1
        if self._replies[(key, rnd)] == self.workers:
            del self._rows[(key, rnd)], self._replies[(key, rnd)]
        if (start, start + touched.numel()) != (a, b):
            return None  # pulled with other bounds than pushed: the rows would not cover the range
        return torch.nonzero(touched, as_tuple=True)[0]

    def _answer_clocks(self) -> None:
        slowest = min(self._clock)
        keep = []
        for rank, wanted, arrival in self._clock_waiters:
            if wanted <= slowest:
                self._send(torch.tensor([time.perf_counter() - arrival]), rank, wire.CLOCK_REPLY)
            else:
                keep.append((rank, wanted, arrival))
        self._clock_waiters = keep

    def _send(self, tensor: torch.Tensor, dst: int, tag: int) -> None:
        self._sends.append(wire.reply(tensor, dst, tag))
