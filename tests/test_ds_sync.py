"""DS-Sync in-process, without any backend: the ops it yields and the patterns its schedules build."""

from __future__ import annotations

import re
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import policies
from policies import Bucket, ClusterView, DSSync, HostInfo, ModelInfo, RackInfo, SettingError
from policies import ds_schedule as ds
from policies.ds_sync import CACHED_PATTERNS, DSSyncSettings
from policies.ops import AllReduce, Group, Payload
from policies.registry import create

NIC = 3.125e9  # 25 Gbit/s
MODEL = ModelInfo(parameter_bytes=32e6, bucket_bytes=(8e6,) * 4)
BUCKET = Bucket(index=1, nbytes=8e6, count=4)


def cluster(
    racks: int, hosts_per_rack: int, gpus: int = 1, *, oversubscription: float = 4.0, order: list[int] | None = None
) -> ClusterView:
    """A two-tier view: host i in rack i // hosts_per_rack, each rack's uplink = its NICs / oversubscription.

    `order` permutes the GPU slots (host by host) before numbering them, so ranks can be scattered
    over hosts and racks however a test likes.
    """
    names = [f"h{i}" for i in range(racks * hosts_per_rack)]
    slots = [h for h in names for _ in range(gpus)]
    rank_hosts = tuple(slots[i] for i in order) if order is not None else tuple(slots)
    hosts = {
        h: HostInfo(h, f"r{i // hosts_per_rack}", tuple(r for r, x in enumerate(rank_hosts) if x == h), NIC, 1e11)
        for i, h in enumerate(names)
    }
    uplink = hosts_per_rack * NIC / oversubscription
    rack_map = {
        f"r{r}": RackInfo(f"r{r}", tuple(names[r * hosts_per_rack : (r + 1) * hosts_per_rack]), uplink)
        for r in range(racks)
    }
    return ClusterView(rank_hosts, hosts, rack_map)


def star(hosts: int, gpus: int = 1) -> ClusterView:
    rank_hosts = tuple(f"h{i}" for i in range(hosts) for _ in range(gpus))
    infos = {f"h{i}": HostInfo(f"h{i}", None, tuple(range(i * gpus, (i + 1) * gpus)), NIC, 1e11) for i in range(hosts)}
    return ClusterView(rank_hosts, infos, {})


def bound(view: ClusterView, **kwargs: object) -> DSSync:
    policy = DSSync(**kwargs)
    policy.bind(view, MODEL)
    return policy


def ranks_of(policy: DSSync, step: int) -> list[tuple[int, ...]]:
    return [g.ranks for g in policy.pattern(step)]


def rack_of(view: ClusterView, rank: int) -> str:
    rack = view.rack_of(rank)
    assert rack is not None
    return rack


# -- ops ----------------------------------------------------------------------------------------------


def test_each_bucket_averages_parameters_inside_the_group() -> None:
    p = bound(cluster(2, 2))  # 2 racks of 2 ranks, oversubscribed: cycle local, mix (0,2), local, mix (1,3)
    assert list(p.on_gradients(1, 0, BUCKET)) == [AllReduce(Group((0, 1)), 8e6, payload=Payload.PARAMETERS)]
    assert list(p.on_gradients(2, 1, BUCKET)) == [AllReduce(Group((0, 2)), 8e6, payload=Payload.PARAMETERS)]
    assert list(p.on_gradients(1, 1, BUCKET)) == []  # its rack-mate went mixing: a group of one sends nothing
    for step in range(8):
        assert list(p.begin_step(0, step)) == [] and list(p.end_step(0, step)) == []


def test_parameters_travel_as_fp32_master_weights_when_gradients_travel_in_16_bits() -> None:
    """Under fp16 training a bucket's 8 MB of 16-bit gradient is 16 MB of fp32 master weights, which
    is what a group averages (the real backend sends the replicas' fp32 parameters)."""
    p = DSSync()
    p.bind(cluster(2, 2), ModelInfo(parameter_bytes=64e6, bucket_bytes=(8e6,) * 4))
    assert list(p.on_gradients(1, 0, BUCKET)) == [AllReduce(Group((0, 1)), 16e6, payload=Payload.PARAMETERS)]


