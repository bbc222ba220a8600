"""Persistent threads that wait for communication, so the caller's thread never blocks on it.

A job goes to an idle waiter, or to a new one when every waiter is busy: a slow job never holds back
another, and in the steady state no thread is started per call (the executor has at most one
collective in flight per group plus the current items' point-to-point ops, which bounds the pool).
Waiters stay for the life of the process, blocked on their queue (daemon threads).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable


class Waiters:
    """A growing pool of daemon threads, each running one job at a time."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._idle: list[queue.SimpleQueue] = []
        self._lock = threading.Lock()
        self.started = 0  # threads started so far

    def submit(self, job: Callable[[], None], then: Callable[[], None]) -> None:
        """Run `job`, then `then`, on a waiter thread (neither may raise: report errors through their own
        state). The waiter is idle again before `then` runs, so a caller that `then` wakes and that
        submits the next job at once reuses it instead of starting another thread."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
            if inbox is None:
                inbox = queue.SimpleQueue()
                self.started += 1
                thread = threading.Thread(target=self._serve, args=(inbox,), daemon=True, name=self.name)
                thread.start()
        inbox.put((job, then))

    def _serve(self, inbox: queue.SimpleQueue) -> None:
        while True:
            job, then = inbox.get()
            job()
            with self._lock:
                self._idle.append(inbox)
            then()
