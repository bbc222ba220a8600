"""Max-min fair rates: an exact reference solver, the textbook characterisation, hand-worked cases,
and which monotonicity statements do (and do not) hold for max-min fairness."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from typing import Optional

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.network.compiled import progressive_filling as compiled_kernel
from sim.network.maxmin import max_min_rates

REL = 1e-9

# A transfer is given as its sub-flows, each a collection of link ids: ((0, 1), (1,)) is two sub-flows,
# and crosses link 1 twice (multiplicity 2).
Transfer = Sequence[Sequence[int]]


def crossings(transfer: Transfer) -> Counter:
    return Counter(link for sub in transfer for link in sub)


def solve(
    capacity: Sequence[float], transfers: Sequence[Transfer], caps: Optional[Sequence[float]] = None
) -> np.ndarray:
    """Call the solver under test with the incidence built from sub-flow lists."""
    links, owners, mult = [], [], []
    for t, transfer in enumerate(transfers):
        for link, count in sorted(crossings(transfer).items()):
            links.append(link)
            owners.append(t)
            mult.append(count)
    return max_min_rates(
        np.asarray(links, dtype=np.int64),
        np.asarray(owners, dtype=np.int64),
        np.asarray(mult, dtype=np.int64),
        np.asarray(capacity, dtype=float),
        len(transfers),
        None if caps is None else np.asarray(caps, dtype=float),
    )


def reference_rates(
    capacity: Sequence[float], transfers: Sequence[Transfer], caps: Optional[Sequence[float]] = None
) -> list:
    """Exact max-min rates (Fractions, or inf) by water levels; written for clarity, not speed.

    All transfers not yet fixed share one rising level. Each round computes, for every link, the level
    at which it would fill given the fixed transfers, takes the lowest such level (or the lowest cap
    among the unfixed transfers), and fixes every unfixed transfer that crosses a link filling at that
    exact level or whose cap is that exact level.
    """
    cross = [crossings(t) for t in transfers]
    ceiling = [math.inf if caps is None or math.isinf(caps[i]) else Fraction(caps[i]) for i in range(len(cross))]
    rate: list = [None] * len(cross)
    open_ = set()
    for i, c in enumerate(cross):
        if c:
            open_.add(i)
        else:
            rate[i] = ceiling[i]
    while open_:
        fill = {}
        for link, c in enumerate(capacity):
            weight = sum(cross[i][link] for i in open_)
            if weight:
                used = sum(cross[i][link] * rate[i] for i in range(len(cross)) if i not in open_ and cross[i][link])
                fill[link] = (Fraction(c) - used) / weight
        level = min(min(fill.values()), min(ceiling[i] for i in open_))
        fixed = {i for i in open_ if ceiling[i] == level or any(fill[link] == level for link in cross[i])}
        for i in fixed:
            rate[i] = level
        open_ -= fixed
    return rate


def link_loads(capacity: Sequence[float], transfers: Sequence[Transfer], rates: Sequence[float]) -> np.ndarray:
    load = np.zeros(len(capacity))
    for transfer, r in zip(transfers, rates):
        for link, count in crossings(transfer).items():
            load[link] += count * r
    return load


def bottlenecks(capacity, transfers, rates, i) -> list[int]:
    """Links where transfer i is bottlenecked: saturated, and no transfer crossing them is faster."""
    load = link_loads(capacity, transfers, rates)
    return [
        link
        for link in crossings(transfers[i])
        if load[link] >= capacity[link] * (1 - REL)
        and all(rates[j] <= rates[i] * (1 + REL) for j, t in enumerate(transfers) if crossings(t)[link])
    ]


# ----------------------------------------------------------------------------- strategies
capacities = st.one_of(
    st.integers(1, 12).map(float),  # small integers make exact ties between links common
    st.floats(1e-3, 1e12, allow_nan=False, allow_infinity=False),
)
# Monotonicity cases compare two solves; whole capacities and caps keep real differences far above rounding.
small_integers = st.integers(1, 30).map(float)
cap_values = st.one_of(st.just(math.inf), st.just(0.0), st.integers(1, 12).map(float), st.floats(1e-3, 1e12))


def transfer_strategy(n_links: int, max_sub: int = 3, allow_empty: bool = True) -> st.SearchStrategy:
    sub = st.sets(st.integers(0, n_links - 1), min_size=0 if allow_empty else 1).map(sorted).map(tuple)
    return st.lists(sub, min_size=1, max_size=max_sub).map(tuple)


@st.composite
def instances(draw, max_links=6, max_transfers=8, max_sub=3, with_caps=None, allow_empty=True, integral=False):
    """(capacity, transfers, caps or None); `integral` draws small whole capacities and caps only."""
    n_links = draw(st.integers(1, max_links))
    capacity = draw(st.lists(small_integers if integral else capacities, min_size=n_links, max_size=n_links))
    transfers = draw(st.lists(transfer_strategy(n_links, max_sub, allow_empty), min_size=1, max_size=max_transfers))
    use_caps = draw(st.booleans()) if with_caps is None else with_caps
    values = st.one_of(st.just(math.inf), small_integers) if integral else cap_values
    ceilings = draw(st.lists(values, min_size=len(transfers), max_size=len(transfers))) if use_caps else None
    return capacity, transfers, ceilings


@st.composite
def with_newcomer(draw, max_sub=3, with_caps=None, single_link=False):
    """An instance plus one extra transfer (and its cap, if the instance has caps) to add to it."""
    kw = dict(max_links=1) if single_link else {}
    capacity, transfers, caps = draw(
        instances(max_sub=max_sub, with_caps=with_caps, allow_empty=False, integral=True, **kw)
    )
    newcomer = draw(transfer_strategy(len(capacity), max_sub, allow_empty=False))
    new_cap = None if caps is None else draw(st.one_of(st.just(math.inf), st.integers(1, 30).map(float)))
    return capacity, transfers, caps, newcomer, new_cap


def add(capacity, transfers, caps, newcomer, new_cap):
    """(rates before, rates after) adding `newcomer`; index -1 of `after` is the newcomer."""
    before = solve(capacity, transfers, caps)
    after = solve(capacity, [*transfers, newcomer], None if caps is None else [*caps, new_cap])
    return before, after


# ----------------------------------------------------------------------------- reference equivalence
@settings(max_examples=400, deadline=None)
@given(instances())
def test_agrees_with_exact_reference(instance) -> None:
    capacity, transfers, caps = instance
    got = solve(capacity, transfers, caps)
    want = reference_rates(capacity, transfers, caps)
    assert got.shape == (len(transfers),)
    for g, w in zip(got, want):
        assert g == pytest.approx(float(w), rel=REL, abs=1e-12 * max(capacity))


def test_reference_solver_on_a_hand_case() -> None:
    # Guard the guard: the reference gets the parking lot right (see test_parking_lot below).
    half = Fraction(1, 2)
    assert reference_rates([1.0, 2.0], [((0, 1),), ((0,),), ((1,),)]) == [half, half, 3 * half]


# ----------------------------------------------------------------------------- invariants
@settings(max_examples=200, deadline=None)
@given(instances())
def test_feasible_and_every_transfer_capped_or_bottlenecked(instance) -> None:
    """Max-min fairness, characterised: feasible, and every transfer is at its cap or has a bottleneck
    link (saturated, and no transfer crossing it is faster). This does not reuse either solver."""
    capacity, transfers, caps = instance
    rates = solve(capacity, transfers, caps)
    ceiling = [math.inf] * len(transfers) if caps is None else caps
    assert np.all(rates >= 0)
    assert np.all(rates <= np.asarray(ceiling) * (1 + REL))
    load = link_loads(capacity, transfers, rates)
    assert np.all(load <= np.asarray(capacity) * (1 + REL))
    for i, r in enumerate(rates):
        if not crossings(transfers[i]):
            assert r == ceiling[i]
        elif r < ceiling[i] * (1 - REL):
            assert bottlenecks(capacity, transfers, rates, i), f"transfer {i} at {r} has no bottleneck"


@settings(max_examples=100, deadline=None)
@given(instances(), st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_labels(instance, rnd) -> None:
    capacity, transfers, caps = instance
    first = solve(capacity, transfers, caps)
    np.testing.assert_array_equal(first, solve(capacity, transfers, caps))
    # Relabel links and transfers and shuffle the incidence entries: same rates, relabelled.
    link_perm = list(range(len(capacity)))
    rnd.shuffle(link_perm)
    order = list(range(len(transfers)))
    rnd.shuffle(order)
    entries = [(link_perm[link], pos, n) for pos, i in enumerate(order) for link, n in crossings(transfers[i]).items()]
    rnd.shuffle(entries)
    links, owners, mult = (np.array([e[k] for e in entries], dtype=np.int64) for k in range(3))
    new_capacity = np.empty(len(capacity))
    new_capacity[link_perm] = capacity
    new_caps = None if caps is None else np.asarray(caps)[order]
    got = max_min_rates(links, owners, mult, new_capacity, len(order), new_caps)
    np.testing.assert_allclose(got, first[order], rtol=REL)


@settings(max_examples=100, deadline=None)
@given(instances(), st.integers(-20, 20))
def test_scaling_capacities_and_caps_scales_rates(instance, exponent) -> None:
    capacity, transfers, caps = instance
    k = 2.0**exponent
    scaled = solve([c * k for c in capacity], transfers, None if caps is None else [c * k for c in caps])
    np.testing.assert_allclose(scaled, solve(capacity, transfers, caps) * k, rtol=REL)


def test_inputs_are_not_mutated() -> None:
    links, owners, mult = np.array([0, 0, 1]), np.array([0, 1, 1]), np.array([1, 2, 1])
    capacity, cap = np.array([3.0, 5.0]), np.array([np.inf, 1.0])
    copies = [a.copy() for a in (links, owners, mult, capacity, cap)]
    max_min_rates(links, owners, mult, capacity, 2, cap)
    for a, b in zip((links, owners, mult, capacity, cap), copies):
        np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- hand-worked cases
def test_single_link_is_shared_equally() -> None:
    np.testing.assert_allclose(solve([12.0], [((0,),)] * 4), [3.0] * 4)


def test_parking_lot() -> None:
    # A long flow over three unit links, one short flow on each: everybody gets 1/2.
    rates = solve([1.0, 1.0, 1.0], [((0, 1, 2),), ((0,),), ((1,),), ((2,),)])
    np.testing.assert_allclose(rates, [0.5] * 4)
    # With a fatter second link, the short flow there takes what the long flow leaves.
    rates = solve([1.0, 2.0], [((0, 1),), ((0,),), ((1,),)])
    np.testing.assert_allclose(rates, [0.5, 0.5, 1.5])


def test_coupled_transfer_takes_one_share_per_sub_flow() -> None:
    # Two sub-flows of one transfer and one lone flow on a 9 B/s link: three shares of 3.
    rates = solve([9.0], [((0,), (0,)), ((0,),)])
    np.testing.assert_allclose(rates, [3.0, 3.0])
    # Held to its slower sub-flow: a 2-path transfer over links of 4 and 10 runs at 4 on both.
    rates = solve([4.0, 10.0], [((0,), (1,)), ((1,),)])
    np.testing.assert_allclose(rates, [4.0, 6.0])


def test_cap_is_respected_and_the_rest_is_redistributed() -> None:
    rates = solve([10.0], [((0,),)] * 3, [2.0, math.inf, math.inf])
    np.testing.assert_allclose(rates, [2.0, 4.0, 4.0])
    # A cap above the fair share changes nothing.
    np.testing.assert_allclose(solve([10.0], [((0,),)] * 2, [7.0, math.inf]), [5.0, 5.0])
    # A zero cap parks the transfer without disturbing the others.
    np.testing.assert_allclose(solve([10.0], [((0,),)] * 2, [0.0, math.inf]), [0.0, 10.0])


def test_transfers_without_links_get_their_cap() -> None:
    rates = solve([5.0], [((),), ((0,),), ((),)], [3.0, math.inf, math.inf])
    assert rates[0] == 3.0 and rates[1] == 5.0 and rates[2] == math.inf
    assert solve([5.0], [((),)])[0] == math.inf


def test_no_transfers() -> None:
    assert solve([1.0], []).shape == (0,)


# ----------------------------------------------------------------------------- monotonicity
def test_adding_a_flow_can_speed_another_up() -> None:
    """Known non-monotonicity of max-min fairness; the issue's proposed invariant is false.

    link 0 (10) carries A and B, link 1 (10) carries B and C: all get 5. D joins link 1, which pulls B
    down to 10/3, and A takes the capacity B gave up on link 0.
    """
    a, b, c, d = ((0,),), ((0, 1),), ((1,),), ((1,),)
    np.testing.assert_allclose(solve([10.0, 10.0], [a, b, c]), [5.0, 5.0, 5.0])
    np.testing.assert_allclose(solve([10.0, 10.0], [a, b, c, d]), [20 / 3, 10 / 3, 10 / 3, 10 / 3])


def test_crossing_a_flows_bottleneck_can_still_speed_it_up() -> None:
    """Even a newcomer through X's only link, which is X's bottleneck, can speed X up.

    Link 1 (3) carries X, B, C; links 0 and 2 (1 each) also carry B and C: all get 1, link 1 is full
    and X's bottleneck. D crosses links 0, 1 and 2, halves B and C, and X rises to 3/2.
    """
    x, b, c, d = ((1,),), ((0, 1),), ((1, 2),), ((0, 1, 2),)
    np.testing.assert_allclose(solve([1.0, 3.0, 1.0], [x, b, c]), [1.0, 1.0, 1.0])
    np.testing.assert_allclose(solve([1.0, 3.0, 1.0], [x, b, c, d]), [1.5, 0.5, 0.5, 0.5])


def lexicographically_at_most(a: np.ndarray, b: np.ndarray) -> bool:
    """sorted(a) <= sorted(b) lexicographically, reading differences within REL as ties."""
    for x, y in zip(np.sort(a), np.sort(b)):
        if x < y * (1 - REL) - 1e-12:
            return True
        if x > y * (1 + REL) + 1e-12:
            return False
    return True


@settings(max_examples=200, deadline=None)
@given(with_newcomer())
def test_adding_a_flow_never_raises_the_sorted_rates_lexicographically(case) -> None:
    """(a) Adding a transfer never raises the minimum rate of the others, nor their sorted rate vector
    in lexicographic order. Proof: the max-min fair vector is the unique feasible vector that is
    leximin-largest (a standard result for feasible sets like ours, {r >= 0 : A r <= c, r <= cap}
    with A >= 0; see Radunovic & Le Boudec, "A unified framework for max-min and min-max fairness
    with applications", 2007). Dropping the newcomer from the new allocation leaves a vector that is
    feasible for the old instance (the newcomer only used capacity), so it is leximin-at-most the old
    allocation; in particular its minimum is at most the old minimum."""
    before, after = add(*case)
    assert after[:-1].min() <= before.min() * (1 + REL)
    assert lexicographically_at_most(after[:-1], before)


@settings(max_examples=200, deadline=None)
@given(with_newcomer(single_link=True))
def test_on_one_link_adding_a_flow_slows_everybody_or_nobody(case) -> None:
    """(b) On a single link, adding a transfer never speeds any transfer up. Proof: there every rate is
    min(cap, level), where the water level solves sum of multiplicity * min(cap, level) = capacity (or
    is infinite if the caps leave the link unfilled); one more term on the left can only lower it."""
    before, after = add(*case)
    assert np.all(after[:-1] <= before * (1 + REL))


@settings(max_examples=300, deadline=None)
@given(with_newcomer())
def test_only_flows_faster_than_the_newcomer_can_speed_up(case) -> None:
    """(i) If adding newcomer D (new rate x) speeds some transfer s up, then s was faster than x before
    and is faster than x after. Proof sketch (descent): suppose a transfer speeds up and ends at or
    below x; take the one, s, with the smallest new rate. s was not at its cap, so it had an old
    bottleneck l; l was full and s was fastest on it, so as s gained on l, some u on l lost, ending
    below s's old rate, hence below x. u is not at its cap, so it has a new bottleneck l2; D is not on
    l2 (u would be at least as fast as D there). l2 is full now and carries only old transfers, so
    for u to lose there some v on l2 gained, ending at or below u's new rate: a speeder slower than s,
    contradiction. So speeders end above x; and one that started at or below x would, by the same
    step from its old bottleneck, force a loser below x and then a speeder ending below x. Holds
    with caps and multiplicities (the sums are weighted by multiplicity)."""
    before, after = add(*case)
    x = after[-1]
    for old, new in zip(before, after[:-1]):
        if new > old * (1 + REL) + 1e-12:
            assert old > x * (1 - REL) and new > x * (1 - REL), (old, new, x)


@settings(max_examples=200, deadline=None)
@given(with_newcomer())
def test_newcomer_is_no_faster_than_the_old_flows_on_an_already_full_bottleneck(case) -> None:
    """(e) If D's bottleneck l (after adding D) was already full before, D is no faster than the fastest
    old transfer on l was. Corollary of (i): l is full both times, so D's load on l must come from
    some old u on l losing; if D were faster than every old rate on l, u would end below D, and as
    in (i) u's loss forces a speeder ending below D, which (i) rules out."""
    capacity, transfers, caps, newcomer, new_cap = case
    before, after = add(*case)
    load_before = link_loads(capacity, transfers, before)
    everyone = [*transfers, newcomer]
    for link in bottlenecks(capacity, everyone, after, len(transfers)):
        on_link = [before[i] for i, t in enumerate(transfers) if crossings(t)[link]]
        if load_before[link] >= capacity[link] * (1 - REL) and on_link:
            assert after[-1] <= max(on_link) * (1 + REL)


@settings(max_examples=200, deadline=None)
@given(instances(allow_empty=False, with_caps=True, integral=True), st.data())
def test_raising_a_transfers_own_cap_never_slows_it(instance, data) -> None:
    """(g) Proof: progressive filling runs identically for both caps until the level reaches the lower
    cap; with the higher cap the transfer keeps rising from there, so it ends no lower."""
    capacity, transfers, caps = instance
    i = data.draw(st.integers(0, len(transfers) - 1))
    lower = caps[i] if math.isfinite(caps[i]) else 1e12
    higher = data.draw(st.one_of(st.just(math.inf), st.floats(lower, 2 * lower)))
    raised = [*caps[:i], higher, *caps[i + 1 :]]
    assert solve(capacity, transfers, raised)[i] >= solve(capacity, transfers, caps)[i] * (1 - REL)


@settings(max_examples=300, deadline=None)
@given(instances(), st.data())
def test_compiled_and_numpy_solvers_agree(instance, data) -> None:
    """The numba kernel is the numpy reference's loop compiled: equal rates, idle transfers included."""
    from sim.network import maxmin

    if compiled_kernel() is None:
        pytest.skip("numba is not available; only the numpy solver runs")
    capacity, transfers, caps = instance
    links, owners, mult = [], [], []
    for t, transfer in enumerate(transfers):
        for link, count in sorted(crossings(transfer).items()):
            links += [link]
            owners += [t]
            mult += [count]
    scale = np.array(
        data.draw(st.lists(st.sampled_from([0.0, 1.0, 2.0, 3.0]), min_size=len(transfers), max_size=len(transfers)))
    )
    args = (
        np.array(links, dtype=np.int64),
        np.array(owners, dtype=np.int64),
        np.array(mult, dtype=float),
        np.array(capacity, dtype=float),
        len(transfers),
        None if caps is None else np.array(caps, dtype=float),
    )
    compiled = maxmin.max_min_rates(*args, scale)
    reference = maxmin.max_min_rates_numpy(*args, scale)
    assert compiled == pytest.approx(reference, rel=REL, abs=1e-12 * max(capacity))
    assert (compiled[scale == 0] == 0).all()


def test_many_level_solves_continue_incrementally_with_the_same_rates() -> None:
    """An all-to-all on a star (one transfer per ordered pair, as many bottleneck levels as links)
    runs past the compiled kernel's scan rounds into its incremental continuation; its rates equal
    the numpy reference's exactly, integer weights summing exactly either way."""
    from sim.network import maxmin
    from sim.network.maxmin_jit import SCAN_ROUNDS

    if compiled_kernel() is None:
        pytest.skip("numba is not available; only the numpy solver runs")
    rng = np.random.default_rng(7)
    hosts = 24
    capacity = rng.uniform(1.0, 3.0, size=2 * hosts)  # host i's uplink is i, its downlink hosts + i
    links, owners, mult = [], [], []
    pairs = [(a, b) for a in range(hosts) for b in range(hosts) if a != b]
    for t, (a, b) in enumerate(pairs):
        links += [a, hosts + b]
        owners += [t, t]
        mult += [1.0, 1.0]
    scale = rng.integers(0, 4, size=len(pairs)).astype(float)  # transfers per class, some idle
    args = (np.array(links), np.array(owners), np.array(mult), capacity, len(pairs))
    compiled = maxmin.max_min_rates(*args, None, scale)
    reference = maxmin.max_min_rates_numpy(*args, None, scale)
    levels = len(np.unique(reference[scale > 0]))
    assert levels > SCAN_ROUNDS  # the continuation really ran
    assert np.array_equal(compiled, reference)