def test_members_share_one_group_object_and_local_groups_are_reused() -> None:
    p = bound(cluster(4, 4, 2))
    (op,) = p.on_gradients(3, 0, BUCKET)
    assert all(p.group_of(r, 0) is op.group for r in op.group.ranks)
    assert p.group_of(3, 0) is p.group_of(3, 2)  # the same local group at every local step
    assert p.group_of(1, 1) is p.group_of(1, 1 + p.cycle_length)


def test_a_single_rank_never_communicates() -> None:
    p = bound(star(1))
    assert p.pattern(0) == [Group((0,))] and list(p.on_gradients(0, 0, BUCKET)) == []


# -- the auto schedule --------------------------------------------------------------------------------


def test_cycle_of_four_racks_of_four_hosts() -> None:
    """The cycle docs/ds_sync.md writes out: local, mix M_0, local, mix M_1, ... ambassadors rotating."""
    p = bound(cluster(4, 4))
    local = [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9, 10, 11), (12, 13, 14, 15)]
    assert p.cycle_length == 8 and p.group_sizes == (4, 4, 4, 4)
    assert [ranks_of(p, s) for s in (0, 2, 4, 6)] == [local] * 4
    assert ranks_of(p, 1) == [(0, 4), (1, 2, 3), (5, 6, 7), (8, 12), (9, 10, 11), (13, 14, 15)]
    assert ranks_of(p, 3) == [(0, 2, 3), (1, 13), (4, 6, 7), (5, 9), (8, 10, 11), (12, 14, 15)]
    assert ranks_of(p, 5) == [(0, 1, 3), (2, 6), (4, 5, 7), (8, 9, 11), (10, 14), (12, 13, 15)]
    assert ranks_of(p, 7) == [(0, 1, 2), (3, 15), (4, 5, 6), (7, 11), (8, 9, 10), (12, 13, 14)]
    assert ranks_of(p, 9) == ranks_of(p, 1)


def test_mixing_period_spaces_the_mixing_patterns() -> None:
    p = bound(cluster(2, 2), mixing_period=3)
    crossing = [
        s for s in range(p.cycle_length) if any(len({rack_of(p.view, r) for r in g.ranks}) > 1 for g in p.pattern(s))
    ]  # type: ignore[arg-type]
    assert p.cycle_length == 6 and crossing == [2, 5]


def test_explicit_group_size_chunks_islands_and_shifts_alternate_patterns() -> None:
    p = bound(star(8), group_size=4)  # one island of 8: cut at 4, then shifted by 2 (wrapping)
    assert p.cycle_length == 2
    assert ranks_of(p, 0) == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert ranks_of(p, 1) == [(6, 7, 0, 1), (2, 3, 4, 5)]  # ordered by first rank; (6, 7, 0, 1) is a ring order


def test_groups_smaller_than_a_rack_shift_on_alternate_local_patterns_in_every_rack() -> None:
    """2 racks of 4, group_size 2, mixing_period 2: cycle 2 x lcm(2, 4) = 8. Local patterns (even steps)
    alternate the cut at 0 and the cut shifted by ceil(2/2) = 1 in each rack; mixing pattern k (step
    2k + 1) pairs rack 0's rank k mod 4 with rack 1's, and chunks the rest by 2, shifted on odd k."""
    p = bound(cluster(2, 4), group_size=2)
    cut, shifted = [(0, 1), (2, 3), (4, 5), (6, 7)], [(3, 0), (1, 2), (7, 4), (5, 6)]
    assert p.cycle_length == 8 and p.group_sizes == (2, 2)
    assert [ranks_of(p, s) for s in (0, 2, 4, 6)] == [cut, shifted, cut, shifted]
    assert ranks_of(p, 1) == [(0, 4), (1, 2), (3,), (5, 6), (7,)]
    assert ranks_of(p, 3) == [(0,), (1, 5), (2, 3), (4,), (6, 7)]
    assert ranks_of(p, 5) == [(0, 1), (2, 6), (3,), (4, 5), (7,)]
    assert ranks_of(p, 7) == [(0,), (1, 2), (3, 7), (4,), (5, 6)]
    # an odd group size shifts by ceil(g/2): 3 racks of 4 in groups of 3, cut at 2 on the shifted patterns
    p = bound(cluster(3, 4), group_size=3, mixing_period=3)
    assert ranks_of(p, 0) == [(0, 1, 2), (3,), (4, 5, 6), (7,), (8, 9, 10), (11,)]
    assert ranks_of(p, 1) == [(2, 3, 0), (1,), (6, 7, 4), (5,), (10, 11, 8), (9,)]


