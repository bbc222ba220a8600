"""What a run says it decided (sim/engine/decisions.py): ops.csv's algorithm, protocol and channels, and
decisions.csv's rows for the `auto` settings, the bucket plan and NCCL's picks.

The 64-GPU ring (issue 49): the pick ops.csv names is derived here by hand from the figures the tuner
documents (sim/nccl/protocols.py: NCCL's latency table and bandwidth factors; docs/fidelity.md), not
by calling the tuner.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from helpers import star, synthetic, two_tier

from sim.api import simulate
from sim.results.console import decisions_text
from sim.results.result import Result

A100_CHANNELS = 24  # NCCL's channels on a DGX A100 (sim/nccl/fabrics.py, as NCCL's logs print)
NIC_GBPS = 100.0
NIC_SHARE = 0.94  # of a NIC's line rate NCCL moves over InfiniBand (docs/fidelity.md)


def ring_64(nbytes: float) -> dict[str, Any]:
    """64 A100s, 8 per host on 8 hosts of one 100 Gb/s NIC each, one bucket of `nbytes`, under the
    default network model (NCCL's, with `auto` algorithm and protocol)."""
    cluster = star(8, NIC_GBPS, gpus_per_host=8, gpu="A100", link_latency_us=1.0)
    cfg = synthetic(cluster, [{"name": "ring"}], nbytes / 1e6, compute_ms=1.0)
    cfg["simulation"] = {"trace": False, "check_memory": False}  # network_model left to its default
    return cfg


def picked(result: Result) -> set[tuple[str, str, int]]:
    ops = result.ops[result.ops["rank"] == -1]
    return set(zip(ops["algorithm"], ops["protocol"], ops["channels"]))


def test_a_64_gpu_ring_of_a_4_kb_bucket_runs_as_nccls_tree_with_ll() -> None:
    """At 4 KiB the bytes take microseconds and the latency table decides. NCCL's figures (us: base,
    per NVLink step, per network step): tree LL 6.8, 0.6, 5.0; tree LL128 14, 1.25, 8.5; tree Simple
    8.4, 4.0, 14.0; ring LL 6.6, 1.0 (a ring step inside a host of a multi-host ring waits on the
    network proxy: at least 1 us), 2.7; ring LL128 14, 1.9, 4.0; ring Simple 8.4, 3.4, 14.0. A tree
    over 8 hosts of 8 GPUs takes 2 x 7 NVLink steps (up and down each host's chain) and 2 x 3 network
    steps (log2 8 levels); a ring all-reduce 2 x 63 steps, of which NCCL's tables count 2 x 7 between
    hosts. Every network step also pays the cables' latency, which only adds to the ring's lead."""
    tree = {"ll": 6.8 + 14 * 0.6 + 6 * 5.0, "ll128": 14 + 14 * 1.25 + 6 * 8.5, "simple": 8.4 + 14 * 4.0 + 6 * 14.0}
    ring = {"ll": 6.6 + 112 * 1.0 + 14 * 2.7, "ll128": 14 + 112 * 1.9 + 14 * 4.0, "simple": 8.4 + 112 * 3.4 + 14 * 14}
    # tree LL's bytes: n/2 per tree edge at 0.92 / 3.8 of the rate, times NCCL's size correction 0.7 at
    # 4 KiB (index log2(4096 / 64) = 6), over a NIC that carries the busiest host's 4 edges: < 5 us
    nbytes = 4096.0
    tree_ll_bytes_us = (nbytes / 2) / (0.92 / 3.8 * 0.7) * 4 / (NIC_GBPS / 8 * 1e9 * NIC_SHARE) * 1e6
    assert tree_ll_bytes_us < 5.0
    others = [v for k, v in tree.items() if k != "ll"] + list(ring.values())
    assert tree["ll"] + tree_ll_bytes_us < min(others)  # the hand derivation: tree/LL is the fastest
    assert picked(simulate(ring_64(nbytes))) == {("tree", "ll", A100_CHANNELS)}


def test_a_64_gpu_ring_of_a_1_gib_bucket_runs_as_nccls_ring_with_simple() -> None:
    """At 1 GiB the bandwidth terms decide. A ring hop between hosts carries 2 x 63/64 n at the NIC's
    rate with Simple (all of it), LL128 (0.92) or LL (0.5). NCCL's two trees carry n/2 on every edge at
    0.92 of the rate (the size correction is 1 from 512 MiB), and a binary tree over 8 hosts has a host
    with a parent and two children whose NIC, a leaf of the other tree, carries 4 edges: 4 x n / 1.84.
    Latencies stay below 5 ms (126 steps of at most 14 us x 1.4, NCCL's factor once channels fill)."""
    nbytes = float(2**30)
    nic = NIC_GBPS / 8 * 1e9 * NIC_SHARE
    ring_simple = 2 * 63 / 64 * nbytes / nic
    assert ring_simple + 5e-3 < 2 * 63 / 64 * nbytes / (0.92 * nic)  # ring LL128 (and LL, slower still)
    assert ring_simple + 5e-3 < 4 * (nbytes / 2) / (0.92 * nic)  # the trees, with Simple (others slower)
    assert picked(simulate(ring_64(nbytes))) == {("ring", "simple", A100_CHANNELS)}


def test_the_decisions_say_what_nccl_picked_for_which_sizes_and_why() -> None:
    result = simulate(ring_64(4096.0))
    rows = result.decisions[result.decisions["setting"].str.startswith("nccl.")]
    assert list(rows["setting"]) == ["nccl.all_reduce (64 ranks on 8 hosts, 4.1 kB)"]
    assert list(rows["value"]) == [f"tree/ll, {A100_CHANNELS} channels"]
    assert rows["why"].iloc[0].startswith("fastest by NCCL's tuner") and "next best tree/ll128" in rows["why"].iloc[0]


def test_a_forced_algorithm_says_so() -> None:
    cfg = ring_64(4096.0)
    cfg["simulation"]["nccl"] = {"algorithm": "ring"}
    result = simulate(cfg)
    assert picked(result) == {("ring", "ll", A100_CHANNELS)}  # ring LL: the cheapest ring in the table above
    why = result.decisions.set_index("setting").filter(like="nccl.", axis=0)["why"].iloc[0]
    assert why.startswith("forced by simulation.nccl.algorithm ring")


def test_ops_priced_without_nccl_say_how_they_ran() -> None:
    """Under the ideal model a collective names the pattern it ran as, with no protocol and no channels;
    a parameter server's pushes and pulls name none."""
    result = simulate(synthetic(star(4), [{"name": "ring"}, {"name": "ps"}], 8.0, iterations=2))
    ops = result.ops
    ring = ops[ops["policy"] == "ring"]
    assert (ring["algorithm"] == "ring").all() and (ring["protocol"] == "").all() and (ring["channels"] == 0).all()
    ps = ops[ops["policy"] == "ps"]
    assert len(ps) and (ps["algorithm"] == "").all() and (ps["channels"] == 0).all()
    assert not result.decisions["setting"].str.startswith("nccl.").any()  # nothing priced by NCCL
    # ps's shards: auto, colocated: one per worker host, 4 of them
    shards = result.decisions.set_index(["policy", "setting"]).loc[("ps", "shards")]
    assert (shards["value"], shards["why"]) == ("4", "auto: one per candidate host (4 colocated hosts)")


def ds_sync_run(uplink_gbps: float) -> Result:
    """DS-Sync on 2 racks of 2 one-GPU hosts with 25 Gb/s NICs: 50 Gb/s of NICs per rack."""
    cfg = synthetic(two_tier(2, 2, uplink_gbps), [{"name": "ds_sync"}, {"name": "hierarchical"}], 4.0)
    return simulate(cfg)


def test_ds_syncs_automatic_schedule_says_when_it_changes_its_mind() -> None:
    """Over a 25 Gb/s uplink the racks are oversubscribed 2:1 (50 / 25): one island per rack. Over a
    50 Gb/s uplink, 1:1: one island of all 4 ranks."""
    low = ds_sync_run(25.0).decisions.set_index(["policy", "setting"])
    high = ds_sync_run(50.0).decisions.set_index(["policy", "setting"])
    assert low.loc[("ds_sync", "schedule"), "value"].startswith("2 rack islands of 2 ranks")
    assert "oversubscribed (the most: 2:1" in low.loc[("ds_sync", "schedule"), "why"]
    assert high.loc[("ds_sync", "schedule"), "value"] == "one island of 4 ranks"
    assert "no uplink oversubscribed (the most: 1:1" in high.loc[("ds_sync", "schedule"), "why"]
    assert (low.loc[("ds_sync", "group_size"), "value"], high.loc[("ds_sync", "group_size"), "value"]) == ("2", "4")
    # hierarchical's level: auto goes to racks when every host holds one GPU
    assert low.loc[("hierarchical", "level"), "value"] == "rack"


def test_the_bucket_plan_and_gradient_type_are_decisions_too() -> None:
    """20 MB of gradients in 4 equal layers with bucket_mb 10: a bucket closes once it holds 10 MB,
    so two buckets of 10 MB."""
    cfg = synthetic(star(2), [{"name": "ring"}], 20.0, bucket_mb=10.0, layers=4)
    rows = simulate(cfg).decisions.set_index("setting")
    assert rows.loc["buckets", "value"] == "2 buckets: 10 MB largest, 10 MB smallest"
    assert rows.loc["workload.gradient_precision", "value"] == "fp32"


def test_decisions_are_written_and_read_back(tmp_path: Path) -> None:
    result = ds_sync_run(25.0)
    result.write(tmp_path, plot=False)
    back = Result.read(tmp_path)
    pd.testing.assert_frame_equal(back.decisions, result.decisions)
    (tmp_path / "decisions.csv").unlink()  # a folder written before decisions.csv existed
    assert Result.read(tmp_path).decisions.empty


def test_the_console_prints_shared_choices_once_and_caps_the_lines() -> None:
    table = pd.DataFrame(
        [("a", "buckets", "1", "w"), ("b", "buckets", "1", "w"), ("a", "level", "rack", "w")],
        columns=["policy", "setting", "value", "why"],
    )
    assert decisions_text(table).splitlines()[1:] == ["  every policy: buckets: 1", "  a: level: rack"]
    assert decisions_text(table, limit=1).splitlines()[-1] == "  ... 1 more in decisions.csv"
    assert decisions_text(table.iloc[:0]) == ""


@pytest.mark.parametrize("rows", [0, 13])
def test_op_rows_of_a_backend_without_the_last_fields_get_empty_ones(rows: int) -> None:
    """The real backend records 14 fields per op; older rows 13: the rest read as empty (0 channels)."""
    from sim.engine.run import PolicyRun
    from sim.results.tables import OP_FIELDS, ops_frame

    row = (0, -1, "AllReduce", 0, 2, -1, 1, 8.0, 0.0, 0.0, 1.0, 8.0, float("nan"), "", "", "", 0)
    run = PolicyRun("p", "p", ops=[row[: len(OP_FIELDS) - 3 - (1 if rows else 0)]])
    frame = ops_frame([run])
    assert (frame["algorithm"].iloc[0], frame["protocol"].iloc[0], frame["channels"].iloc[0]) == ("", "", 0)
