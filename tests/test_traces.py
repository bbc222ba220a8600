"""Link capacities following a trace (sim/network/traces.py): a transfer's time is the piecewise integral
of its rate over the trace's steps, worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from sim.network.flows import Network
from sim.network.traces import follow_trace, follow_traces


def deliveries(capacity, latency, traces, transfers, flow_cap=None):  # type: ignore[no-untyped-def]
    """Delivery times of `transfers` ((start, links, bytes)) with `traces` ((links, times, factors)) followed."""
    env = simpy.Environment()
    net = Network(env, np.asarray(capacity, float), np.asarray(latency, float), flow_cap)
    follow_traces(env, net, traces)
    out: list = [None] * len(transfers)

    def go(i: int, start: float, links: list[int], nbytes: float):  # type: ignore[no-untyped-def]
        yield env.timeout(start)
        yield net.transfer([links], nbytes)
        out[i] = env.now

    for i, (start, links, nbytes) in enumerate(transfers):
        env.process(go(i, start, links, nbytes))
    env.run()
    return out


def test_a_step_halving_the_bandwidth_mid_transfer() -> None:
    # 100 B/s until t = 2, then 50 B/s. 600 B from t = 0: 200 B by t = 2, the other 400 B take 8 s; the
    # link's latency 0.5 s comes after: 10.5 s (at full bandwidth throughout it would be 6.5 s).
    got = deliveries([100.0], [0.5], [((0,), (2.0,), (0.5,))], [(0.0, [0], 600.0)])
    assert got == pytest.approx([10.5], rel=1e-12)


def test_bandwidth_before_the_first_row_is_nominal_and_the_last_row_holds() -> None:
    # Rows at 1 s (x0.25) and 3 s (x2): 100 B/s for 1 s (100 B), 25 B/s for 2 s (50 B), then 200 B/s for
    # the last 850 B (4.25 s): done at 7.25 s. A second transfer from 10 s sees the last row: 400 B in 2 s.
    trace = ((0,), (1.0, 3.0), (0.25, 2.0))
    got = deliveries([100.0], [0.0], [trace], [(0.0, [0], 1000.0), (10.0, [0], 400.0)])
    assert got == pytest.approx([7.25, 12.0], rel=1e-12)


def test_a_trace_sets_both_directions_and_shared_transfers_resolve() -> None:
    # Links 0 and 1 (the two directions) follow one trace, x0.5 from t = 0. Two transfers share link 0
    # (25 B/s each at 50 B/s) and one has link 1 alone (50 B/s): 100 B each, 4 s and 2 s.
    got = deliveries(
        [100.0, 100.0], [0.0, 0.0], [((0, 1), (0.0,), (0.5,))], [(0, [0], 100.0), (0, [0], 100.0), (0, [1], 100.0)]
    )
    assert got == pytest.approx([4.0, 4.0, 2.0], rel=1e-12)


def test_a_per_flow_limit_holds_whatever_the_trace_gives() -> None:
    # A window limit of 30 B/s binds while the trace leaves 100 B/s, not once it falls to 20 B/s at 1 s:
    # 30 B by t = 1, then 270 B at 20 B/s: 13.5 s more, 14.5 s.
    got = deliveries([100.0], [0.0], [((0,), (1.0,), (0.2,))], [(0.0, [0], 300.0)], flow_cap=np.array([30.0]))
    assert got == pytest.approx([14.5], rel=1e-12)


@pytest.mark.parametrize(
    "times, factors",
    [((), ()), ((1.0, 1.0), (1.0, 2.0)), ((-1.0,), (1.0,)), ((1.0,), (0.0,)), ((1.0, 2.0), (1.0,))],
)
def test_bad_traces_are_refused(times, factors) -> None:  # type: ignore[no-untyped-def]
    env = simpy.Environment()
    net = Network(env, np.array([1.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="trace"):
        follow_trace(env, net, (0,), times, factors)
