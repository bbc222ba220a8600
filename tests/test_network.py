"""Flow-level network on a SimPy clock: delivery times against an exact fluid reference and hand-worked
cases, physical bounds, conservation of bytes, capacity at every sample, determinism, compaction."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from test_maxmin import crossings, reference_rates

from sim.network.flows import Network

REL = 1e-6  # the network finishes a transfer up to 1e-9 of its size early; errors stay well below this


@dataclass(frozen=True)
class Spec:
    """One transfer to start: when, over which paths (one link list per sub-flow), how big, how capped."""

    start: float
    paths: tuple[tuple[int, ...], ...]
    nbytes: int
    cap: float = math.inf


@dataclass
class Run:
    net: Network
    delivered: list  # delivery time per spec (None if its event never fired)
    overloads: list  # (time, link load) samples that exceeded a capacity
    samples: int


def run(capacity: Sequence[float], latency: Sequence[float], specs: Sequence[Spec], sample_at=()) -> Run:
    """Run `specs` on a fresh network; check link loads after every start and delivery and at `sample_at`."""
    env = simpy.Environment()
    net = Network(env, np.asarray(capacity, dtype=float), np.asarray(latency, dtype=float))
    out = Run(net, [None] * len(specs), [], 0)

    def check() -> None:
        out.samples += 1
        load = net.link_load()
        if np.any(load > net.capacity * (1 + 1e-9)):
            out.overloads.append((env.now, load))

    def transfer(i: int, spec: Spec):
        yield env.timeout(spec.start)
        done = net.transfer([list(p) for p in spec.paths], spec.nbytes, cap=spec.cap)
        check()  # before this start's rate recompute (it comes later in the same instant)
        yield env.timeout(0)  # queued after it
        check()
        yield done
        out.delivered[i] = env.now
        check()

    def sampler():
        for t in sorted(sample_at):
            yield env.timeout(max(t - env.now, 0.0))
            check()

    for i, spec in enumerate(specs):
        env.process(transfer(i, spec))
    env.process(sampler())
    env.run()
    return out


def path_latency(latency: Sequence[float], spec: Spec) -> float:
    return max((sum(latency[link] for link in path) for path in spec.paths), default=0.0)


def fluid_reference(capacity: Sequence[float], latency: Sequence[float], specs: Sequence[Spec]) -> list[float]:
    """Delivery times by stepping from event to event with exact max-min rates.

    Each step runs to the next start or the next finish. Rates and step lengths are exact Fractions;
    the clock and the survivors' remaining bytes are rounded back to floats after each step so that
    long runs do not grow huge denominators (a relative error of 1e-16 per step).
    """
    order = sorted(range(len(specs)), key=lambda i: specs[i].start)
    remaining: dict[int, Fraction] = {}
    data_done: list = [None] * len(specs)
    now = Fraction(0)
    while order or remaining:
        while order and specs[order[0]].start <= now:
            i = order.pop(0)
            if specs[i].nbytes == 0 or not crossings(specs[i].paths):
                data_done[i] = now
            else:
                remaining[i] = Fraction(specs[i].nbytes)
        if not remaining:
            if order:
                now = Fraction(specs[order[0]].start)
            continue
        active = sorted(remaining)
        rates = reference_rates(capacity, [specs[i].paths for i in active], [specs[i].cap for i in active])
        step = min(remaining[i] / r for i, r in zip(active, rates))
        if order:
            step = min(step, Fraction(specs[order[0]].start) - now)
        for i, r in zip(active, rates):
            remaining[i] -= r * step
            if remaining[i] == 0:
                del remaining[i]
                data_done[i] = now + step
            else:
                remaining[i] = Fraction(float(remaining[i]))
        now = Fraction(float(now + step))
    return [float(t) + path_latency(latency, spec) for t, spec in zip(data_done, specs)]


# ----------------------------------------------------------------------------- strategies
@st.composite
def specs_on(draw, n_links: int, start_grid: int = 20, max_sub: int = 3, max_bytes: int = 1000) -> Spec:
    path = st.lists(st.integers(0, n_links - 1), max_size=n_links, unique=True).map(tuple)  # () is local
    return Spec(
        start=draw(st.integers(0, start_grid)) / 4,  # a coarse grid: simultaneous starts are common
        paths=tuple(draw(st.lists(path, min_size=1, max_size=max_sub))),
        nbytes=max(draw(st.integers(-max_bytes // 10, max_bytes)), 0),  # about 1 in 10 empty
        cap=draw(st.one_of(st.just(math.inf), st.integers(1, 50).map(float))),
    )


@st.composite
def scenarios(draw, max_links=4, min_transfers=1, max_transfers=10, start_grid=20, min_capacity=1):
    n_links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(st.integers(min_capacity, 100).map(float), min_size=n_links, max_size=n_links))
    latency = draw(st.lists(st.sampled_from([0.0, 0.001, 0.25]), min_size=n_links, max_size=n_links))
    specs = draw(st.lists(specs_on(n_links, start_grid), min_size=min_transfers, max_size=max_transfers))
    sample_at = draw(st.lists(st.floats(0, 60), max_size=10))
    return capacity, latency, specs, sample_at


def assert_close(got: Sequence[float], want: Sequence[float]) -> None:
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=REL, abs=1e-9)


# ----------------------------------------------------------------------------- properties
@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_random_scenarios(scenario) -> None:
    """Random links, paths (overlapping paths give multiplicities), sizes (some 0), caps and start
    times (often simultaneous): every event fires, at the time the exact fluid reference gives and
    within physical bounds; bytes are conserved per link; loads never exceed capacity; runs repeat."""
    capacity, latency, specs, sample_at = scenario
    out = run(capacity, latency, specs, sample_at)
    net = out.net

    assert None not in out.delivered, "a transfer's event never fired"
    assert net.active_transfers == 0
    assert net.transfers_started == len(specs)
    assert not out.overloads, f"link over capacity: {out.overloads[0]}"
    assert out.samples >= 3 * len(specs)

    assert_close(out.delivered, fluid_reference(capacity, latency, specs))

    carried = np.zeros(len(capacity))  # bytes that must cross each link, counted per sub-flow
    for spec in specs:
        for link, count in crossings(spec.paths).items():
            carried[link] += count * spec.nbytes
    np.testing.assert_allclose(net.link_bytes, carried, rtol=REL, atol=1e-6)

    for spec, t in zip(specs, out.delivered):
        lat = path_latency(latency, spec)
        # Physics: no faster than the slowest crossing of its own path alone (or its cap) ...
        # (A transfer that crosses no link is local and delivered after its latency, whatever its cap.)
        on_links = crossings(spec.paths)
        per_byte = max([count / capacity[link] for link, count in on_links.items()] + [1 / spec.cap])
        fastest = spec.start + lat + (spec.nbytes * per_byte if on_links else 0.0)
        assert t >= fastest - 1e-9 * (1 + fastest)
        # ... and never stalled: while it runs, it is at its cap or one of its links is full, and a link
        # can only be full for as long as the bytes that ever cross it take at full speed.
        slowest = spec.start + lat + spec.nbytes / spec.cap
        slowest += sum(carried[link] / capacity[link] for link in crossings(spec.paths))
        assert t <= slowest * (1 + REL) + 1e-9

    again = run(capacity, latency, specs, sample_at)
    assert again.delivered == out.delivered
    np.testing.assert_array_equal(again.net.link_bytes, net.link_bytes)
    assert again.net.recomputes == net.recomputes


@st.composite
def long_runs(draw):
    """About 90 transfers, one every 5 s give or take 2 s, each at most 4 s of work for its busiest link
    alone: a few are in flight at a time, so the 64 slots fill with dead ones and must compact."""
    n_links = draw(st.integers(1, 3))
    capacity = draw(st.lists(st.integers(50, 100).map(float), min_size=n_links, max_size=n_links))
    latency = draw(st.lists(st.sampled_from([0.0, 0.25]), min_size=n_links, max_size=n_links))
    path = st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True).map(tuple)
    one = st.builds(
        lambda jitter, paths, nbytes, cap: (jitter, Spec(0.0, tuple(paths), nbytes, cap)),
        st.integers(-8, 8),
        st.lists(path, min_size=1, max_size=2),
        st.integers(1, 100),
        st.one_of(st.just(math.inf), st.integers(10, 60).map(float)),
    )
    drawn = draw(st.lists(one, min_size=80, max_size=100))
    specs = [Spec(5.0 * (i + 1) + jitter / 4, s.paths, s.nbytes, s.cap) for i, (jitter, s) in enumerate(drawn)]
    return capacity, latency, specs


@settings(max_examples=5, deadline=None)
@given(long_runs())
def test_long_runs_through_slot_compaction(scenario) -> None:
    capacity, latency, specs = scenario
    out = run(capacity, latency, specs)
    assert None not in out.delivered and not out.overloads
    assert out.net.active_transfers == 0
    assert_close(out.delivered, fluid_reference(capacity, latency, specs))
    assert len(out.net._slots) < len(specs), "compaction never ran"  # private: shows the path was taken


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_on_one_link_a_newcomer_never_lets_anyone_finish_earlier(data) -> None:
    """True dynamic monotonicity on a single shared link (caps and multiplicities allowed).

    Proof: there each rate is min(cap, level) for a water level that only falls as the active set
    grows. Compare the runs with and without the newcomer: as long as every old transfer has at least
    as many bytes left in the run with it, the set of active transfers there is a superset, so its
    level is no higher, every old transfer moves no faster, and the ordering persists. So no old
    transfer finishes earlier, and delivery adds the same latency to both.
    """
    latency = data.draw(st.sampled_from([0.0, 0.25]))
    capacity = float(data.draw(st.integers(1, 100)))
    specs = data.draw(st.lists(specs_on(1), min_size=1, max_size=8))
    newcomer = data.draw(specs_on(1))
    alone = run([capacity], [latency], specs).delivered
    crowded = run([capacity], [latency], [*specs, newcomer]).delivered
    for t_alone, t_crowded in zip(alone, crowded):
        assert t_crowded >= t_alone - 1e-9 * (1 + t_alone)


# ----------------------------------------------------------------------------- hand-worked cases
def test_late_joiner_shares_the_link() -> None:
    # 100 B/s. A (1000 B) alone for 2 s: 800 B left. B (300 B) joins; both at 50 B/s: B done at
    # 2 + 6 = 8, A then has 500 B left alone at 100 B/s: done at 13. The link's latency 0.5 comes after.
    out = run([100.0], [0.5], [Spec(0.0, ((0,),), 1000), Spec(2.0, ((0,),), 300)])
    assert out.delivered == pytest.approx([13.5, 8.5], rel=1e-12)
    assert out.net.link_bytes == pytest.approx([1300.0], rel=1e-12)


def test_path_latency_is_added_once_on_delivery() -> None:
    # Hops of 0.25 s and 0.5 s: each transfer is delivered 0.75 s after its data is done (once, not per
    # hop nor per sub-flow). Sharing is unaffected: the rates do not see latency.
    out = run([10.0, 20.0], [0.25, 0.5], [Spec(0.0, ((0, 1),), 100), Spec(0.0, ((0, 1), (1,)), 50)])
    # Link 0 (10) carries both once: 5 B/s each; link 1 (20) carries the second twice, which fits
    # (5 + 2*5 <= 20). The second is done at 10 s; the first has 50 B left, alone at 10 B/s: done at 15.
    assert out.delivered == pytest.approx([15.75, 10.75], rel=1e-12)


def test_explicit_latency_overrides_the_path_latency() -> None:
    env = simpy.Environment()
    net = Network(env, np.array([10.0, 10.0]), np.array([0.25, 1.0]))
    times = {}

    def send(name, *args, **kwargs):
        yield net.transfer(*args, **kwargs)
        times[name] = env.now

    # Both at 5 B/s on link 0, data done at 20 s. The coupled one's default latency is its longest
    # path's (1.0 s); the other's is given (3.0 s, not link 0's 0.25 s).
    env.process(send("coupled", [[0], [1]], 100))
    env.process(send("given", [[0]], 100, latency=3.0))
    env.run()
    assert times == pytest.approx({"coupled": 21.0, "given": 23.0}, rel=1e-12)


def test_zero_byte_transfer_takes_only_latency() -> None:
    env = simpy.Environment()
    net = Network(env, np.array([10.0, 10.0]), np.array([0.25, 0.5]))
    times = []

    def go():
        yield env.timeout(1.0)
        yield net.transfer([[0, 1]], 0)
        times.append(env.now)
        yield net.transfer([[0]], 0, latency=0.0)
        times.append(env.now)

    env.process(go())
    env.run()
    assert times == [1.75, 1.75]
    assert net.recomputes == 0 and net.active_transfers == 0 and net.transfers_started == 2
    assert not net.link_bytes.any()


def test_coupled_transfer_matches_separate_flows_when_uncontended() -> None:
    capacity, latency = [10.0, 10.0, 10.0], [0.1, 0.1, 0.1]
    coupled = run(capacity, latency, [Spec(0.0, ((0,), (1,), (2,)), 50)])
    separate = run(capacity, latency, [Spec(0.0, ((link,),), 50) for link in range(3)])
    assert coupled.delivered == pytest.approx([5.1])
    assert separate.delivered == pytest.approx([5.1] * 3)
    np.testing.assert_allclose(coupled.net.link_bytes, separate.net.link_bytes)
    # On unequal links the coupled transfer is held to its slowest sub-flow.
    coupled = run([10.0, 5.0, 20.0], [0.0] * 3, [Spec(0.0, ((0,), (1,), (2,)), 50)])
    separate = run([10.0, 5.0, 20.0], [0.0] * 3, [Spec(0.0, ((link,),), 50) for link in range(3)])
    assert max(separate.delivered) == pytest.approx(10.0)
    assert coupled.delivered == pytest.approx([10.0])


def test_same_instant_starts_are_one_recompute() -> None:
    env = simpy.Environment()
    net = Network(env, np.array([100.0]), np.array([0.0]))
    seen, delivered = [], []

    def one():
        yield env.timeout(1.0)
        yield net.transfer([[0]], 100)
        delivered.append(env.now)

    def batch():  # three more from one process, same instant
        yield env.timeout(1.0)
        events = [net.transfer([[0]], 100) for _ in range(3)]
        yield env.timeout(0)
        seen.append((net.recomputes, net.link_load()[0]))
        yield env.all_of(events)
        delivered.extend([env.now] * 3)

    for _ in range(3):
        env.process(one())
    env.process(batch())
    env.run()
    assert seen == [(1, pytest.approx(100.0))]
    # Six transfers of 100 B at 100/6 B/s each: all done together at 1 + 6 s; with nobody left to
    # share the link, that finish needs no rate computation.
    assert delivered == pytest.approx([7.0] * 6)
    assert net.recomputes == 1 and net.active_transfers == 0


def test_a_transfer_has_no_rate_until_its_start_is_recomputed() -> None:
    # Regression: a start that joins a running transfer's class (same links, same cap) used to show
    # up in link_load() at the class's old rate until the coalesced recompute: 2x capacity here.
    env = simpy.Environment()
    net = Network(env, np.array([10.0]), np.array([0.0]))
    loads = []

    def joiner():
        yield env.timeout(1.0)
        net.transfer([[0]], 100)
        loads.append(net.link_load()[0])  # same instant, before the recompute: old rates only
        yield env.timeout(0)
        loads.append(net.link_load()[0])  # after it: shared

    net.transfer([[0]], 100)
    env.process(joiner())
    env.run()
    assert loads == pytest.approx([10.0, 10.0])
    # First alone for 1 s (10 B), then 5 B/s each: the first is done at 1 + 90/5 = 19, the second
    # then has 10 B left alone: 20.
    assert env.now == pytest.approx(20.0)
    assert net.link_bytes == pytest.approx([200.0])


def test_slot_compaction_keeps_a_long_transfer_intact() -> None:
    # 100 B/s. A 30000 B background transfer shares the link with 250 back-to-back 100 B transfers;
    # each runs at 50 B/s (2 s), so the background has sent 25000 B by t = 500 and finishes alone at
    # 550. Dead slots pile up and compact about every 64 starts while the background stays live; the
    # back-to-back transfers have distinct (non-binding) caps, so each is a class of its own and the
    # dead classes compact too.
    env = simpy.Environment()
    net = Network(env, np.array([100.0, 7.0]), np.array([0.0, 0.0]))
    finished, loads = [], []
    background = net.transfer([[0]], 30000)
    other = net.transfer([[1]], 3500)  # alone on link 1: done at 500

    def back_to_back():
        for i in range(250):
            yield net.transfer([[0]], 100, cap=1e6 + i)
            finished.append(env.now)
            loads.append(net.link_load().copy())
            assert net.active_transfers == (2 if i < 249 else 1)

    env.process(back_to_back())
    env.run()
    assert finished == pytest.approx([2.0 * (i + 1) for i in range(250)], rel=1e-9)
    assert background.triggered and other.triggered and env.now == pytest.approx(550.0)
    # Right after each delivery only the background (and, until 500, link 1's transfer) run.
    np.testing.assert_allclose(loads[:-1], [[100.0, 7.0]] * 249)
    np.testing.assert_allclose(loads[-1], [100.0, 0.0])
    np.testing.assert_allclose(net.link_bytes, [30000.0 + 25000.0, 3500.0])
    # Private state, read only to show that both compactions ran:
    assert len(net._slots) <= 64 and net._n_classes <= 16, "compaction never ran"


def test_adding_a_flow_elsewhere_can_finish_another_earlier() -> None:
    """Dynamic face of max-min non-monotonicity (see test_maxmin): off a single link it is false.

    A on link 0, B on links 0 and 1, C on link 1 (10 B/s each), 100 B each: all at 5 B/s, done at 20.
    D joins link 1: B, C, D at 10/3, and A takes 20/3 on link 0, finishing at 15.
    """
    a, b, c = Spec(0.0, ((0,),), 100), Spec(0.0, ((0, 1),), 100), Spec(0.0, ((1,),), 100)
    without = run([10.0, 10.0], [0.0, 0.0], [a, b, c]).delivered
    with_d = run([10.0, 10.0], [0.0, 0.0], [a, b, c, Spec(0.0, ((1,),), 100)]).delivered
    assert without == pytest.approx([20.0, 20.0, 20.0])
    assert with_d[0] == pytest.approx(15.0)


def test_bad_input_is_rejected() -> None:
    env = simpy.Environment()
    with pytest.raises(ValueError, match="capacity"):
        Network(env, np.array([1.0, 0.0]), np.array([0.0, 0.0]))
    net = Network(env, np.array([1.0]), np.array([0.0]))
    with pytest.raises(ValueError, match="negative"):
        net.transfer([[0]], -1)
    with pytest.raises(ValueError, match="cap"):
        net.transfer([[0]], 1, cap=0.0)
    assert net.transfers_started == 0


# ----------------------------------------------------------------------------- per-flow limits of links (WAN windows)
def run_capped(capacity, latency, flow_cap, specs):  # type: ignore[no-untyped-def]
    """Delivery times of `specs` on a network whose links limit each flow to `flow_cap` (bytes/s)."""
    env = simpy.Environment()
    net = Network(env, np.asarray(capacity, float), np.asarray(latency, float), np.asarray(flow_cap, float))
    delivered: list = [None] * len(specs)

    def transfer(i: int, spec: Spec):  # type: ignore[no-untyped-def]
        yield env.timeout(spec.start)
        yield net.transfer([list(p) for p in spec.paths], spec.nbytes, cap=spec.cap)
        delivered[i] = env.now

    for i, spec in enumerate(specs):
        env.process(transfer(i, spec))
    env.run()
    return delivered


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.data())
def test_a_links_flow_cap_is_the_cap_of_every_transfer_crossing_it(scenario, data) -> None:
    """A link's per-flow limit acts as the cap of each transfer crossing it, the lowest of its own and its
    links' (the fluid reference knows only transfer caps)."""
    capacity, latency, specs, _ = scenario
    flow_cap = data.draw(
        st.lists(
            st.one_of(st.just(math.inf), st.integers(1, 60).map(float)), min_size=len(capacity), max_size=len(capacity)
        )
    )
    as_caps = [
        Spec(s.start, s.paths, s.nbytes, min([s.cap, *(flow_cap[link] for p in s.paths for link in p)])) for s in specs
    ]
    assert_close(run_capped(capacity, latency, flow_cap, specs), fluid_reference(capacity, latency, as_caps))


