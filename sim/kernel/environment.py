"""The SimPy environment the engine runs: SimPy's own, with two costs per event taken out.

* `run(until=event)` is SimPy's loop with `step` written inline: one Python call less per event.
  Events are taken from the same queue in the same order, callbacks run in the same order, and a
  failed event that nobody defused raises the same copy of its exception.
* `AllDone` is SimPy's `AllOf` for a caller that never reads the value: it fires at the same point
  (when the last of its events is processed) but builds no `ConditionValue`.
* `queue_call` queues a callback where SimPy would queue a Timeout (or a process's Initialize) made
  at that moment, with the same time, priority and sequence number, but with no Event behind it.
  These work with any SimPy environment.

`events_processed()` counts from SimPy's event numbering, so no per-event hook is needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from heapq import heappop, heappush
from typing import Any, Optional, Union

import simpy
from simpy.core import StopSimulation
from simpy.events import NORMAL, PENDING, Event, EventPriority


class CountingEnvironment(simpy.Environment):
    """A SimPy environment that can tell how many events it processed (for benchmarks and stats)."""

    def events_processed(self) -> int:
        """Events processed so far: SimPy numbers every event it schedules and each leaves the queue
        when processed. Takes one number: call it once, at the end."""
        return next(self._eid) - len(self._queue)  # type: ignore[attr-defined]

    def run(self, until: Optional[Union[float, Event]] = None) -> Optional[Any]:
        """As `simpy.Environment.run`; with an event for `until`, the loop runs `step` inline."""
        if not isinstance(until, Event):
            return super().run(until)
        if until.callbacks is None:  # processed already
            return until.value
        until.callbacks.append(StopSimulation.callback)
        queue = self._queue  # type: ignore[attr-defined]
        try:
            while queue:
                self._now, _, _, event = heappop(queue)
                callbacks, event.callbacks = event.callbacks, None
                try:
                    for callback in callbacks:
                        callback(event)
                except StopSimulation:  # as `step`: the rest of the callbacks run when the run resumes
                    event.callbacks = callbacks[callbacks.index(callback) + 1 :]
                    self.schedule(event, EventPriority(-1))
                    raise
                if not event._ok and not hasattr(event, "_defused"):
                    exc = type(event._value)(*event._value.args)
                    exc.__cause__ = event._value
                    raise exc
        except StopSimulation as stop:
            return stop.args[0]
        raise RuntimeError(f'No scheduled events left but "until" event was not triggered: {until}')


class AllDone(Event):
    """Fires once every one of `events` has been processed, or fails with the first that failed (and
    defuses it), exactly where `AllOf` would; its value is None."""

    def __init__(self, env: simpy.Environment, events: Sequence[Event]) -> None:
        super().__init__(env)
        self._left = len(events)
        if not events:
            self.succeed()
            return
        for event in events:
            if event.callbacks is None:
                self._check(event)
            else:
                event.callbacks.append(self._check)

    def _check(self, event: Event) -> None:
        if self._value is not PENDING:
            return
        self._left -= 1
        if not event._ok:
            event._defused = True
            self.fail(event._value)
        elif self._left == 0:
            self.succeed()


class Wake:
    """What SimPy's queue needs of an entry (`callbacks`, `_ok`, `_value`) and nothing more."""

    __slots__ = ("callbacks", "_ok", "_value")

    def __init__(self, callback: Callable[[Any], None]) -> None:
        self.callbacks: Optional[list[Callable[[Any], None]]] = [callback]
        self._ok, self._value = True, None


def queue_call(
    env: simpy.Environment, delay: float, callback: Callable[[Any], None], priority: EventPriority = NORMAL
) -> Wake:
    """Call `callback(wake)` `delay` from now, in the queue order a Timeout made now would have
    (`priority` URGENT: a process started now)."""
    wake = Wake(callback)
    heappush(env._queue, (env._now + delay, priority, next(env._eid), wake))  # type: ignore[attr-defined]
    return wake
