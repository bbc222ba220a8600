"""The engine's SimPy environment: the inline loop, AllDone and queue_call keep SimPy's exact order."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest
import simpy

from sim.kernel.environment import AllDone, CountingEnvironment, queue_call


def _scenario(env: simpy.Environment, log: list[tuple[float, str]], all_of: Callable[..., simpy.Event]) -> simpy.Event:
    """Processes, timeouts and callbacks that tie at the same instants (the order then rests on
    priorities and sequence numbers alone); returns the event that ends the run."""

    def ticker(name: str, delays: list[float]) -> Generator[simpy.Event, Any, None]:
        for d in delays:
            yield env.timeout(d)
            log.append((env.now, name))

    def waiter() -> Generator[simpy.Event, Any, None]:
        a = env.process(ticker("a", [1.0, 1.0]))
        b = env.process(ticker("b", [2.0]))
        yield all_of(env, [a, b])
        log.append((env.now, "both"))
        e = env.event()
        e.callbacks.append(lambda _e: log.append((env.now, "callback")))
        env.timeout(0.0).callbacks.append(lambda _e: (log.append((env.now, "zero")), e.succeed()))
        yield e
        log.append((env.now, "waiter done"))

    env.process(ticker("c", [0.5, 1.5, 0.0, 1.0]))
    return env.process(waiter())


def _simpy_all_of(env: simpy.Environment, events: list[simpy.Event]) -> simpy.Event:
    return env.all_of(events)


def test_inline_run_and_all_done_keep_simpy_order() -> None:
    reference: list[tuple[float, str]] = []
    env = simpy.Environment()
    env.run(until=_scenario(env, reference, _simpy_all_of))
    ours: list[tuple[float, str]] = []
    counting = CountingEnvironment()
    counting.run(until=_scenario(counting, ours, AllDone))
    assert ours == reference
    assert ("both" in {name for _, name in ours}) and counting.now == env.now == 2.0
    assert counting.events_processed() > 0


def test_queue_call_takes_a_timeouts_place_in_the_queue() -> None:
    def run(env: simpy.Environment, use_queue_call: bool) -> list[str]:
        order: list[str] = []
        for i in range(4):  # interleaved with ordinary timeouts at the same instants
            env.timeout(1.0).callbacks.append(lambda _e, i=i: order.append(f"timeout {i}"))
            if use_queue_call:
                queue_call(env, 1.0, lambda _w, i=i: order.append(f"call {i}"))
            else:
                env.timeout(1.0).callbacks.append(lambda _e, i=i: order.append(f"call {i}"))
        env.run()
        return order

    ours, reference = run(CountingEnvironment(), True), run(simpy.Environment(), False)
    assert ours == reference == [f"{kind} {i}" for i in range(4) for kind in ("timeout", "call")]


def test_an_urgent_queue_call_goes_first_as_a_process_start_does() -> None:
    env = CountingEnvironment()
    order: list[str] = []
    env.timeout(0.0).callbacks.append(lambda _e: order.append("timeout"))
    queue_call(env, 0.0, lambda _w: order.append("urgent"), simpy.events.URGENT)
    env.run()
    assert order == ["urgent", "timeout"]


def test_a_failed_event_nobody_defused_stops_the_run_as_in_simpy() -> None:
    def failing(env: simpy.Environment) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1.0)
        raise ValueError("boom", 7)

    for env in (simpy.Environment(), CountingEnvironment()):
        done = env.event()
        env.process(failing(env))
        with pytest.raises(ValueError) as caught:
            env.run(until=done)
        assert caught.value.args == ("boom", 7)


def test_run_out_of_events_before_until_says_so() -> None:
    env = CountingEnvironment()
    env.timeout(1.0)
    with pytest.raises(RuntimeError, match="No scheduled events left"):
        env.run(until=env.event())
    assert env.now == 1.0


def test_all_done_fails_with_the_first_failure_and_defuses_it() -> None:
    env = CountingEnvironment()
    ok, bad = env.timeout(2.0), env.event()
    waiting = AllDone(env, [ok, bad])
    bad.fail(KeyError("lost"))
    seen: list[BaseException] = []

    def waiter() -> Generator[simpy.Event, Any, None]:
        try:
            yield waiting
        except KeyError as exc:
            seen.append(exc)

    env.run(until=env.process(waiter()))
    assert [exc.args for exc in seen] == [("lost",)]
    assert bad._defused  # type: ignore[attr-defined]
    assert env.now == 0.0  # failed at once, without waiting for the other event


def test_all_done_of_nothing_or_of_processed_events_fires_at_once() -> None:
    env = CountingEnvironment()
    assert AllDone(env, []).triggered
    first = env.timeout(1.0)
    env.run()
    assert first.processed and AllDone(env, [first]).triggered
