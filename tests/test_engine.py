"""The engine: determinism, op validation, rendezvous errors, deadlock reports, clocks and servers."""

from __future__ import annotations

import re
from pathlib import Path

import custom_policies
import pytest
from helpers import star, synthetic, two_tier

from sim.api import simulate

QUICKSTART = Path(__file__).parent.parent / "configs" / "quickstart.yaml"


def test_same_seed_same_files_other_seed_other_numbers(tmp_path: Path) -> None:
    """Everything seeded (jitter, random stragglers, ECMP, placement) gives byte-identical files."""
    cfg = synthetic(
        two_tier(2, 4, 25.0, placement="random", core_switches=2),
        [{"name": "ring"}, {"name": "ps", "shards": 2}, {"name": "asp"}, {"name": "ds_sync"}],
        40,
        compute_ms=30.0,
        iterations=5,
        bucket_mb=10,
        layers=8,
        jitter=0.1,
        seed=11,
    )
    cfg["simulation"]["trace"] = True
    cfg["faults"] = {
        "stragglers": [{"ranks": [0, 1, 2, 3], "count": 2, "delay_ms": 2.0, "every_s": 0.05, "duration_s": 0.02}]
    }
    cfg["background"] = [{"uplinks": "all", "fraction": 0.2, "on_s": 0.03, "off_s": 0.02}]
    simulate(cfg).write(tmp_path / "a", plot=False)
    simulate(cfg).write(tmp_path / "b", plot=False)
    tables = ("summary", "iterations", "ops", "links", "utilization", "staleness", "faults")
    for name in (*(f"{t}.csv" for t in tables), "config.yaml", "trace.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    cfg["seed"] = 12
    simulate(cfg).write(tmp_path / "c", plot=False)
    assert (tmp_path / "a" / "iterations.csv").read_bytes() != (tmp_path / "c" / "iterations.csv").read_bytes()


def test_every_policy_sees_the_same_compute() -> None:
    """Jitter is drawn once per config: the compute column is identical across policies."""
    cfg = synthetic(star(4), [{"name": "no_sync"}, {"name": "ring"}], 40, compute_ms=30.0, iterations=4, jitter=0.2)
    it = simulate(cfg).iterations
    a = it[it["policy"] == "no_sync"]["compute_s"].to_numpy()
    b = it[it["policy"] == "ring"]["compute_s"].to_numpy()
    assert a.std() > 0 and a == pytest.approx(b, rel=1e-9)


@pytest.mark.parametrize(
    "policy, message",
    [
        ("YieldsGarbage", r"yielded 42 on rank \d+ at step 2: not an op from policies.ops"),
        ("ForeignGroup", r"on rank (\d+) at step 0: rank \1 is not a member of the group"),
        ("NegativeBytes", r"on rank \d+ at step 0: nbytes must be a finite number >= 0"),
        ("MismatchedSizes", r"but another member enqueued AllReduce"),
    ],
)
def test_bad_ops_fail_naming_policy_and_op(policy: str, message: str) -> None:
    result = simulate(synthetic(star(4), [{"name": f"custom_policies:{policy}"}], 10, iterations=4))
    label = getattr(custom_policies, policy).name  # a plug-in's rows carry its class's name
    error = result.errors[label]
    assert error.startswith(f"PolicyError: policy '{label}'") and re.search(message, error)
    assert "AllReduce(" in error or "42" in error


def test_failure_keeps_rows_computed_so_far() -> None:
    result = simulate(synthetic(star(4), [{"name": "custom_policies:YieldsGarbage"}], 10, compute_ms=5.0, iterations=6))
    assert sorted(result.iterations["iteration"].unique()) == [0, 1]
    assert result.summary["status"].iloc[0].startswith("failed: PolicyError")
    assert result.summary["iterations"].iloc[0] == 2


def test_deadlock_is_reported_with_the_half_entered_collective() -> None:
    result = simulate(synthetic(star(3), [{"name": "custom_policies:HalfTheRanks"}], 10, iterations=2))
    error = result.errors["half_the_ranks"]
    assert error.startswith("DeadlockError: policy 'half_the_ranks': 1 of 3 workers wait forever")
    assert "ranks [1, 2] never reached it" in error


def test_async_server_and_clock_bound() -> None:
    """One worker 3x slower; with a staleness bound of 1 the others may run at most 2 steps ahead."""
    cfg = synthetic(star(3), [{"name": "custom_policies:ClockedAsyncPS"}], 1, compute_ms=10.0, iterations=6)
    cfg["workload"]["compute_jitter"] = 0.0
    result = simulate(cfg)
    assert not result.errors
    it = result.iterations
    ends = it.pivot(index="iteration", columns="rank", values="end_s")
    starts = it.pivot(index="iteration", columns="rank", values="start_s")
    # rank r may start step c only when every rank has finished c - 2 (WaitForClock(c - 1) is
    # "finished at least c - 1 iterations", i.e. steps 0..c-2 done)
    for c in range(2, 6):
        assert (starts.loc[c] >= ends.loc[c - 2].max() - 1e-12).all()
    # pushes are applied one at a time at 1 ms/MB: 3 workers x 6 steps x 1 MB each
    pushes = result.ops[result.ops["kind"] == "push"]
    assert len(pushes) == 18 and (pushes["nbytes"] == 1e6).all()
    waits = result.ops[result.ops["kind"] == "wait_clock"]
    assert len(waits) == 18


def test_compiled_and_numpy_solvers_give_identical_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where the network switches to the compiled solver must not change any result, to the bit."""
    import sim.network.compiled
    import sim.network.flows

    if sim.network.compiled.progressive_filling() is None:
        pytest.skip("numba is not available")
    cfg = synthetic(
        two_tier(2, 4, 12.5),
        [{"name": "ps"}, {"name": "ds_sync"}, {"name": "asp"}],
        40,
        compute_ms=20.0,
        iterations=6,
        bucket_mb=10,
        layers=8,
        jitter=0.1,
        seed=5,
    )
    cfg["background"] = [
        {"uplinks": "all", "fraction": 0.3},
        {"hosts": ["h0", "h5"], "gbps": 5, "on_s": 0.02, "off_s": 0.03},
    ]
    for name, after in (("numpy", 10**9), ("compiled", 0)):
        monkeypatch.setattr(sim.network.flows, "COMPILE_AFTER", after)
        simulate(cfg).write(tmp_path / name, plot=False, trace=False)
    for table in ("summary", "iterations", "ops", "links", "utilization", "staleness", "faults"):
        assert (tmp_path / "numpy" / f"{table}.csv").read_bytes() == (
            tmp_path / "compiled" / f"{table}.csv"
        ).read_bytes()


def test_forward_buckets_run_first_layers_first() -> None:
    """Forward visits the buckets in the reverse of backward's order. Three 10 MB layers with 15 MB
    buckets: backward closes bucket 0 = layers 2 and 1 (20 MB, the first to reach 15 MB), then bucket 1
    = layer 0 (10 MB). Forward needs layer 0 first, so a PS worker's reads in step 1 are 10 MB, then
    20 MB, each issued once the one before it arrived (in turn)."""
    cfg = synthetic(star(2, server_hosts=1), [{"name": "ps", "hosts": ["ps0"]}], 30.0, compute_ms=30.0, layers=3)
    cfg["iterations"] = 2
    cfg["workload"]["bucket_mb"] = 15.0
    ops = simulate(cfg).ops
    for rank in (0, 1):
        pulls = ops[(ops["step"] == 1) & (ops["rank"] == rank) & (ops["kind"] == "pull")].sort_values("issued_s")
        assert list(pulls["nbytes"]) == [10e6, 20e6], "forward buckets: read in the wrong order"
        assert pulls["issued_s"].iloc[1] == pytest.approx(pulls["finished_s"].iloc[0], rel=1e-12)
