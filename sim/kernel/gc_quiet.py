"""Keep Python's cyclic garbage collector from scanning a running simulation.

A large simulation holds millions of long-lived objects (every rank's in-flight programs: processes,
generators, events) and makes almost no cyclic garbage, which reference counting frees anyway. A
collection starts when the tracked objects have grown by the first threshold since the last one, and
in-flight state grows and shrinks by hundreds of thousands of objects every bucket: at 100,000 that
was dozens of young collections per iteration, each walking the in-flight state (5-10 % of a 4,096-GPU
hierarchical run). At 2,000,000 a run collects about once per 2 M rows kept, and a policy that leaks
reference cycles still has them collected after at most 2 M new objects. Thresholds cannot change any
result.

The collection on entry is a full one (it walks every object the process holds: 0.1-0.3 s with torch
and pandas imported) only once the runs since the last full one have left a quarter of the heap it
found, CPython's own rule for full collections; otherwise it collects the young generations. Small runs
one after another (a sweep's points, the test suite) paid the full walk every run, several times the
run itself. A process's first entry collects the young generations too and counts the heap: what
imports leave is not garbage, and the full walk was 0.05 s of a one-run `syncsim run` on 512 GPUs."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_left = 0  # objects the blocks left in the oldest generation since the last full collection
_heap = 0  # objects the process held after that collection


@contextmanager
def quiet_gc(first_generation: int = 2_000_000) -> Iterator[None]:
    """Collect (see above), freeze what exists (setup: imports, the cluster), and collect rarely until the
    block ends; the previous thresholds come back afterwards, also on an exception. What the block
    made joins the oldest generation unscanned (the result rows: a young collection of them right
    after would walk millions of objects that all live on); a full collection still reaches it."""
    global _left, _heap
    first = _heap == 0
    full = not first and _left >= _heap // 4
    gc.collect(2 if full else 1)
    gc.freeze()
    if full or first:  # counting the frozen objects walks their list (a full collection walks them too)
        _heap, _left = gc.get_freeze_count(), 0
    previous = gc.get_threshold()
    gc.set_threshold(first_generation, 50, 100)
    try:
        yield
    finally:
        _left += _unfrozen()
        gc.freeze()
        gc.set_threshold(*previous)
        gc.unfreeze()


def _unfrozen() -> int:
    """Objects the collector tracks outside the frozen ones: inside a block, what the block made
    and still holds. Walks only those (counting the frozen ones walks the whole heap, 40 ms in a
    test process)."""
    return sum(len(gc.get_objects(generation)) for generation in range(3))
