"""Rendezvous for collectives: one communicator per group, calls matched by enqueue order.

When a policy hook returns a program, its collectives are *enqueued* on their communicators at
once, in program order, as a DDP comm hook enqueues NCCL calls on CUDA streams. Hooks run in the
same order on every rank, so every member's k-th call on a group is the same collective whatever
the timing. A call launches when every member has *reached* it in its program and the group's
previous call has finished (one collective at a time per communicator, as on an NCCL stream).
Members that enqueue mismatching ops are a policy bug and fail loudly.

A launched collective (`op.handle`, policies.ops) is reached by `launch`: its member goes on at once, so
its time until the call launches is not blocked time; a later `waited` (the member's `Wait`) makes the
rest of that time, from the Wait until the last member arrives, blocked time of the Wait's step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import simpy
from simpy.events import Event

from policies.ops import Collective, Group
from sim.engine.collectives import CollectiveRunner, Launched
from sim.errors import PolicyError

# Called when a collective finishes: (op, step of the first issuer, first issue time, launch time,
# what it put on the wire: `sim.engine.collectives.Launched`).
OnFinish = Callable[[Collective, int, float, float, Launched], None]
# Called at launch for every member that arrived before the last one: (rank, its step, its arrival,
# the last member's arrival). Time queued behind the group's previous call is communication, not this.
OnBlocked = Callable[[int, int, float, float], None]
# Called when a collective completes, before its members resume: (op, each member's context as
# given to `arrive`). Numerics mode carries out the op on real tensors here.
OnComplete = Callable[[Collective, dict[int, Any]], None]
LAUNCHED = -1  # the step of an arrival that does not wait (`launch`): never blocked time


@dataclass(slots=True)
class _Call:
    op: Collective
    step: int
    issued: float
    done: simpy.Event  # one completion event shared by every member
    arrivals: list[tuple[int, int, float]] = field(default_factory=list)  # (rank, its step, arrival time)
    contexts: Optional[dict[int, Any]] = None  # rank -> what its program acts on (made only if it matters)
    complete_at: float = 0.0  # when the last member arrived


@dataclass(slots=True)
class _Communicator:
    ranks: tuple[int, ...]
    size: int
    calls: dict[int, _Call] = field(default_factory=dict)
    issued: dict[int, int] = field(default_factory=dict)  # rank -> calls issued so far
    next_launch: int = 0
    busy: bool = False


class Communicators:
    def __init__(
        self,
        env: simpy.Environment,
        runner: CollectiveRunner,
        policy: str,
        on_finish: Optional[OnFinish] = None,
        on_blocked: Optional[OnBlocked] = None,
        on_complete: Optional[OnComplete] = None,
        quorum: Optional[Callable[[Group], int]] = None,
    ):
        """`quorum`: how many of a group's members arrive (host symmetry, sim/engine/symmetry.py: only the
        simulated ones, each standing for its images); default: every member."""
        self.env, self.runner, self.policy = env, runner, policy
        self.quorum = quorum or (lambda group: len(group.ranks))
        self.on_finish, self.on_blocked, self.on_complete = on_finish, on_blocked, on_complete
        self._comms: dict[Group, _Communicator] = {}
        self._keep_contexts = on_complete is not None

    def communicator(self, op: Collective) -> _Communicator:
        """The communicator of `op`'s group (made at its first use)."""
        comm = self._comms.get(op.group)
        if comm is None:
            comm = self._comms[op.group] = _Communicator(op.group.ranks, self.quorum(op.group))
        return comm

    def enqueue(
        self, rank: int, step: int, op: Collective, comm: Optional[_Communicator] = None
    ) -> tuple[_Communicator, _Call]:
        """Reserve `rank`'s next position on `op`'s communicator (`comm`, if the caller knows it);
        returns the ticket for `arrive`."""
        if comm is None:
            comm = self.communicator(op)
        seq = comm.issued.get(rank, 0)
        comm.issued[rank] = seq + 1
        call = comm.calls.get(seq)
        if call is None:
            call = comm.calls[seq] = _Call(op, step, self.env._now, Event(self.env))
        elif call.op is not op and call.op != op:
            raise self._mismatch(rank, op, seq, call)
        return comm, call

    def _mismatch(self, rank: int, op: Collective, seq: int, call: _Call) -> PolicyError:
        return PolicyError(
            f"policy {self.policy!r}: rank {rank} enqueued {op!r} as call #{seq} on {op.group!r}, "
            f"but another member enqueued {call.op!r}; "
            "every member must issue the same collectives in the same order"
        )

    def arrive(self, rank: int, step: int, ticket: tuple[_Communicator, _Call], context: Any = None) -> simpy.Event:
        """`rank` reached its enqueued call in its program; the event fires when the call completes."""
        comm, call = ticket
        now = self.env._now  # (the `now` property is a call; this runs per member and collective)
        call.arrivals.append((rank, step, now))
        if self._keep_contexts or call.op.coding is not None:  # numerics acts on them; sparse ops size by them
            if call.contexts is None:
                call.contexts = {}
            call.contexts[rank] = context
        if len(call.arrivals) == comm.size:
            call.complete_at = now
            self._try_launch(comm)
        return call.done

    def launch(self, rank: int, ticket: tuple[_Communicator, _Call], context: Any = None) -> simpy.Event:
        """`rank` reached its enqueued call and goes on without waiting for it (a launched collective)."""
        return self.arrive(rank, LAUNCHED, ticket, context)

    def waited(self, rank: int, step: int, ticket: tuple[_Communicator, _Call]) -> None:
        """`rank` now waits at `step` for the call it launched: if members are still missing, the time
        until the last one arrives is blocked time of `step` (reported when the call launches)."""
        comm, call = ticket
        if len(call.arrivals) < comm.size:
            arrivals = call.arrivals
            for i, (member, _, _) in enumerate(arrivals):
                if member == rank:
                    arrivals[i] = (rank, step, self.env._now)
                    return

    def completion(self, ticket: tuple[_Communicator, _Call]) -> simpy.Event:
        """The event that fires when the enqueued call of `ticket` completes (before anyone arrives)."""
        return ticket[1].done

    def waiting(self) -> list[str]:
        """Collectives some members entered and others did not (for deadlock reports)."""
        out = []
        for comm in self._comms.values():
            for seq, call in comm.calls.items():
                if len(call.arrivals) >= comm.size:
                    continue
                arrived = {rank for rank, _, _ in call.arrivals}
                missing = [r for r in comm.ranks if r not in arrived]
                if missing:
                    out.append(f"{call.op!r} call #{seq}: ranks {missing[:8]} never reached it")
        return out

    def _try_launch(self, comm: _Communicator) -> None:
        if comm.busy:
            return
        call = comm.calls.get(comm.next_launch)
        if call is None or len(call.arrivals) < comm.size:
            return
        comm.busy = True
        launched = self.env.now
        if self.on_blocked is not None:
            last = call.complete_at  # members arrive in time order: the last one to arrive came last
            for rank, step, arrived in call.arrivals:
                if arrived < last and step != LAUNCHED:
                    self.on_blocked(rank, step, arrived, last)
        before, after = self.runner.cast_s(call.op) if call.op.wire is not None else (0.0, 0.0)
        if before > 0:  # the members' casts to the op's wire type run before its flows start
            self.env.timeout(before).callbacks.append(lambda _e: self._launch(comm, call, launched, after))
        else:
            self._launch(comm, call, launched, after)

    def _launch(self, comm: _Communicator, call: _Call, launched: float, after: float) -> None:
        """Start `call`'s flows; it finishes `after` seconds (the casts back) after they end."""
        try:
            under_way = self.runner.run(call.op, call.step, call.contexts, call.done if after <= 0 else None)
        except PolicyError as exc:
            raise PolicyError(f"policy {self.policy!r}: {exc}") from None

        def finish(_event: simpy.Event) -> None:
            self._finish(comm, call, launched, under_way)

        if under_way.done is call.done:  # the flows fire the call's own event: finish before members resume
            call.done.callbacks.insert(0, finish)
        elif after > 0:
            under_way.done.callbacks.append(lambda _e: self.env.timeout(after).callbacks.append(finish))
        else:
            under_way.done.callbacks.append(finish)

    def _finish(self, comm: _Communicator, call: _Call, launched: float, under_way: Launched) -> None:
        del comm.calls[comm.next_launch]
        comm.next_launch += 1
        comm.busy = False
        if self.on_complete is not None:
            self.on_complete(call.op, call.contexts or {})
        if under_way.done is not call.done:
            call.done.succeed()
        if self.on_finish is not None:
            self.on_finish(call.op, call.step, call.issued, launched, under_way)
        self._try_launch(comm)