@pytest.mark.parametrize(
    "view", [star(6, 2), cluster(3, 4, 2, oversubscription=1.0), cluster(2, 2, oversubscription=0.5)]
)
def test_one_island_means_one_global_group(view: ClusterView) -> None:
    """No oversubscribed rack: every step averages over everyone, like the ring (but parameters)."""
    p = bound(view)
    ring = policies.Ring()
    ring.bind(view, MODEL)
    assert p.cycle_length == 1 and p.pattern(5) == [Group.of(range(view.world_size))]
    ours, theirs = list(p.on_gradients(3, 5, BUCKET)), list(ring.on_gradients(3, 5, BUCKET))
    assert [(op.group, op.nbytes) for op in ours] == [(op.group, op.nbytes) for op in theirs]


def test_group_size_beyond_an_island_is_clipped_to_it() -> None:
    big, auto = bound(cluster(4, 2, 2), group_size=100), bound(cluster(4, 2, 2))
    assert big.group_sizes == auto.group_sizes == (4, 4, 4, 4)
    assert all(big.pattern(s) == auto.pattern(s) for s in range(auto.cycle_length))


def test_islands_follow_physical_racks_when_ranks_are_scattered() -> None:
    order = list(np.random.default_rng(7).permutation(4 * 3 * 2))  # GPUs numbered in random order
    view = cluster(4, 3, 2, order=order)
    p = bound(view)
    assert sorted(map(sorted, p.islands)) == sorted(
        sorted(r for r in range(view.world_size) if view.rack_of(r) == rack) for rack in view.racks
    )
    for island in p.islands:
        hosts = [view.host_of(r) for r in island]
        assert hosts == sorted(hosts, key=hosts.index)  # host by host: a host's ranks are adjacent
    for step in range(0, p.cycle_length, 2):  # local patterns stay inside a rack
        assert all(len({view.rack_of(r) for r in g.ranks}) == 1 for g in p.pattern(step))
    assert_no_shared_uplink(p, view)


def assert_no_shared_uplink(p: DSSync, view: ClusterView) -> None:
    """In every pattern, each rack has at most one rank in a group that leaves the rack."""
    for step in range(p.cycle_length or 1):
        leaving = [
            rack_of(view, r) for g in p.pattern(step) if len({view.rack_of(x) for x in g.ranks}) > 1 for r in g.ranks
        ]
        assert len(leaving) == len(set(leaving)), f"step {step}: two flows share an uplink ({leaving})"


def assert_partition(groups: list[Group], world: int) -> None:
    members = [r for g in groups for r in g.ranks]
    assert sorted(members) == list(range(world))


