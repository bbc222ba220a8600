"""Slow workers, transient stragglers and background traffic, against hand-computed expectations."""

from __future__ import annotations

import pytest
from helpers import GBPS, US, star, synthetic, two_tier

from sim.api import prepare, simulate
from sim.config import parse_config
from sim.errors import ConfigError

MB = 1e6
STAR_ALPHA = 12 * US  # GPU-host-switch-host-GPU


def allreduces(result, policy: str = "ring"):  # type: ignore[no-untyped-def]
    ops = result.ops
    return ops[(ops["policy"] == policy) & (ops["kind"] == "AllReduce")].sort_values("launched_s")


def test_compute_straggler_stretches_segments_starting_in_its_window() -> None:
    """no_sync, one 30 ms iteration per worker (forward 10 ms, backward 20 ms); rank 1 is 3x slower
    for segments that start in [0.05, 0.10)."""
    cfg = synthetic(star(2), [{"name": "no_sync"}], 1, compute_ms=30.0, iterations=5)
    cfg["faults"] = {"stragglers": [{"ranks": [1], "compute_factor": 3.0, "start_s": 0.05, "duration_s": 0.05}]}
    it = simulate(cfg).iterations.set_index(["rank", "iteration"])
    t, ends = 0.0, []
    for _ in range(5):  # walk rank 1's segments by hand
        for nominal in (0.010, 0.020):
            t += nominal * (3.0 if 0.05 <= t < 0.10 else 1.0)
        ends.append(t)
    assert list(it.loc[1, "end_s"]) == pytest.approx(ends)
    assert list(it.loc[0, "end_s"]) == pytest.approx([0.03 * (k + 1) for k in range(5)])


def test_network_delay_on_one_worker_slows_every_ring_step() -> None:
    """Sync-Switch's straggler: 10 ms extra on one worker's outgoing link. A ring step waits for its
    slowest flow, so an all-reduce of p ranks pays the delay 2(p-1) times, in both fidelities."""
    for model in ("pipelined", "stepwise"):
        cfg = synthetic(star(4), [{"name": "ring"}], 40, compute_ms=10.0, iterations=4, model=model)
        cfg["faults"] = {"stragglers": [{"ranks": [2], "delay_ms": 10.0, "start_s": 0.0, "duration_s": 1e3}]}
        ars = allreduces(simulate(cfg))
        expected = 2 * 3 * (STAR_ALPHA + 0.010) + 2 * 3 / 4 * 40 * MB / (25 * GBPS)
        assert ars["duration_s"].to_numpy() == pytest.approx([expected] * 4, rel=1e-9), model


@pytest.mark.parametrize("delay_mode, hops", [("one_way", 1), ("rpc", 2)])
def test_rpc_delay_is_paid_twice_between_two_delayed_workers(delay_mode: str, hops: int) -> None:
    """Ranks 1 and 2 of a 4-ring delayed 10 ms. one_way: every flow pays it once at most (1 -> 2
    leaves rank 1). rpc: a flow into a delayed host pays it too (the request or response that leaves
    that host), so 1 -> 2 pays it twice and every ring step waits 2 x 10 ms."""
    for model in ("pipelined", "stepwise"):
        cfg = synthetic(star(4), [{"name": "ring"}], 40, compute_ms=10.0, iterations=3, model=model)
        straggler = {"ranks": [1, 2], "delay_ms": 10.0, "delay_mode": delay_mode, "start_s": 0.0, "duration_s": 1e3}
        cfg["faults"] = {"stragglers": [straggler]}
        expected = 2 * 3 * (STAR_ALPHA + hops * 0.010) + 2 * 3 / 4 * 40 * MB / (25 * GBPS)
        assert allreduces(simulate(cfg))["duration_s"].to_numpy() == pytest.approx([expected] * 3, rel=1e-9), model


def test_rpc_delay_on_one_worker_costs_a_ring_what_one_way_does() -> None:
    """One delayed rank: its outgoing flow pays the delay under both modes, its incoming one only
    under rpc, so a ring step still waits one delay (the ring of the test above)."""
    cfg = synthetic(star(4), [{"name": "ring"}], 40, compute_ms=10.0, iterations=3)
    cfg["faults"] = {
        "stragglers": [{"ranks": [2], "delay_ms": 10.0, "delay_mode": "rpc", "start_s": 0.0, "duration_s": 1e3}]
    }
    expected = 2 * 3 * (STAR_ALPHA + 0.010) + 2 * 3 / 4 * 40 * MB / (25 * GBPS)
    assert allreduces(simulate(cfg))["duration_s"].to_numpy() == pytest.approx([expected] * 3, rel=1e-9)


