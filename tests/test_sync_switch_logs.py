"""The Sync-Switch authors' logs reduced to one row per run (sim/experiments/sync_switch_logs.py)."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from sim.experiments import sync_switch_logs as logs

DOC = Path(__file__).resolve().parents[1] / "docs" / "sync_switch.md"
EXPORT = "Wall time,Step,Value\n1000.0,0,0.1\n1060.0,250,0.5\n1180.0,500,0.7\n"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("b5-a95-run3", ("b5-a95", 3)),
        ("b50_a50_run5", ("b50-a50", 5)),  # the other spelling of the same configuration
        ("b50-a50", ("b50-a50", 0)),
        ("12_88_2", ("12_88", 2)),
        ("bsp_4", ("bsp", 4)),
        ("bsp_run1", ("bsp", 1)),
        ("scaled_momentum-run2", ("scaled_momentum", 2)),
        ("sync_baseline_30lat_2strag", ("sync_baseline_30lat_2strag", 0)),
        ("fixed_sync_baseline_2", ("fixed_sync_baseline", 2)),
    ],
)
def test_a_run_directory_names_its_configuration_and_run(name: str, expected: tuple[str, int]) -> None:
    assert logs.configuration(name) == expected


def test_a_run_is_its_span_of_evaluations() -> None:
    run = logs.reduce_run(EXPORT)
    assert run == {"evaluations": 3, "steps": 500, "wall_min": 3.0, "final_accuracy": 0.7, "best_accuracy": 0.7}
    relative = "Wall time,Relative time (s),Step,Value\n1000,0,0,0.1\n,,,\n1300,300,900,0.6\n,,,\n"
    assert logs.reduce_run(relative) == {
        "evaluations": 2,
        "steps": 900,
        "wall_min": 5.0,
        "final_accuracy": 0.6,
        "best_accuracy": 0.6,
    }
    single = logs.reduce_run("Wall time,Step,Value\n1590120788.7,8000,0.9234\n")
    assert single["steps"] == 8000 and math.isnan(single["wall_min"])  # no start: no duration
    with pytest.raises(ValueError, match="not a TensorBoard accuracy export"):
        logs.reduce_run("time,step,loss\n1,2,3\n")


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repository_becomes_one_row_per_run_with_its_source(tmp_path: Path) -> None:
    for run in ("b5-a95-run1", "b5-a95-run2"):
        folder = tmp_path / "data" / "cifar10_res32" / "switch_exp" / run
        folder.mkdir(parents=True)
        (folder / "acc.csv").write_text(EXPORT)
        (folder / "loss.csv").write_text(EXPORT)  # not an accuracy export: left out
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "logs"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    runs = logs.read_repository(tmp_path, commit)
    assert runs["configuration"].tolist() == ["b5-a95", "b5-a95"] and runs["run"].tolist() == [1, 2]
    assert set(runs["experiment"]) == {"cifar10_res32/switch_exp"}
    assert runs["source"][0] == f"cake-lab/Sync-Switch@{commit}:data/cifar10_res32/switch_exp/b5-a95-run1/acc.csv"
    (row,) = logs.summary(runs).itertuples(index=False)
    assert (row.runs, row.timed, row.median_min, row.steps) == (2, 2, 3.0, 500)


def test_the_bundled_table_cites_every_run() -> None:
    runs = logs.bundled()
    assert list(runs.columns) == list(logs.COLUMNS) and len(runs) >= 150
    prefix = f"{logs.REPOSITORY}@{logs.COMMIT}:data/"
    assert runs["source"].str.startswith(prefix).all() and runs["source"].str.endswith("/acc.csv").all()
    assert (runs["wall_min"].dropna() >= 0).all() and (runs["steps"] > 0).all()
    assert runs["final_accuracy"].between(0, 1).all()


def test_the_documented_summary_is_the_bundled_tables() -> None:
    text = DOC.read_text()
    for line in logs.markdown(logs.summary(logs.bundled())).splitlines():
        assert line in text, line


RECORDS = (
    "Job name: c_5050_run1, SGD: BSP\nStarted training at:    2020-09-17 16:39:38.5\n"
    "Ended training at:    2020-09-17 18:10:43.5, 8000 steps\nFinal loss:    0.49Job name: c_5050_run1, SGD: ASP\n"
    "Started training at:    2020-09-17 18:13:52.5\nEnded training at:    2020-09-17 19:05:03.0, 72014 steps\n"
    "Job name: test, SGD: BSP\nJob name: c_bsp, SGD: BSP\nStarted training at:    2020-09-18 01:00:00.0\n"
    "Ended training at:    2020-09-18 02:00:00.0, 16000 steps\n"
)


def test_job_records_give_each_finished_phase_and_the_gap_a_switch_cost() -> None:
    phases = logs.reduce_job_records(RECORDS)  # a record glued to the previous line's loss still counts
    assert [(p["job"], p["mode"], p["steps"]) for p in phases] == [
        ("c_5050_run1", "BSP", 8000),
        ("c_5050_run1", "ASP", 72014),
        ("c_bsp", "BSP", 16000),  # "test" never started: left out
    ]
    gaps = logs.switch_gaps(pd.DataFrame(phases))
    assert gaps.to_dict() == {"c_5050_run1": pytest.approx(189.0)}  # one job of two phases


def test_the_bundled_job_records_cite_their_file() -> None:
    phases = logs.bundled(logs.PHASES)
    assert list(phases.columns) == list(logs.PHASE_COLUMNS) and len(phases) >= 100
    assert phases["source"].str.startswith(f"{logs.REPOSITORY}@{logs.COMMIT}:data/").all()
    gaps = logs.switch_gaps(phases)
    assert (gaps[gaps.index.str.startswith("cifar100_")] > 90).all()  # never shorter than main.py's 90 s wait


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_step_times_are_each_intervals_milliseconds_per_step_in_the_order_runs_started(tmp_path: Path) -> None:
    loss = {  # the clock every 100 steps, as the authors' loss.csv logs it (a blank line included)
        "late": "Wall time,Relative time (s),Step,Value\n2000,0,1,3.0\n2025,25,101,2.5\n,,,\n2055,55,201,2.1\n",
        "early": "Wall time,Relative time (s),Step,Value\n1000,0,1,3.0\n1070,70,101,2.5\n1140,140,201,2.1\n",
    }
    for run, text in loss.items():
        folder = tmp_path / "data" / "straggler" / run
        folder.mkdir(parents=True)
        (folder / "loss.csv").write_text(text)
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "logs"], check=True)
    commit = subprocess.run([*git[:3], "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    table = logs.step_times(tmp_path, commit=commit)
    assert table["run"].tolist() == ["early", "late"]
    assert table["started_utc"].tolist() == ["1970-01-01 00:16", "1970-01-01 00:33"]
    assert table["intervals"].tolist() == [2, 2]
    assert table["median_ms"].tolist() == [700.0, 275.0]  # (250 + 300) / 2
    assert table["mean_ms"].tolist() == [700.0, 275.0]