@settings(max_examples=120, deadline=None)
@given(
    racks=st.integers(1, 8),
    hosts_per_rack=st.integers(1, 8),
    gpus=st.integers(1, 4),
    group_size=st.one_of(st.just("auto"), st.integers(1, 12)),
    mixing_period=st.integers(1, 4),
    oversubscribed=st.booleans(),
)
def test_auto_cycle_partitions_connects_and_spares_uplinks(
    racks: int, hosts_per_rack: int, gpus: int, group_size: object, mixing_period: int, oversubscribed: bool
) -> None:
    view = cluster(racks, hosts_per_rack, gpus, oversubscription=4.0 if oversubscribed else 1.0)
    world = view.world_size
    islands = racks if oversubscribed else 1
    n = world // islands
    g = n if group_size == "auto" else min(int(group_size), n)  # type: ignore[call-overload]
    # the only shapes no cycle can connect: singleton groups in a multi-rank island, and mixing at every
    # step with two ranks per rack (one is always the ambassador, the other always alone)
    hopeless = (g == 1 and n > 1) or (mixing_period == 1 and n == 2 and islands > 1)
    policy = DSSync(group_size=group_size, mixing_period=mixing_period)
    if hopeless:
        with pytest.raises(SettingError, match="parts that never share a group") as info:
            policy.bind(view, MODEL)
        assert info.value.field in ("group_size", "mixing_period")
        return
    policy.bind(view, MODEL)
    assert len(policy.islands) == islands and set(policy.group_sizes) == {g}
    union = nx.empty_graph(world)
    for step in range(policy.cycle_length):
        groups = policy.pattern(step)
        assert_partition(groups, world)
        assert all(policy.group_of(r, step) is grp for grp in groups for r in grp.ranks)
        assert max(grp.size for grp in groups) <= max(g, 2)  # ambassador pairs join 1-rank islands
        for grp in groups:
            nx.add_path(union, grp.ranks)
    assert nx.is_connected(union)
    if oversubscribed:
        assert_no_shared_uplink(policy, view)
    assert policy.pattern(policy.cycle_length + 1) == policy.pattern(1)


def test_repeated_group_averaging_reaches_consensus() -> None:
    """Connected union of doubly-stochastic averaging steps: every replica converges to the mean."""
    p = bound(cluster(4, 4, 2), group_size=3)
    x = np.random.default_rng(0).normal(size=p.view.world_size)  # type: ignore[union-attr]
    mean = x.mean()
    for step in range(40 * p.cycle_length):
        for g in p.pattern(step):
            x[list(g.ranks)] = x[list(g.ranks)].mean()
    assert abs(x.mean() - mean) < 1e-12 and np.ptp(x) < 1e-6


def test_hopeless_auto_schedules_name_the_setting() -> None:
    with pytest.raises(SettingError, match=r"group_size: with group_size=1 .* 4 parts that never share a group"):
        bound(cluster(2, 4), group_size=1)
    with pytest.raises(SettingError, match=r"mixing_period: .*use a larger group_size or mixing_period >= 2"):
        bound(cluster(2, 2), mixing_period=1)
    # a cycle (800 patterns) longer than the pattern cache still counts every pattern exactly once
    with pytest.raises(SettingError, match=r"leaves 400 parts that never share a group: \{0, 400\}, \{1, 401\}"):
        bound(cluster(2, 400), group_size=1)


# -- shuffle ------------------------------------------------------------------------------------------


def test_shuffle_is_a_pure_function_of_seed_and_step() -> None:
    view = cluster(4, 4, 2)
    a, b, other = (
        bound(view, schedule="shuffle"),
        bound(view, schedule="shuffle"),
        bound(view, schedule="shuffle", seed=1),
    )
    assert a.cycle_length is None and a.group_sizes == (8,)  # auto: the size of a rack
    for step in (0, 1, 2, 1000):
        assert_partition(a.pattern(step), 32)
        assert a.pattern(step) == b.pattern(step) and all(grp.size == 8 for grp in a.pattern(step))
    b.pattern(7)  # the order of calls does not matter
    assert a.pattern(3) == b.pattern(3)
    assert a.pattern(0) != a.pattern(1) and a.pattern(0) != other.pattern(0)
    assert ranks_of(a, 0) == [g.ranks for g in map(Group, ds.shuffle_pattern(32, 8, 0, 0))]


def test_shuffle_sizes() -> None:
    assert bound(star(8), schedule="shuffle").pattern(3) == [Group.of(range(8))]  # one island: everyone
    assert sorted(g.size for g in bound(star(7), schedule="shuffle", group_size=3).pattern(0)) == [1, 3, 3]
    with pytest.raises(SettingError, match="group_size: 1 with schedule: shuffle never averages"):
        bound(star(4), schedule="shuffle", group_size=1)


