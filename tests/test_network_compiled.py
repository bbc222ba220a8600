"""The compiled recompute (sim/network/flows_jit.py) against the network's numpy path, its reference: the
same rates at every recompute and the same deliveries, to the bit, through class and slot compaction,
open flows, capacity changes and solves long enough to hand over to the indexed continuation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_network import Spec, long_runs, run, run_capped, scenarios

import sim.network.flows
from sim.network.compiled import flows_kernels
from sim.network.flows import Network
from sim.network.flows_jit import SCAN_ROUNDS
from sim.network.maxmin import max_min_rates_numpy

pytestmark = pytest.mark.skipif(flows_kernels() is None, reason="numba is not available")


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Check every compiled solve against the numpy solver on the same incidence and counts; returns
    [solves checked, classes of the largest solve]."""
    seen = [0, 0]
    step = Network._step_compiled

    def checked_step(net: Network, now: float, tol_s: float) -> tuple[float, list[int], int]:
        eta, due, left = step(net, now, tol_s)
        if left:
            nc, ne, c = net._n_classes, net._n_entries, net._cf
            want = max_min_rates_numpy(
                net._ei.link[:ne], net._ei.cls[:ne], net._ef.mult[:ne], net.capacity, nc, c.cap[:nc], c.count[:nc]
            )
            np.testing.assert_array_equal(c.rate[:nc], want)
            # private: the entry each class checks first is its own (class ids are reused)
            assert (net._ci.hint[:nc] < net._ci.n[:nc]).all()
            seen[0], seen[1] = seen[0] + 1, max(seen[1], nc)
        return eta, due, left

    monkeypatch.setattr(Network, "_step_compiled", checked_step)
    return seen


def both(monkeypatch: pytest.MonkeyPatch, go):  # type: ignore[no-untyped-def]
    """`go()` with every recompute on the numpy path, then with every one compiled."""
    monkeypatch.setattr(sim.network.flows, "COMPILE_AFTER", 10**9)
    numpy_run = go()
    monkeypatch.setattr(sim.network.flows, "COMPILE_AFTER", 0)
    return numpy_run, go()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(max_links=6, max_transfers=14))
def test_random_scenarios_are_identical_compiled(scenario, monkeypatch: pytest.MonkeyPatch, checked) -> None:
    capacity, latency, specs, sample_at = scenario
    a, b = both(monkeypatch, lambda: run(capacity, latency, specs, sample_at))
    assert b.delivered == a.delivered
    np.testing.assert_array_equal(b.net.link_bytes, a.net.link_bytes)
    assert b.net.recomputes == a.net.recomputes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=scenarios(max_links=6, max_transfers=14), data=st.data())
def test_links_flow_caps_are_identical_compiled(scenario, data, monkeypatch: pytest.MonkeyPatch, checked) -> None:
    """Links that limit each flow (WAN windows) give the same deliveries compiled as in numpy."""
    capacity, latency, specs, _ = scenario
    caps = st.one_of(st.just(math.inf), st.integers(1, 60).map(float))
    flow_cap = data.draw(st.lists(caps, min_size=len(capacity), max_size=len(capacity)))
    a, b = both(monkeypatch, lambda: run_capped(capacity, latency, flow_cap, specs))
    assert b == a


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=long_runs())
def test_compaction_keeps_compiled_runs_identical(scenario, monkeypatch: pytest.MonkeyPatch, checked) -> None:
    """Slots and classes compact and class ids are reused; the kept loads must follow."""
    capacity, latency, specs = scenario
    a, b = both(monkeypatch, lambda: run(capacity, latency, specs))
    assert b.delivered == a.delivered
    np.testing.assert_array_equal(b.net.link_bytes, a.net.link_bytes)
    assert len(b.net._slots) < len(specs)


@st.composite
def churn(draw):  # type: ignore[no-untyped-def]
    """About 100 transfers on up to 8 links, a few at a time, most with a cap of their own (so a class
    of their own: classes compact and their ids are reused by classes on other links), beside two long
    transfers that keep several bottleneck levels apart."""
    n_links = draw(st.integers(3, 8))
    capacity = draw(st.lists(st.integers(5, 100).map(float), min_size=n_links, max_size=n_links))
    path = st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True).map(tuple)
    one = st.tuples(
        st.integers(0, 12),
        st.lists(path, min_size=1, max_size=3).map(tuple),
        st.integers(1, 200),
        st.one_of(st.just(math.inf), st.integers(1, 400).map(float)),
    )
    drawn = draw(st.lists(one, min_size=60, max_size=110))
    specs = [Spec(0.5 * i + jitter / 8, paths, nbytes, cap) for i, (jitter, paths, nbytes, cap) in enumerate(drawn)]
    for paths in draw(st.lists(st.lists(path, min_size=1, max_size=2).map(tuple), min_size=2, max_size=2)):
        specs.append(Spec(0.0, paths, 100_000))
    return capacity, [0.0] * n_links, specs


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scenario=churn())
def test_class_churn_is_identical_compiled(scenario, monkeypatch: pytest.MonkeyPatch, checked) -> None:
    capacity, latency, specs = scenario
    a, b = both(monkeypatch, lambda: run(capacity, latency, specs))
    assert b.delivered == a.delivered
    np.testing.assert_array_equal(b.net.link_bytes, a.net.link_bytes)