@pytest.mark.parametrize("ranks, delay_mode, hops", [([2], "one_way", 1), ([2], "rpc", 1), ([1, 2], "rpc", 2)])
def test_a_delay_reaches_collectives_under_the_nccl_model(ranks: list[int], delay_mode: str, hops: int) -> None:
    """Under the NCCL model a collective's time comes from NCCL's tables, not from flows stepping
    round the ring; a straggler's delay must still reach it. NCCL picks its algorithm blind to the
    delay, then waits the slowest hop's extra delay on each of its network steps: a 4-ring of one GPU
    per host crosses hosts on 2 x 3 steps, so each all-reduce lasts 6 x hops x 10 ms longer."""

    def durations(faults: dict) -> list[float]:
        cfg = synthetic(star(4), [{"name": "ring"}], 40, compute_ms=10.0, iterations=3)
        cfg["simulation"] = {**cfg.get("simulation", {}), "network_model": "nccl"}
        cfg["faults"] = faults
        return list(allreduces(simulate(cfg))["duration_s"])

    straggler = {"ranks": ranks, "delay_ms": 10.0, "delay_mode": delay_mode, "start_s": 0.0, "duration_s": 1e3}
    nominal, delayed = durations({}), durations({"stragglers": [straggler]})
    assert len(nominal) == len(delayed) == 3
    assert [d - n for d, n in zip(delayed, nominal)] == pytest.approx([6 * hops * 0.010] * 3, rel=1e-9)


def test_delay_mode_needs_a_delay() -> None:
    cfg = synthetic(star(2), [{"name": "ring"}], 10)
    cfg["faults"] = {
        "stragglers": [{"ranks": [1], "compute_factor": 2, "delay_mode": "rpc", "start_s": 0, "duration_s": 1}]
    }
    with pytest.raises(ConfigError, match="delay_mode: applies only with delay_ms"):
        parse_config(cfg)


def test_uplink_bandwidth_straggler_applies_only_in_its_window() -> None:
    """Uplinks halved during [0.2, 0.6): ring all-reduces launched inside get 12.5 Gbps cross-rack."""
    cfg = synthetic(two_tier(2, 2, 25.0), [{"name": "ring"}], 40, compute_ms=60.0, iterations=8)
    cfg["faults"] = {"stragglers": [{"uplinks": "all", "bandwidth_factor": 0.5, "start_s": 0.2, "duration_s": 0.4}]}
    ars = allreduces(simulate(cfg))
    alpha = 22 * US
    fast = 2 * 3 * alpha + 1.5 * 40 * MB / (25 * GBPS)
    slow = 2 * 3 * alpha + 1.5 * 40 * MB / (12.5 * GBPS)
    inside = [r for r in ars.itertuples() if 0.2 <= r.launched_s and r.finished_s <= 0.6]
    outside = [r for r in ars.itertuples() if r.finished_s <= 0.2 or r.launched_s >= 0.6]
    assert inside and outside  # the window holds some all-reduces and misses others
    assert [r.duration_s for r in inside] == pytest.approx([slow] * len(inside), rel=1e-9)
    assert [r.duration_s for r in outside] == pytest.approx([fast] * len(outside), rel=1e-9)


def test_random_stragglers_are_seeded() -> None:
    cfg = synthetic(star(4), [{"name": "no_sync"}], 1, compute_ms=10.0, iterations=200)
    cfg["faults"] = {
        "stragglers": [{"ranks": [0, 1, 2, 3], "count": 1, "compute_factor": 2.0, "every_s": 0.2, "duration_s": 0.05}]
    }
    a, b = simulate(cfg), simulate(cfg)
    assert a.faults.equals(b.faults) and a.iterations.equals(b.iterations)
    cfg["seed"] = 1
    c = simulate(cfg)
    assert not c.faults["start_s"].equals(a.faults["start_s"])
    # a Poisson process with mean gap 0.2 s over a ~2 s run: a handful of occurrences, one rank each
    assert 3 <= len(a.faults) <= 25 and a.faults["targets"].str.fullmatch(r"ranks \d").all()
    gaps = a.faults["start_s"].diff().dropna()
    assert (gaps > 0).all()


