"""Workers leaving and coming back between outer steps (`faults.departures`, policies.membership) in the
simulator and numerics mode: closed forms of the rounds with fewer workers and of the hand-over, the away
worker's rows and clock, what the joiner receives, and the refusals."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import pytest
from helpers import GBPS, US

from policies.ops import Broadcast, Group
from sim.api import prepare, simulate
from sim.config import parse_config
from sim.engine.faults import late_faults
from sim.errors import ConfigError
from sim.experiments.diloco_closed_form import Network, all_reduce_s, ring_latency

LINK_US, INTRA_US, RTT_MS, WAN_GBPS = 5.0, 1.0, 40.0, 10.0
MB = 1e6
H = 5


def config(
    policy: dict[str, Any],
    departures: list[dict[str, Any]],
    iterations: int = 4 * H,
    numerics: Optional[dict[str, Any]] = None,
    gradient_mb: float = 100.0,
) -> dict[str, Any]:
    """Three datacenters of one single-GPU host on a 10 Gb/s, 40 ms WAN (one connection, no window limit);
    one bucket ready when backward ends, so every average is exposed."""
    cfg: dict[str, Any] = {
        "name": "departures",
        "iterations": iterations,
        "cluster": {
            "topology": "multi_datacenter",
            "gpus_per_host": 1,
            "nic_gbps": 100,
            "link_latency_us": LINK_US,
            "intra_host_latency_us": INTRA_US,
            "datacenters": [{"name": f"dc{i}", "topology": "star", "hosts": 1} for i in range(3)],
            "wan": {"bandwidth_gbps": WAN_GBPS, "rtt_ms": RTT_MS},
        },
        "workload": {"model": "synthetic", "gradient_mb": gradient_mb, "bucket_mb": 2 * gradient_mb, "compute_ms": 10},
        "faults": {"departures": departures},
        "policies": [policy],
        "simulation": {"collective_model": "pipelined", "network_model": "ideal", "trace": False},
    }
    if numerics is not None:
        cfg["numerics"] = numerics
    return cfg


HOP = 2 * INTRA_US * US + 2 * LINK_US * US + RTT_MS * 1e-3 / 2  # GPU -> host -> border -> WAN -> ... -> GPU
WAN = WAN_GBPS * GBPS


def averages(result: Any) -> Any:
    ops = result.ops[result.ops["rank"] == -1]
    return ops.assign(seconds=ops["finished_s"] - ops["launched_s"])


def test_rounds_without_a_datacenter_average_over_the_others_and_the_joiner_is_handed_the_model() -> None:
    """dc2 misses rounds 1 and 2 (steps 5-14): those averages are 2-rank rings, the others 3-rank rings, each
    the alpha-beta closed form; at step 15 rank 0 broadcasts the parameters to rank 2: n/W + one hop."""
    n = 100 * MB
    dc2 = {"datacenter": "dc2", "leave_step": H, "join_step": 3 * H}
    result = simulate(config({"name": "local_sgd", "period": H}, [dc2]))
    assert result.summary.iloc[0]["status"] == "ok"
    ops = averages(result)
    rings = ops[ops["kind"] == "AllReduce"]
    assert list(rings["step"]) == [4, 9, 14, 19]
    assert list(rings["group_size"]) == [3, 2, 2, 3]
    for size, seconds in zip(rings["group_size"], rings["seconds"]):
        expected = all_reduce_s(n, size, Network(WAN, ring_latency(size, HOP)))
        assert seconds == pytest.approx(expected, rel=1e-9)
    hand_over = ops[ops["kind"] == "Broadcast"]
    assert list(hand_over["step"]) == [15] and list(hand_over["group_size"]) == [2]
    assert float(hand_over["seconds"].iloc[0]) == pytest.approx(n / WAN + HOP, rel=1e-9)
    assert float(hand_over["wire_bytes"].iloc[0]) == n


def test_the_away_worker_has_no_rows_and_comes_back_as_the_others_start_its_step() -> None:
    result = simulate(config({"name": "local_sgd", "period": H}, [{"ranks": [2], "leave_step": H, "join_step": 3 * H}]))
    it = result.iterations
    away = it[it["rank"] == 2]["iteration"]
    assert sorted(away) == [*range(H), *range(3 * H, 4 * H)]
    starts = it[it["iteration"] == 3 * H].set_index("rank")["start_s"]
    assert starts[2] == starts[[0, 1]].min()
    # its utilization counts its own iterations' time, not the rounds it missed
    mine = it[it["rank"] == 2]
    expected = mine["compute_s"].sum() / mine["iteration_s"].sum()
    assert expected < 1.0
    per_rank = [g["compute_s"].sum() / g["iteration_s"].sum() for _, g in it.groupby("rank")]
    assert result.summary.iloc[0]["compute_utilization"] == pytest.approx(np.mean(per_rank), rel=1e-12)
    assert result.summary.iloc[0]["min_compute_utilization"] == pytest.approx(min(per_rank), rel=1e-12)


NUMERICS = {"dataset": "digits", "model": "mlp", "hidden": [16], "global_batch": 48, "eval_every": 5}


def test_a_worker_that_never_comes_back_is_frozen_where_it_left() -> None:
    """Its replica after 20 steps is what it was after step 9 of a run that stopped there."""
    policy = {"name": "local_sgd", "period": H}
    gone = simulate(config(policy, [{"ranks": [1], "leave_step": 2 * H}], numerics=NUMERICS))
    short = simulate(config(policy, [], iterations=2 * H, numerics=NUMERICS))
    np.testing.assert_array_equal(gone.runs[0].parameters[1], short.runs[0].parameters[1])
    assert not np.array_equal(gone.runs[0].parameters[0], short.runs[0].parameters[0])
    # the consensus is the live replicas' mean (0 and 2 hold the same model after the last average)
    np.testing.assert_allclose(gone.runs[0].consensus, gone.runs[0].parameters[0], rtol=0, atol=1e-7)


@pytest.mark.parametrize("momentum", [0.9, 0.0])
def test_a_diloco_joiner_gets_the_anchor_and_outer_momentum_so_every_replica_ends_alike(momentum: float) -> None:
    """After the last outer step every replica's parameters are the anchor; they agree only if the joiner
    was handed the anchor and the outer momentum (its own stale ones would step elsewhere)."""
    policy = {"name": "diloco", "period": H, "outer_momentum": momentum, "nesterov": momentum > 0}
    result = simulate(config(policy, [{"ranks": [2], "leave_step": H, "join_step": 3 * H}], numerics=NUMERICS))
    params = result.runs[0].parameters
    np.testing.assert_array_equal(params[2], params[0])
    np.testing.assert_array_equal(params[1], params[0])
    kinds = averages(result)["kind"].tolist()
    assert kinds.count("Broadcast") == (2 if momentum else 1)
    accuracy = result.accuracy
    scored = accuracy[(accuracy["model"] == "worker") & (accuracy["iteration"] == 10)]
    assert sorted(scored["worker"]) == [0, 1]  # step 9: dc2 was away, so it is not scored


def test_hand_over_ops_are_a_broadcast_from_the_lowest_rank_that_stayed() -> None:
    cluster, plan = prepare(parse_config(config({"name": "diloco", "period": H}, [])))
    from policies.membership import Absence
    from sim.engine.run import bind_policy

    cfg = parse_config(config({"name": "diloco", "period": H}, []))
    policy = bind_policy(cfg.policies[0], 0, cluster, plan, absences=(Absence((0, 2), H, 2 * H),))
    group = Group((1, 0, 2))
    assert list(policy.begin_step(1, 2 * H))[:2] == [
        Broadcast(group, plan.parameter_bytes, tensor="anchor", root=1),
        Broadcast(group, plan.parameter_bytes, state="outer", root=1),
    ]
    assert len(list(policy.begin_step(1, 2 * H))) == 2  # the source keeps its own parameters
    assert len(list(policy.begin_step(0, 2 * H))) == 3  # a joiner restarts from the anchor
    assert list(policy.begin_step(1, 2 * H + 1)) == []


@pytest.mark.parametrize(
    ("policy", "departure", "message"),
    [
        (
            {"name": "diloco", "period": H},
            {"ranks": [2], "leave_step": 7},
            r"faults\.departures\[0\]\.leave_step: 7 is not the first step of an outer round \(warmup_steps 0, "
            r"period 5: allowed 0, 5, 10, \.\.\.\) \(policies\[0\]\)",
        ),
        ({"name": "ring"}, {"ranks": [2], "leave_step": 5}, r"faults\.departures: policy 'ring' runs every rank"),
        ({"name": "streaming_diloco", "period": 10, "fragments": 1}, {"ranks": [2], "leave_step": 10}, "staggered"),
        ({"name": "local_sgd", "period": H}, {"ranks": [0, 1, 2], "leave_step": 5}, r"no worker is left at step 5"),
        (
            {"name": "local_sgd", "period": H},
            {"datacenter": "mars", "leave_step": 5},
            r"faults\.departures\[0\]\.datacenter: unknown datacenter 'mars'; allowed: dc0, dc1, dc2",
        ),
        ({"name": "local_sgd", "period": H}, {"ranks": [2], "datacenter": "dc1", "leave_step": 5}, "exactly one"),
    ],
)
def test_departures_a_policy_cannot_follow_are_refused_naming_the_field(
    policy: dict[str, Any], departure: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        prepare(parse_config(config(policy, [departure])))


def test_a_departure_that_splits_a_replica_is_refused() -> None:
    cfg = config({"name": "local_sgd", "period": H, "replica": "host"}, [{"ranks": [1], "leave_step": 5}])
    cfg["cluster"]["gpus_per_host"] = 2
    with pytest.raises(ConfigError, match=r"departures\[0\]: takes part of the replica of ranks \[0, 1\] away"):
        prepare(parse_config(cfg))


def test_a_departure_after_the_last_step_is_a_note_not_an_error() -> None:
    """A config run for fewer iterations (`--set iterations=2`) keeps working; the CLI notes what never acted."""
    cfg = parse_config(config({"name": "local_sgd", "period": H}, [{"ranks": [2], "leave_step": 20}]))
    assert simulate(cfg).summary.iloc[0]["status"] == "ok"
    assert late_faults(cfg, {}) == [
        "faults.departures[0].leave_step: 20 is past the run's last step (19); it never acted"
    ]