def _many_distinct_classes() -> tuple[list[float], Network]:
    """250 back-to-back transfers, each its own class (distinct caps, some binding), beside a long one
    on two links: classes compact about every 16 and their ids are reused."""
    env = simpy.Environment()
    net = Network(env, np.array([100.0, 60.0, 7.0]), np.array([0.0, 0.01, 0.0]))
    finished: list[float] = []
    net.transfer([[0, 1]], 30000)

    def back_to_back():  # type: ignore[no-untyped-def]
        for i in range(250):
            path = [[0]] if i % 3 else [[1, 2], [0]]
            yield net.transfer(path, 100 + i, cap=30.0 + i % 7 if i % 2 else 1e6 + i)
            finished.append(env.now)

    env.process(back_to_back())
    env.run()
    return finished, net


def test_class_ids_reused_after_compaction(monkeypatch: pytest.MonkeyPatch, checked) -> None:
    a, b = both(monkeypatch, _many_distinct_classes)
    assert b[0] == a[0]
    np.testing.assert_array_equal(b[1].link_bytes, a[1].link_bytes)
    assert b[1]._n_classes <= 16 and checked[0] >= 250


def _background_and_slowdowns() -> tuple[list[float], np.ndarray]:
    """Open flows that come and go and capacity changes, amid ordinary transfers."""
    env = simpy.Environment()
    rng = np.random.default_rng(3)
    net = Network(env, np.array([10.0, 20.0, 15.0, 8.0]), np.array([0.0, 0.1, 0.0, 0.2]))
    times: list[float] = []

    def sender(i: int):  # type: ignore[no-untyped-def]
        for _ in range(30):
            yield env.timeout(float(rng.uniform(0.0, 3.0)))
            links = sorted(rng.choice(4, size=int(rng.integers(1, 4)), replace=False).tolist())
            yield net.transfer([links, links[:1]] if i % 2 else [links], float(rng.integers(1, 60)))
            times.append(env.now)

    def background():  # type: ignore[no-untyped-def]
        for _ in range(20):
            flow = net.open_flow([[int(rng.integers(0, 4))]], float(rng.uniform(1.0, 6.0)))
            yield env.timeout(float(rng.uniform(0.5, 4.0)))
            net.close_flow(flow)
            net.set_capacity([int(rng.integers(0, 4))], float(rng.uniform(5.0, 25.0)))
            yield env.timeout(float(rng.uniform(0.0, 2.0)))

    for i in range(6):
        env.process(sender(i))
    env.process(background())
    env.run()
    return times, net.carried_bytes()


def test_open_flows_and_capacity_changes_are_identical_compiled(monkeypatch: pytest.MonkeyPatch, checked) -> None:
    a, b = both(monkeypatch, _background_and_slowdowns)
    assert b[0] == a[0] and len(a[0]) == 180
    np.testing.assert_array_equal(b[1], a[1])


def test_many_level_solves_are_handed_over_with_the_same_rates(monkeypatch: pytest.MonkeyPatch, checked) -> None:
    """An all-to-all on a star with unequal links has more bottleneck levels than the kernel scans
    before it hands the solve to sim.network.maxmin's kernel; sizes differ, so the levels change at every
    finish."""
    hosts = 16
    rng = np.random.default_rng(11)
    capacity = rng.uniform(1.0, 3.0, size=2 * hosts)  # host i's uplink is i, its downlink hosts + i
    specs = [
        Spec(0.0, ((a, hosts + b),), int(rng.integers(1, 20)), math.inf if (a + b) % 5 else 0.4)
        for a in range(hosts)
        for b in range(hosts)
        if a != b
    ]
    handed_over = []
    solve_with = Network._solve_with

    def counted(net: Network, compiled: bool) -> float:
        handed_over.append(compiled)
        return solve_with(net, compiled)

    monkeypatch.setattr(Network, "_solve_with", counted)
    a, b = both(monkeypatch, lambda: run(capacity, np.zeros(2 * hosts), specs))
    assert b.delivered == a.delivered
    levels = len(np.unique(max_min_rates_numpy(*_incidence(specs), capacity, len(specs))))
    assert levels > SCAN_ROUNDS and True in handed_over  # the compiled kernel really handed over


def _incidence(specs: list[Spec]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    links = [link for spec in specs for link in spec.paths[0]]
    owners = [i for i, spec in enumerate(specs) for _ in spec.paths[0]]
    return np.array(links), np.array(owners), np.ones(len(links))


def test_identical_transfers_share_one_class_and_its_rate(checked, monkeypatch: pytest.MonkeyPatch) -> None:
    # 10 B/s; three identical transfers of 30 B and one of 10 B on another path set over the same
    # link: all four at 2.5 B/s; the small one is done at 4 s, the others then at 10/3 B/s, done at 10.
    monkeypatch.setattr(sim.network.flows, "COMPILE_AFTER", 0)
    out = run([10.0, 50.0], [0.0, 0.0], [Spec(0.0, ((0,),), 30)] * 3 + [Spec(0.0, ((0, 1),), 10)])
    assert out.delivered == pytest.approx([10.0, 10.0, 10.0, 4.0], rel=1e-12)
    assert out.net._n_classes == 2 and checked[0] == 2