@pytest.mark.parametrize(
    "window_bytes, connections, limited_by",
    [(4e6, 1, "window"), (4e6, 4, "bandwidth"), (1e6, 4, "window"), (50e6, 1, "bandwidth")],
)
def test_one_flow_over_a_wan_link(window_bytes: float, connections: int, limited_by: str) -> None:
    # A 1 Gb/s link with a 50 ms round trip: one-way latency rtt/2, rate min(bandwidth, connections * window / rtt).
    bw, rtt, n = 1e9 / 8, 0.05, 300e6
    cap = connections * window_bytes / rtt
    assert (cap < bw) == (limited_by == "window")  # the cases cover both regimes
    delivered = run_capped([bw], [rtt / 2], [cap], [Spec(0.0, ((0,),), int(n))])
    assert delivered[0] == pytest.approx(rtt / 2 + n / min(bw, cap), rel=1e-9)


@pytest.mark.parametrize("window_bytes, share", [(16e6, 1e9 / 16), (1e6, 20e6)])
def test_two_flows_share_a_wan_link(window_bytes: float, share: float) -> None:
    # Two flows at once over a 1 Gb/s, 50 ms link: each gets min(half the link, window / rtt). With a
    # 16 MB window (320 MB/s alone) they split the 125 MB/s; with 1 MB (20 MB/s) neither fills its half.
    bw, rtt, n = 1e9 / 8, 0.05, 100e6
    delivered = run_capped([bw], [rtt / 2], [window_bytes / rtt], [Spec(0.0, ((0,),), int(n))] * 2)
    assert delivered == pytest.approx([rtt / 2 + n / share] * 2, rel=1e-9)
