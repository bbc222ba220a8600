"""Keep Python's cyclic garbage collector from scanning a running simulation.

A large simulation holds millions of long-lived objects (every rank's in-flight programs: processes,
generators, events) and makes almost no cyclic garbage, which reference counting frees anyway. Each
full collection still walks all of them: at 4,096 ranks that was half the wall time. Raising the
thresholds while `env.run` runs cannot change any result; memory stays the same.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def quiet_gc(first_generation: int = 100_000) -> Iterator[None]:
    """Collect once, freeze what exists (setup: imports, the cluster), and collect rarely until the
    block ends; the previous thresholds come back afterwards, also on an exception."""
    gc.collect()
    gc.freeze()
    previous = gc.get_threshold()
    gc.set_threshold(first_generation, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*previous)
        gc.unfreeze()
