"""Runs policy programs on the simulator: validates every op, then turns it into flows and waits.

An item of a program (one op, or a tuple of ops that run concurrently) finishes when all its ops
have. In the pipelined model, a rank's concurrent pushes (or pulls) of equal size travel as one
coupled transfer, the point-to-point counterpart of a pipelined collective. A sparse push or pull
(`op.coding` set) carries only rows (`sim.compute.sparse_traffic`): a push this rank's non-zero rows the
shard owns, a pull the rows the shard updated in the last round (the union of that round's pushes).

Launched collectives, `Wait`s and local ops are carried out by `sim.engine.launches`; a program holding
any of them runs item by item (no fast path: `_chain` and the remembered programs are for programs whose
every item waits for its collectives).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from typing import Any, Optional

import simpy
from simpy.events import URGENT, Event

from policies.ops import Collective, LocalOp, Op, Pull, Push, Wait, WaitForClock, step_ops
from sim.cluster.routing import Router
from sim.compute.sparse_traffic import SparseTraffic, message_bytes
from sim.engine.clocks import ClockBoard
from sim.engine.communicators import Communicators
from sim.engine.launches import Launches
from sim.engine.local_op_costs import LocalOpCosts
from sim.engine.op_checks import OpValidator
from sim.engine.servers import Shard
from sim.errors import PolicyError
from sim.kernel.environment import queue_call
from sim.network.flows import Network

CHAIN_MEMO_LIMIT = 500_000  # (rank, program) pairs remembered as checked (about 200 bytes each)

# (rank, step, op kind, shard (-1 for several), ops in the batch, total nbytes, start, end):
# one finished point-to-point batch or wait
OnOp = Callable[[int, int, str, int, int, float, float, float], None]


def _processed(env: simpy.Environment) -> simpy.Event:
    """An event that has fired and whose callbacks have run: a process that yields it goes straight on
    (SimPy resumes at once when `callbacks` is None), with no trip through the event queue."""
    event = env.event()
    event._ok, event._value, event.callbacks = True, None, None  # what env.step leaves behind
    return event


class _Chain:
    """Arrives at a program's collectives in turn, each when the one before completes (a callback with
    no reference cycle: plain reference counting frees it once the last call completes)."""

    __slots__ = ("comms", "rank", "step", "tickets", "bucket", "next", "last")

    def __init__(self, comms: Communicators, rank: int, step: int, tickets: list[Any], bucket: Optional[int]):
        self.comms, self.rank, self.step, self.tickets, self.bucket = comms, rank, step, tickets, bucket
        self.next, self.last = 0, len(tickets) - 1

    def __call__(self, _event: Optional[simpy.Event]) -> None:
        i = self.next
        self.next = i + 1
        event = self.comms.arrive(self.rank, self.step, self.tickets[i], self.bucket)
        if i < self.last:
            event.callbacks.append(self)


class _InTurn:
    """`run_in_turn`'s programs one after another without a process: each item is issued when the one
    before completes, and each program's event fires after its last item, at the points a process
    running `_run` over them would reach (it starts from the queue, as a process does)."""

    __slots__ = ("executor", "rank", "step", "staged", "done", "buckets", "program", "item")

    def __init__(
        self,
        executor: Executor,
        rank: int,
        step: int,
        staged: list[tuple[list[tuple[Op, ...]], list[list[Any]]]],
        done: list[simpy.Event],
        buckets: Sequence[Optional[int]],
    ) -> None:
        self.executor, self.rank, self.step, self.staged, self.done = executor, rank, step, staged, done
        self.buckets, self.program, self.item = buckets, 0, 0

    def __call__(self, event: Any) -> None:
        if not event._ok:  # what a process does with a failed event it waited on: raise it
            event._defused = True
            raise event._value
        executor = self.executor
        while self.program < len(self.staged):
            items, tickets = self.staged[self.program]
            while self.item < len(items):
                i = self.item
                self.item = i + 1
                events = executor._issue(self.rank, self.step, items[i], tickets[i], self.buckets[self.program])
                if not events:
                    continue
                waited = events[0] if len(events) == 1 else executor.env.all_of(events)
                if waited.callbacks is not None:  # not processed yet: go on when it is
                    waited.callbacks.append(self)
                    return
            self.done[self.program].succeed()
            self.program, self.item = self.program + 1, 0


class Executor:
    def __init__(
        self,
        env: simpy.Environment,
        policy: str,
        rank_nodes: Sequence[str],
        net: Network,
        router: Router,
        comms: Communicators,
        shards: Sequence[Shard],
        clocks: ClockBoard,
        coupled_p2p: bool,
        on_op: OnOp,
        on_blocked: Callable[[int, int, float, float], None],
        numerics: Any = None,
        traffic: Optional[SparseTraffic] = None,
        buffers: Sequence[str] = (),
        local_costs: Optional[LocalOpCosts] = None,
    ) -> None:
        """`numerics` (a `sim.numerics.replicas.Replicas`) makes ops act on real tensors; `traffic`
        sizes sparse pushes and pulls; `buffers`: the names of the policy's buffers (Policy.buffers);
        `local_costs` times local ops (None: they take no time) and knows the model's buckets."""
        self.env, self.policy, self.rank_nodes = env, policy, rank_nodes
        self.net, self.router, self.comms, self.shards, self.clocks = net, router, comms, shards, clocks
        self.coupled_p2p, self.on_op, self.on_blocked = coupled_p2p, on_op, on_blocked
        self.numerics, self.traffic = numerics, traffic
        self.world = len(rank_nodes)
        self._everyone = tuple(range(self.world))
        buckets = len(local_costs.bucket_bytes) if local_costs is not None else None
        self.validator = OpValidator(policy, self.world, len(shards), buffers, buckets)
        self.launches = Launches(env, comms, self.validator, numerics, local_costs)
        # (rank, id) of a tuple program that rank ran before -> (the tuple, its (op, communicator) pairs if
        # it is collectives only, else its one item of dense pushes or pulls): checked, needs no staging
        self._known_programs: dict[tuple[int, int], tuple[tuple[Any, ...], Any, Any]] = {}
        # id of an item of dense pushes or pulls -> its plan (see `_remember_p2p`)
        self._p2p_items: dict[int, tuple[tuple[Op, ...], bool, list[Any], float, list[None]]] = {}
        self.settled = _processed(env)  # what `run_in_turn` returns for a program with nothing to do
        self._route_cache: dict[tuple[int, tuple[int, ...], bool], tuple[tuple[Any, ...], float]] = {}
        self._all_async = all(not shard.spec.sync for shard in shards)  # every pull is answered at once
        self._routes_version = -1

    def run(self, rank: int, step: int, program: Iterable[Any], bucket: Optional[int] = None) -> simpy.Event:
        """Validate the whole program, enqueue its collectives now, and execute it item by item.

        `bucket`: the gradient bucket the program belongs to (None: a whole-model hook)."""
        known = self._known_programs.get((rank, id(program)))
        if known is not None and known[0] is program:  # this rank ran this very tuple before: checked
            if known[1] is not None:
                enqueue = self.comms.enqueue
                return self._chain(rank, step, [enqueue(rank, step, op, comm) for op, comm in known[1]], bucket)
            return self._issue(rank, step, known[2], [], bucket)[0]
        items, tickets, collectives_only = self._stage(rank, step, program)
        if not items:  # most hooks of most policies: no process needed
            done = Event(self.env)
            done.succeed()
            return done
        if len(items) == 1 and not collectives_only and self.numerics is None:  # one item: no process needed
            events = self._issue(rank, step, items[0], tickets[0], bucket)
            if self._is_known_p2p(items[0]):
                self._remember_program(rank, program, None, items[0])
            return events[0] if len(events) == 1 else self.env.all_of(events)
        if collectives_only and self.numerics is None:
            chain = [(item[0], ticket[0][0]) for item, ticket in zip(items, tickets)]  # (op, communicator)
            self._remember_program(rank, program, chain, None)
            return self._chain(rank, step, [ticket[0] for ticket in tickets], bucket)
        return self.env.process(self._run(rank, step, items, tickets, bucket))

    def _remember_program(self, rank: int, program: Iterable[Any], chain: Any, item: Any) -> None:
        if type(program) is tuple and len(self._known_programs) < CHAIN_MEMO_LIMIT:  # kept alive: ids stay unique
            self._known_programs[(rank, id(program))] = (program, chain, item)

    def _is_known_p2p(self, ops: tuple[Op, ...]) -> bool:
        """An item `_issue` sends as one coupled transfer with no staging (see `_remember_p2p`)."""
        plan = self._p2p_items.get(id(ops))
        return plan is not None and plan[0] is ops

    def _chain(self, rank: int, step: int, tickets: list[Any], bucket: Optional[int]) -> simpy.Event:
        """A program of collectives one after another, without a process: arrive at the first now and at
        each next one when the one before completes; the last one's completion ends the program."""
        _Chain(self.comms, rank, step, tickets, bucket)(None)
        return self.comms.completion(tickets[-1])

    def _stage(
        self, rank: int, step: int, program: Iterable[Any]
    ) -> tuple[list[tuple[Op, ...]], list[list[Any]], bool]:
        """Validate and enqueue a program: its items, per item and op the communicator ticket of a
        collective (else None), and whether every item is one collective."""
        items: list[tuple[Op, ...]] = []
        tickets: list[list[Any]] = []
        check, enqueue = self.validator.check, self.comms.enqueue
        collectives_only = True
        for item in program:
            ops = step_ops(item)
            items.append(ops)
            item_tickets: list[Any] = []
            for op in ops:
                check(rank, step, op)
                if isinstance(op, Collective):
                    item_tickets.append(enqueue(rank, step, op))
                    if op.handle is not None:  # a launch: the item does not wait for it
                        collectives_only = False
                else:
                    item_tickets.append(None)
                    collectives_only = False
            tickets.append(item_tickets)
            if len(ops) != 1:
                collectives_only = False
        return items, tickets, collectives_only

    def _staged(self, rank: int, step: int, program: Iterable[Any]) -> tuple[list[tuple[Op, ...]], list[list[Any]]]:
        """`_stage` for `run_in_turn`: a one-item program of dense pushes or pulls this rank ran before
        needs no staging (no tickets: it has no collective)."""
        known = self._known_programs.get((rank, id(program)))
        if known is not None and known[0] is program and known[1] is None:
            return [known[2]], [[]]
        items, tickets, _ = self._stage(rank, step, program)
        if len(items) == 1 and self.numerics is None and self._is_known_p2p(items[0]):
            self._remember_program(rank, program, None, items[0])
        return items, tickets

    def run_in_turn(
        self, rank: int, step: int, programs: list[Iterable[Any]], buckets: Sequence[Optional[int]]
    ) -> list[simpy.Event]:
        """Run programs one after another (all validated and enqueued now); an event per program."""
        staged = [self._staged(rank, step, program) for program in programs]
        if not any(items for items, _ in staged):  # nothing to read before forward (most policies)
            return [self.settled] * len(staged)
        done = [Event(self.env) for _ in staged]
        queue_call(self.env, 0.0, _InTurn(self, rank, step, staged, done, buckets), URGENT)  # as a process starts
        return done

    def _run(
        self, rank: int, step: int, items: list[tuple[Op, ...]], tickets: list[list[Any]], bucket: Optional[int]
    ) -> Generator[simpy.Event, Any, None]:
        for ops, item_tickets in zip(items, tickets):
            events = self._issue(rank, step, ops, item_tickets, bucket)
            if len(events) == 1:
                yield events[0]
            elif events:
                yield self.env.all_of(events)

    # ----------------------------------------------------------------------------- execution
    def _issue(
        self, rank: int, step: int, ops: tuple[Op, ...], tickets: list[Any], bucket: Optional[int]
    ) -> list[simpy.Event]:
        plan = self._p2p_items.get(id(ops))
        if plan is not None and plan[0] is ops:  # a dense push or pull item seen before: one coupled transfer
            _, is_push, batch, size, no_updates = plan
            if is_push:
                return [self._push(rank, step, batch, no_updates, size)]
            return [self._pull(rank, step, batch, [], size)]
        events: list[simpy.Event] = []
        pushes = [op for op in ops if isinstance(op, Push)]
        pulls = [op for op in ops if isinstance(op, Pull)]
        numerics = self.numerics
        for op, ticket in zip(ops, tickets):
            if isinstance(op, Collective):
                if numerics is not None:
                    numerics.arrive(rank, op, bucket)
                if op.handle is None:
                    events.append(self.comms.arrive(rank, step, ticket, bucket))
                else:
                    self.launches.launch(rank, step, op, ticket, bucket)
            elif isinstance(op, WaitForClock):
                events.append(
                    self._blocking(
                        rank, step, self._timed(rank, step, "wait_clock", [op], self.clocks.wait(op.min_clock))
                    )
                )
            elif isinstance(op, LocalOp):
                ran = self.launches.local(rank, step, op, bucket)
                if ran is not None:
                    events.append(ran)
            elif isinstance(op, Wait):
                events.append(self.launches.wait(rank, step, op))
        # numerics: the pushes (pulls) of one item split the bucket's elements between them
        updates = numerics.push_updates(rank, bucket, pushes) if numerics and pushes else [None] * len(pushes)
        ranges = numerics.pull_ranges(rank, bucket, pulls) if numerics and pulls else [None] * len(pulls)
        for batch in self._batches(list(zip(pushes, updates))):
            size = self._p2p_bytes(rank, step, bucket, batch[0][0])
            events.append(self._push(rank, step, [op for op, _ in batch], [u for _, u in batch], size))
        for batch in self._batches(list(zip(pulls, ranges))):
            size = self._p2p_bytes(rank, step, bucket, batch[0][0])
            ops_ = [op for op, _ in batch]
            events.append(self._pull(rank, step, ops_, [r for _, r in batch if r is not None], size))
        self._remember_p2p(ops)
        return events

    def _remember_p2p(self, ops: tuple[Op, ...]) -> None:
        """Remember an item of dense pushes (or pulls) of one size, which always travel as one coupled
        transfer of that size, so that its next issue skips the sorting into batches."""
        if not (ops and self.coupled_p2p and self.numerics is None and len(self._p2p_items) < CHAIN_MEMO_LIMIT):
            return
        kind = type(ops[0])
        if kind not in (Push, Pull) or any(type(op) is not kind or op.coding is not None for op in ops):
            return
        if len({op.nbytes for op in ops}) == 1:  # kept alive here: the id stays unique
            self._p2p_items[id(ops)] = (ops, kind is Push, list(ops), float(ops[0].nbytes), [None] * len(ops))

    def _batches(self, pairs: list[tuple[Any, Any]]) -> list[list[tuple[Any, Any]]]:
        """(op, tensor data) pairs: dense ops of equal size travel as one coupled transfer (pipelined
        model), else one each."""
        if not self.coupled_p2p:
            return [[pair] for pair in pairs]
        by_size: dict[Any, list[Any]] = {}
        for i, pair in enumerate(pairs):
            key = ("sparse", i) if pair[0].coding is not None else pair[0].nbytes
            by_size.setdefault(key, []).append(pair)
        return list(by_size.values())

    def _p2p_bytes(self, rank: int, step: int, bucket: Optional[int], op: Any) -> float:
        """Bytes one push or pull moves: `nbytes`, or for a sparse one the rows it carries."""
        coding = op.coding
        if coding is None:
            return float(op.nbytes)
        if self.traffic is None or bucket is None:
            raise PolicyError(
                f"policy {self.policy!r}: {op!r} is sparse; sparse pushes and pulls act on a gradient bucket "
                "of a workload with sparse layers"
            )
        shards = len(self.shards)
        if isinstance(op, Push):
            c = self.traffic.census(step, bucket, self._everyone, coding.partition, shards)
            return float(message_bytes(c.values[rank, op.shard], c.rows[rank, op.shard], c.share, coding))
        c = self.traffic.census(step - 1, bucket, self._everyone, coding.partition, shards)
        return float(message_bytes(c.union_values[op.shard], c.union_rows[op.shard], c.share, coding))

    def _timed(
        self, rank: int, step: int, kind: str, ops: Sequence[Any], event: simpy.Event, nbytes: Optional[float] = None
    ) -> simpy.Event:
        start = self.env.now

        shard = getattr(ops[0], "shard", -1) if len(ops) == 1 else -1
        if nbytes is None:
            nbytes = float(sum(getattr(op, "nbytes", 0.0) for op in ops))

        def record(_ev: simpy.Event) -> None:
            self.on_op(rank, step, kind, shard, len(ops), nbytes, start, self.env.now)

        event.callbacks.append(record)
        return event

    def _push(self, rank: int, step: int, batch: list[Push], updates: list[Any], size: float) -> simpy.Event:
        paths, latency = self._routes(rank, tuple(op.shard for op in batch), True)
        delivered = self.net.transfer(paths, size, latency=latency)

        def arrive(_ev: simpy.Event) -> None:
            for op, update in zip(batch, updates):
                self.shards[op.shard].received(rank, op.key, size, update)

        delivered.callbacks.insert(0, arrive)  # the shard hears of it before the pusher moves on
        return self._timed(rank, step, "push", batch, delivered, size * len(batch))

    def _blocking(self, rank: int, step: int, event: simpy.Event) -> simpy.Event:
        """Count the time until `event` fires as blocked on other workers."""
        start = self.env.now
        event.callbacks.append(lambda _ev: self.on_blocked(rank, step, start, self.env.now))
        return event

    def _pull(self, rank: int, step: int, batch: list[Pull], ranges: list[tuple[int, int]], size: float) -> simpy.Event:
        done = Event(self.env)
        waits = [] if self._all_async else [self.shards[op.shard].ready(rank, op.key) for op in batch]
        if all(wait is None for wait in waits):  # asynchronous shards answer at once: no events to wait on
            self._send_pull(rank, batch, ranges, size, done)
            return self._timed(rank, step, "pull", batch, done, size * len(batch))
        ready = self._blocking(rank, step, self.env.all_of([wait or self.settled for wait in waits]))

        ready.callbacks.append(lambda _ev: self._send_pull(rank, batch, ranges, size, done))
        return self._timed(rank, step, "pull", batch, done, size * len(batch))

    def _send_pull(
        self, rank: int, batch: list[Pull], ranges: list[tuple[int, int]], size: float, done: simpy.Event
    ) -> None:
        for op in batch:  # the shard sends its parameters as they are now
            self.shards[op.shard].reply(rank, op.key)
        if ranges:
            self.numerics.pulled(rank, ranges)
        paths, latency = self._routes(rank, tuple(op.shard for op in batch), False)
        self.net.transfer(paths, size, latency=latency, done=done)  # the reply's delivery completes the pull

    def _routes(self, rank: int, shards: tuple[int, ...], to_shards: bool) -> tuple[tuple[Any, ...], float]:
        """Paths between `rank` and `shards` (pushes: towards them) and the longest path's latency,
        worked out once per combination (routes are fixed; link latencies change only by faults,
        which the network applies to transfers, so the cache is cleared when they do)."""
        key = (rank, shards, to_shards)
        if self.net.latency_version != self._routes_version:
            self._route_cache.clear()
            self._routes_version = self.net.latency_version
        found = self._route_cache.get(key)
        if found is None:
            node = self.rank_nodes[rank]
            hosts = [self.shards[shard].spec.host for shard in shards]
            paths = tuple(self.router.path(node, host) if to_shards else self.router.path(host, node) for host in hosts)
            found = self._route_cache[key] = (paths, max(self.net.path_latency(path) for path in paths))
        return found
