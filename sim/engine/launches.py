"""The ops of a program that do not wait where they stand: collectives launched with a handle, the
`Wait`s that finish them, and local ops (policies.ops), for the executor (sim/engine/executor.py).

A launched collective is reached on its communicator like any other (its place in the group's order was
taken when its program was staged), but the item that launches it ends at once; its completion is kept
under (rank, handle) until the rank's `Wait(handle)`, at this step or a later one, which blocks until the
collective has completed. Launching a handle still pending, or waiting on one this rank has not launched
(or already waited for), is a policy bug. A launch never waited for holds nothing up: its collective runs
on when its members arrive, and the run ends when the workers do.

A local op runs for its memory-bound time (sim/engine/local_op_costs.py), counted as compute of its rank
and step (`computing`); numerics mode applies it to the rank's tensors when it is issued.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional

import simpy
from simpy.events import Timeout

from policies.ops import Collective, LocalOp, Wait
from sim.engine.communicators import Communicators
from sim.engine.local_op_costs import LocalOpCosts
from sim.engine.op_checks import OpValidator


class Launches:
    def __init__(
        self,
        env: simpy.Environment,
        comms: Communicators,
        validator: OpValidator,
        numerics: Any = None,
        costs: Optional[LocalOpCosts] = None,
    ) -> None:
        """`costs`: the local ops' times (None: they take no time); `validator` words the errors."""
        self.env, self.comms, self.validator, self.numerics, self.costs = env, comms, validator, numerics, costs
        self._pending: dict[tuple[int, str], Any] = {}  # (rank, handle) -> the launched call's ticket
        # (rank, step) -> intervals its local ops ran, popped by the worker into the step's compute
        self.computing: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)

    def launch(self, rank: int, step: int, op: Collective, ticket: Any, bucket: Optional[int]) -> None:
        """`rank` reaches its launched collective `op` and goes on."""
        key = (rank, op.handle)
        if key in self._pending:
            raise self.validator.fail(
                rank, step, op, f"handle {op.handle!r} is still pending; Wait({op.handle!r}) before launching it again"
            )
        self._pending[key] = ticket
        self.comms.launch(rank, ticket, bucket)

    def wait(self, rank: int, step: int, op: Wait) -> simpy.Event:
        """The completion of the collective `rank` launched under `op.handle`."""
        ticket = self._pending.pop((rank, op.handle), None)
        if ticket is None:
            raise self.validator.fail(
                rank, step, op, f"no collective launched with handle {op.handle!r} on this rank is pending "
                "(never launched, or already waited for)"
            )  # fmt: skip
        self.comms.waited(rank, step, ticket)
        return self.comms.completion(ticket)

    def local(self, rank: int, step: int, op: LocalOp, bucket: Optional[int]) -> Optional[simpy.Event]:
        """Issue local op `op`: the event of its end (None when it takes no time)."""
        if self.numerics is not None:
            self.numerics.local(rank, op, bucket)
        seconds = self.costs.seconds(op, bucket) if self.costs is not None else 0.0
        if seconds <= 0:
            return None
        now = self.env._now
        self.computing[(rank, step)].append((now, now + seconds))
        return Timeout(self.env, seconds)
