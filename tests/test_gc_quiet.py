"""sim/kernel/gc_quiet.py: a run does not walk the whole heap on entry unless earlier runs left enough
behind to be worth it (a full collection each run made small runs several times slower)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

import sim.kernel.gc_quiet as gc_quiet
from sim.kernel.gc_quiet import quiet_gc


@pytest.fixture
def collected() -> Iterator[list[int]]:
    """The generations the collector collects while the test runs."""
    generations: list[int] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            generations.append(info["generation"])

    gc.callbacks.append(record)
    yield generations
    gc.callbacks.remove(record)


def test_runs_that_leave_little_behind_collect_only_the_young_generations(
    collected: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_quiet, "_left", 0, raising=False)
    monkeypatch.setattr(gc_quiet, "_heap", 0, raising=False)
    with quiet_gc():  # the process's first: young generations only, and the heap counted
        pass
    assert collected == [1] and gc_quiet._heap > 0
    kept = []
    for _ in range(5):
        with quiet_gc():
            kept.append([[] for _ in range(10)])  # a small run's results, still held
    assert collected == [1, 1, 1, 1, 1, 1]
    assert gc_quiet._left >= 5 * 11


def test_a_full_collection_comes_back_once_runs_left_a_quarter_of_the_heap(
    collected: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gc_quiet, "_left", 0, raising=False)
    monkeypatch.setattr(gc_quiet, "_heap", 0, raising=False)
    with quiet_gc():
        pass
    with quiet_gc():
        kept = [[] for _ in range(gc_quiet._heap // 4 + 1)]  # a big run's results
    with quiet_gc():
        pass
    assert collected == [1, 1, 2] and kept
    assert gc_quiet._left < 100  # counted afresh from the full collection: the last block's few objects