def test_background_flow_carries_its_rate_while_on() -> None:
    """An on/off 5 Gbps flow h0 -> h1 (0.1 s on, 0.1 s off) alone on the network: its bytes are
    rate x time on; the windows appear in the faults table."""
    cfg = synthetic(star(2), [{"name": "no_sync"}], 1, compute_ms=100.0, iterations=10)
    cfg["background"] = [{"hosts": ["h0", "h1"], "gbps": 5.0, "on_s": 0.1, "off_s": 0.1}]
    result = simulate(cfg)
    windows = result.faults
    on_time = float((windows["end_s"] - windows["start_s"]).sum())
    assert on_time == pytest.approx(0.5, rel=1e-9)  # a 1.0 s run: on at 0, 0.2, 0.4, 0.6, 0.8
    links = result.links.set_index("link")
    assert links.loc["h0->switch", "bytes"] == pytest.approx(5 * GBPS * on_time, rel=1e-9)
    assert links.loc["h1->switch", "bytes"] == 0.0


def test_open_ended_background_competes_for_the_whole_run() -> None:
    cfg = synthetic(two_tier(2, 2, 25.0), [{"name": "ring"}], 40, compute_ms=0.0, iterations=3)
    cfg["background"] = [{"uplinks": ["rack0"], "gbps": 20.0}]  # capped above half of 25: gets 12.5
    ars = allreduces(simulate(cfg))
    expected = 2 * 3 * 22 * US + 1.5 * 40 * MB / (12.5 * GBPS)
    assert ars["duration_s"].to_numpy() == pytest.approx([expected] * 3, rel=1e-9)


@pytest.mark.parametrize(
    "section, value, message",
    [
        (
            "faults",
            {"slow_workers": [{"ranks": [7], "compute_factor": 2}]},
            r"faults.slow_workers\[0\].ranks: ranks \[7\] do not exist",
        ),
        (
            "faults",
            {"stragglers": [{"uplinks": ["rack9"], "delay_ms": 1, "start_s": 0, "duration_s": 1}]},
            r"faults.stragglers\[0\].uplinks: unknown racks \['rack9'\]; allowed: all, rack0, rack1",
        ),
        ("background", [{"hosts": ["h0", "h99"], "gbps": 1}], r"background\[0\].hosts: unknown hosts \['h99'\]"),
        (  # "all" racks are counted on the cluster: two here
            "faults",
            {"stragglers": [{"uplinks": "all", "count": 3, "delay_ms": 1, "every_s": 1, "duration_s": 1}]},
            r"faults.stragglers\[0\].count: 3 exceeds the 2 racks it picks from; allowed: 1 to 2",
        ),
    ],
)
def test_fault_targets_are_checked_against_the_cluster(section: str, value: object, message: str) -> None:
    cfg = synthetic(two_tier(2, 2, 25.0), [{"name": "ring"}], 10)
    cfg[section] = value
    with pytest.raises(ConfigError, match=message):
        prepare(parse_config(cfg))


def test_uplinks_on_a_star_are_an_error() -> None:
    cfg = synthetic(star(2), [{"name": "ring"}], 10)
    cfg["background"] = [{"uplinks": "all", "fraction": 0.5}]
    with pytest.raises(ConfigError, match=r"background\[0\].uplinks: this cluster has no racks"):
        prepare(parse_config(cfg))


def test_a_deadlock_under_periodic_background_is_caught_by_the_stall_timeout() -> None:
    """An on/off flow keeps producing events, so only the stall timeout can tell the workers are stuck."""
    cfg = synthetic(star(3), [{"name": "custom_policies:HalfTheRanks"}], 1, compute_ms=1.0, iterations=2)
    cfg["background"] = [{"hosts": ["h0", "h1"], "gbps": 1.0, "on_s": 0.5, "off_s": 0.5}]
    cfg["simulation"]["stall_timeout_s"] = 10.0
    error = simulate(cfg).errors["half_the_ranks"]
    assert error.startswith("DeadlockError:") and "never reached it" in error


@pytest.mark.parametrize(
    "faults, message",
    [
        ({"slow_workers": [{"ranks": [0, 1, 1], "compute_factor": 3}]}, r"slow_workers\[0\].ranks: rank 1 listed"),
        (
            {"stragglers": [{"ranks": [2, 0, 2, 0], "compute_factor": 2, "start_s": 0, "duration_s": 1}]},
            r"faults.stragglers\[0\].ranks: ranks \[0, 2\] listed more than once",
        ),
    ],
)
def test_a_rank_listed_twice_in_one_entry_is_refused(faults: dict, message: str) -> None:
    """Listed twice, a rank would get the entry's factor twice (3 x 3 = 9x slower): refused instead."""
    cfg = synthetic(star(4), [{"name": "ring"}], 10)
    cfg["faults"] = faults
    with pytest.raises(ConfigError, match=message):
        parse_config(cfg)


