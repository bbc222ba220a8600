"""ASP and SSP: shared update budgets, staleness, the SSP bound, and the slow-worker comparison."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import star, synthetic

from sim.api import simulate
from sim.config import parse_config

CONFIGS = Path(__file__).parent.parent / "configs"


def two_workers(policy: dict, iterations: int = 200) -> dict:
    """Worker 0 iterates every 10 ms, worker 1 every 25 ms; 1 KB updates through one dedicated
    shard, so communication takes microseconds and periods are set by compute."""
    cfg = synthetic(
        star(2, server_hosts=1), [{**policy, "placement": "dedicated"}], 0.001, compute_ms=10.0, iterations=iterations
    )
    cfg["faults"] = {"slow_workers": [{"ranks": [1], "compute_factor": 2.5}]}
    return cfg


def test_asp_shares_its_update_budget_by_speed() -> None:
    result = simulate(two_workers({"name": "asp"}))
    updates = result.iterations.groupby("rank").size()
    assert updates.sum() == 2 * 200  # iterations x workers, shared
    assert updates[0] / updates[1] == pytest.approx(2.5, rel=0.02)  # as fast as it is
    assert result.summary["updates"].iloc[0] == 400 and result.summary["iterations"].iloc[0] == updates[1]


def test_asp_staleness_is_what_the_update_rates_predict() -> None:
    """Between reading a bucket and pushing it (one iteration), a worker's update is overtaken by
    every update the others push in that time: E[staleness of r] = sum over others of T_r / T_o.
    Worker 0: 10/25 = 0.4 (never more than 1); worker 1: 25/10 = 2.5 (2 or 3, except in the very
    last update, when the budget has run out and the fast worker stopped)."""
    stale = simulate(two_workers({"name": "asp"})).staleness
    by_rank = {r: rows.set_index("staleness")["updates"] for r, rows in stale.groupby("rank")}
    for rank, expected, allowed in ((0, 0.4, {0, 1}), (1, 2.5, {2, 3})):
        counts = by_rank[rank]
        assert (counts.index * counts).sum() / counts.sum() == pytest.approx(expected, abs=0.03), rank
        assert counts[~counts.index.isin(allowed)].sum() <= 1, rank


@pytest.mark.parametrize("bound", [0, 1, 3])
def test_ssp_never_starts_a_step_beyond_its_bound(bound: int) -> None:
    """Start of step c requires every worker to have finished c - s iterations (steps 0..c-s-1)."""
    it = simulate(two_workers({"name": "ssp", "staleness": bound}, iterations=40)).iterations
    finished = sorted(it["end_s"].groupby(it["rank"]).apply(list).items())
    for row in it.itertuples():
        done_by_slowest = min(sum(end <= row.begin_end_s + 1e-12 for end in ends) for _, ends in finished)
        assert done_by_slowest >= row.iteration - bound
    if bound == 0:  # lockstep: the fast worker waits out the slow one's extra 15 ms every step
        fast = it[(it["rank"] == 0) & (it["iteration"] > 0)]
        assert fast["wait_s"].mean() == pytest.approx(0.015, rel=0.01)


def test_one_slow_worker_bsp_ssp_asp() -> None:
    """16 workers, one twice as slow (the bundled slow_worker_async config, 20 iterations).
    BSP runs at the slow worker's pace; ASP at nearly everyone's own: at most
    (15 + 0.5) / 16 x 2 = 1.94x BSP's throughput, less the communication it cannot hide.
    SSP lies between, rising with s, and s = 0 is BSP through the parameter server."""
    data = yaml.safe_load((CONFIGS / "slow_worker_async.yaml").read_text())
    data["iterations"] = 20
    tput = simulate(parse_config(data)).summary.set_index("policy")["throughput_samples_s"]
    ssp = [tput[f"ssp_s{s}"] for s in (0, 1, 2, 4, 8)]
    assert tput["asp"] >= 1.7 * tput["ps"]
    assert tput["asp"] <= 1.94 * tput["ps"]
    assert ssp[0] == pytest.approx(tput["ps"], rel=0.01)
    assert all(a < b for a, b in zip(ssp, ssp[1:]))  # strictly rising with s
    assert tput["ps"] * 0.99 <= min(ssp) and max(ssp) <= tput["asp"]


def test_staleness_table_counts_every_applied_update() -> None:
    """The table is a histogram per (rank, staleness) of the raw (rank, staleness) pairs, sorted by
    both; the summary's mean and max come from the same pairs."""
    import pandas as pd

    result = simulate(two_workers({"name": "asp"}, iterations=60))
    pairs = pd.DataFrame(result.runs[0].staleness, columns=["rank", "staleness"])
    expected = pairs.groupby(["rank", "staleness"]).size().rename("updates").reset_index()
    table = result.staleness.drop(columns="policy").reset_index(drop=True)
    pd.testing.assert_frame_equal(table, expected, check_dtype=False)
    assert len(pairs) == result.staleness["updates"].sum() == 2 * 60  # every update of the shared budget
    row = result.summary.iloc[0]
    assert row["mean_staleness"] == pytest.approx(pairs["staleness"].mean())
    assert row["max_staleness"] == pairs["staleness"].max()