def test_cache_stays_bounded_over_a_long_cycle() -> None:
    p = bound(cluster(2, 256, 2))  # ambassadors rotate over 512 ranks: a cycle of 1024 patterns
    assert p.cycle_length == 1024
    for step in range(3 * CACHED_PATTERNS):
        p.group_of(5, step)
    assert len(p._cache) <= CACHED_PATTERNS
    assert p.pattern(1) == p.pattern(1 + 1024)


# -- explicit schedules -------------------------------------------------------------------------------

V1 = [[[0, 1], [2, 3]], [[0, 3], [1, 2]]]  # the v1 code's four-worker schedule


def test_explicit_schedule_cycles_by_step() -> None:
    p = bound(star(4), schedule=V1)
    assert p.cycle_length == 2
    assert ranks_of(p, 0) == ranks_of(p, 2) == [(0, 1), (2, 3)]
    assert ranks_of(p, 3) == [(0, 3), (1, 2)]
    assert list(p.on_gradients(3, 1, BUCKET)) == [AllReduce(Group((0, 3)), 8e6, payload=Payload.PARAMETERS)]


@pytest.mark.parametrize(
    "schedule, problem",
    [
        ([[[0, 1], [2]]], "partition 0 does not cover ranks 0..3 once: rank 3 in no group"),
        (
            [[[0, 1], [2, 3]], [[0, 1], [1, 2, 3]]],
            "partition 1 does not cover ranks 0..3 once: rank 1 is in groups 0 and 1",
        ),
        ([[[0, 0, 1, 2, 3]]], "rank 0 is twice in group 0"),
        ([[[0, 1, 2, 3, 4]]], "group 0 names rank 4, but the ranks are 0..3"),
        ([[[0, 1, 2, 3], []]], "group 1 is empty"),
        ([[[0, 1], [2, 3]], [[1, 0], [3, 2]]], "leave 2 parts that never share a group: {0-1} and {2-3}"),
    ],
)
def test_explicit_schedule_errors_name_the_field_and_the_problem(schedule: list, problem: str) -> None:
    with pytest.raises(SettingError) as info:
        bound(star(4), schedule=schedule)
    assert info.value.field == "schedule" and problem in info.value.detail


# -- settings -----------------------------------------------------------------------------------------


def test_settings_are_documented_validated_and_frozen() -> None:
    assert all(f.description for f in DSSyncSettings.model_fields.values())
    assert set(DSSyncSettings.model_fields) == {"group_size", "schedule", "mixing_period", "seed"}
    p = DSSync(group_size=4)
    with pytest.raises(ValueError, match="frozen"):
        p.settings.group_size = 2  # type: ignore[misc]
    with pytest.raises(SettingError, match=r"schedule: should be 'auto' or 'shuffle' or a valid list \(got 'sufle'\)"):
        create("ds_sync", {"schedule": "sufle"})
    with pytest.raises(SettingError, match="mixing_period: should be greater than or equal to 1"):
        create("ds_sync", {"mixing_period": 0})
    assert create("ds_sync", {"group_size": 2, "schedule": "shuffle", "seed": 3}).settings.seed == 3


@pytest.mark.parametrize(
    "chosen, message",
    [
        ({"seed": 1}, "seed: has no effect with schedule: auto"),
        ({"schedule": "shuffle", "mixing_period": 3}, "mixing_period: has no effect with schedule: shuffle"),
        ({"schedule": V1, "group_size": 2}, "group_size: has no effect with schedule: an explicit list"),
        ({"schedule": []}, "schedule: an explicit schedule needs at least one partition"),
    ],
)
def test_settings_a_schedule_would_ignore_are_errors(chosen: dict, message: str) -> None:
    with pytest.raises(SettingError, match=message):
        create("ds_sync", chosen)


def test_registered_and_exported() -> None:
    assert policies.resolve("ds_sync") is DSSync and "ds_sync" in policies.available()


def test_docs_examples_run() -> None:
    page = Path(__file__).parent.parent / "docs" / "ds_sync.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), re.S)
    assert blocks
    namespace: dict = {"__name__": "docs_ds_sync"}
    for code in blocks:
        exec(compile(code, str(page), "exec"), namespace)