def test_a_slow_worker_is_slowed_by_its_factor_once() -> None:
    """no_sync, 30 ms of compute a step: rank 1 at compute_factor 3 takes 90 ms a step, not 270 ms."""
    cfg = synthetic(star(2), [{"name": "no_sync"}], 1, compute_ms=30.0, iterations=2)
    cfg["faults"] = {"slow_workers": [{"ranks": [1], "compute_factor": 3.0}]}
    it = simulate(cfg).iterations
    end = it[it["rank"] == 1]["end_s"].max()
    assert end == pytest.approx(2 * 0.090, rel=1e-9)


def test_a_background_flow_from_a_host_to_itself_is_refused_at_validation() -> None:
    cfg = synthetic(star(2), [{"name": "ring"}], 10)
    cfg["background"] = [{"hosts": ["h1", "h1"], "gbps": 1}]
    with pytest.raises(ConfigError, match=r"background\[0\].hosts: a flow from 'h1' to itself"):
        parse_config(cfg)


def test_every_problem_of_a_background_flow_and_a_straggler_is_reported_at_once() -> None:
    cfg = synthetic(star(2), [{"name": "ring"}], 10)
    cfg["background"] = [{"hosts": ["h0", "h0"], "fraction": 0.5, "on_s": 1.0}]
    cfg["faults"] = {"stragglers": [{"ranks": [0], "uplinks": "all", "compute_factor": 2, "count": 1, "duration_s": 1}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(cfg)
    lines = str(caught.value).splitlines()
    assert lines == [
        "faults.stragglers[0].ranks: give exactly one target of ranks, uplinks (got ranks, uplinks)",
        "faults.stragglers[0].start_s: give exactly one timing of start_s, every_s (got none)",
        "faults.stragglers[0].count: applies only to a random process (every_s)",
        "background[0].hosts: a flow from 'h0' to itself crosses no link; name two different hosts",
        "background[0].fraction: applies only to uplinks; give hosts a rate in gbps",
        "background[0].on_s: on_s and off_s go together",
    ]


@pytest.mark.parametrize(
    "target, line",
    [
        ({"ranks": [0, 1]}, "count: 3 exceeds the 2 ranks it picks from; allowed: 1 to 2 (leave it out for all)"),
        (
            {"uplinks": ["rack0"]},
            "count: 3 exceeds the 1 uplinks it picks from; allowed: 1 to 1 (leave it out for all)",
        ),
    ],
)
def test_a_straggler_count_above_its_listed_targets_is_refused(target: dict, line: str) -> None:
    """Each occurrence hits `count` different targets of those listed: asking for more than are listed
    was once accepted and quietly hit them all."""
    cfg = synthetic(two_tier(2, 2, 25.0), [{"name": "ring"}], 10)
    cfg["faults"] = {"stragglers": [{**target, "count": 3, "delay_ms": 1, "every_s": 1, "duration_s": 1}]}
    with pytest.raises(ConfigError) as caught:
        parse_config(cfg)  # at validation: `syncsim check` lists it
    assert str(caught.value).splitlines() == [f"faults.stragglers[0].{line}"]
    cfg["faults"]["stragglers"][0]["count"] = 2 if "ranks" in target else 1  # as many as listed: accepted
    parse_config(cfg)


def test_a_background_window_ends_before_its_end_time_not_at_it() -> None:
    """Background traffic's window is [start_s, start_s + duration_s): 1 s on, 1 s off from 0 for 4 s
    is on over [0, 1) and [2, 3); the off period ends exactly at 4 s, where nothing opens (an end taken
    as inclusive added a zero-length row [4, 4] to faults.csv). The run lasts 6 s, past the window."""
    cfg = synthetic(star(2), [{"name": "no_sync"}], 1, compute_ms=1000.0, iterations=6)
    cfg["background"] = [{"hosts": ["h0", "h1"], "gbps": 5.0, "on_s": 1.0, "off_s": 1.0, "duration_s": 4.0}]
    result = simulate(cfg)
    assert float(result.summary["sim_time_s"].iloc[0]) == pytest.approx(6 * 1.0)  # 6 iterations of 1 s compute
    rows = result.faults[["what", "start_s", "end_s"]].values.tolist()
    assert rows == [["background", 0.0, 1.0], ["background", 2.0, 3.0]], f"background window rows: {rows}"
