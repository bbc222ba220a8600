"""Numerics mode end to end: config errors, accuracy tables and files, determinism, timing unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import star, synthetic, two_tier  # noqa: E402

from sim.api import simulate  # noqa: E402
from sim.config import parse_config  # noqa: E402
from sim.errors import ConfigError  # noqa: E402


def small(numerics: dict[str, Any] | None = None, policies: list[dict[str, Any]] | None = None) -> dict:
    cfg = synthetic(star(4), policies or [{"name": "ring"}, {"name": "asp"}], 20.0, compute_ms=10.0, iterations=12)
    cfg["workload"]["compute_jitter"] = 0.05
    cfg["numerics"] = {
        "model": "logreg",
        "global_batch": 32,
        "eval_every": 4,
        "target_accuracy": 0.5,
        **(numerics or {}),
    }
    return cfg


def test_bad_numerics_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"numerics\.model: cnn needs dataset: digits"):
        parse_config(small({"model": "cnn", "dataset": "synthetic"}))
    with pytest.raises(ConfigError, match=r"numerics\.optimizer\.name.*sgd.*adam"):
        parse_config(small({"optimizer": {"name": "rmsprop"}}))
    with pytest.raises(ConfigError, match=r"numerics\.global_batch: 30 does not split evenly over 4 workers"):
        simulate(small({"global_batch": 30}))


def test_accuracy_rows_summary_and_files(tmp_path: Path) -> None:
    result = simulate(small())
    acc = result.accuracy
    consensus = acc[acc["model"] == "consensus"]
    assert list(consensus[consensus["policy"] == "ring"]["iteration"]) == [0.0, 4.0, 8.0, 12.0]
    assert set(acc[acc["model"] == "worker"]["worker"]) == {0, 1, 2, 3}
    ring = consensus[consensus["policy"] == "ring"]
    assert ring["time_s"].is_monotonic_increasing and ring["time_s"].iloc[0] == 0.0
    # the end of training is the end of the simulation
    assert ring["time_s"].iloc[-1] == pytest.approx(result.summary.set_index("policy").loc["ring", "sim_time_s"])
    summary = result.summary.set_index("policy")
    assert summary.loc["ring", "final_accuracy"] == ring["accuracy"].iloc[-1]
    hit = ring[ring["accuracy"] >= 0.5].iloc[0]
    assert summary.loc["ring", "time_to_target_s"] == hit["time_s"]
    out = result.write(tmp_path)
    assert (out / "accuracy.png").stat().st_size > 0
    written = pd.read_csv(out / "accuracy.csv")
    assert list(written.columns) == [
        "policy",
        "iteration",
        "time_s",
        "model",
        "scored",
        "worker",
        "train_loss",
        "loss",
        "accuracy",
    ]
    consensus_rows = written[written["worker"] < 0]
    assert dict(zip(consensus_rows["policy"], consensus_rows["scored"])) == {"ring": "mean", "asp": "servers"}
    assert set(written[written["worker"] >= 0]["scored"]) == {"replica"}
    assert "time_to_target_s" in pd.read_csv(out / "summary.csv").columns


def test_same_seed_same_accuracy_and_timing_matches_a_timing_only_run() -> None:
    first, second = simulate(small()), simulate(small())
    pd.testing.assert_frame_equal(first.accuracy, second.accuracy)
    timing = small()
    del timing["numerics"]
    plain = simulate(timing)
    pd.testing.assert_frame_equal(first.iterations, plain.iterations)  # numerics never moves the clock
    assert "final_accuracy" not in plain.summary.columns and plain.accuracy is None


def test_disabled_section_runs_timing_only() -> None:
    result = simulate(small({"enabled": False}))
    assert result.accuracy is None and "final_accuracy" not in result.summary.columns


def test_a_synchronous_run_is_evaluated_as_each_replica_stood_after_its_kth_iteration() -> None:
    """DS-Sync on 2 racks x 1 host x 2 GPUs: on alternate steps its groups stay inside a host and
    finish long before the cross-rack ones, so when the last worker completes iteration 10 the
    others are already inside iteration 11. Row 10 of a 20-iteration run must still be the state a
    10-iteration run ends in (replicas, consensus and train losses), as the real backend reports it."""
    cluster = two_tier(2, 1, uplink_gbps=0.1, nic_gbps=0.2, gpus_per_host=2)

    def run(iterations: int) -> pd.DataFrame:
        cfg = synthetic(cluster, [{"name": "ds_sync"}], 1.0, compute_ms=5.0, iterations=iterations)
        cfg["numerics"] = {"model": "mlp", "hidden": [32], "global_batch": 64, "eval_every": 10}
        return simulate(cfg).accuracy.set_index(["model", "worker"])

    long, short = run(20), run(10)
    ends = simulate(
        {
            **synthetic(cluster, [{"name": "ds_sync"}], 1.0, compute_ms=5.0, iterations=20),
            "numerics": {"model": "mlp", "hidden": [32], "global_batch": 64},
        }
    ).iterations.groupby("iteration")["end_s"]
    assert (ends.max() - ends.min()).iloc[9] > 0.05  # iteration 10 (index 9): workers finish far apart
    at10, final10 = long[long["iteration"] == 10], short[short["iteration"] == 10]
    assert len(at10) == 5 and at10.index.equals(final10.index)
    for column in ("train_loss", "loss", "accuracy"):
        pd.testing.assert_series_equal(at10[column], final10[column], rtol=1e-6, atol=1e-7)
