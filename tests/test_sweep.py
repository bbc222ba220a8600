"""Sweeps: expanding a `sweep:` section into points, running them resumably, one tidy table."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from helpers import synthetic, two_tier

from sim.cli import main
from sim.errors import ConfigError
from sim.experiments.sweep import expand, load_sweep
from sim.experiments.sweep_points import POINT_FILE, point_folder
from sim.experiments.sweep_runner import DECISIONS_FILE, TABLE_FILE, run_sweep


def base(iterations: int = 3) -> dict[str, Any]:
    """8 workers in 2 racks, 2 policies, a few iterations: a point takes well under a second."""
    cfg = synthetic(two_tier(2, 4, 25.0), [{"name": "ring"}, {"name": "hierarchical"}], 20.0, compute_ms=5.0)
    return {**cfg, "iterations": iterations, "name": "tiny"}


def sweep_file(tmp_path: Path, sweep: dict[str, Any], **change: Any) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({**base(), **change, "sweep": sweep}))
    return path


def test_grid_zip_and_seeds_expand_in_order() -> None:
    spec = {
        "grid": {"cluster.uplink_gbps": [10, 25]},
        "zip": [{"workload.gradient_mb": [10.0, 40.0, 80.0], "workload.compute_ms": [1.0, 2.0, 4.0]}],
        "seeds": [0, 7],
    }
    sweep = expand({**base(), "sweep": spec})
    assert sweep.axes == ["cluster.uplink_gbps", "workload.gradient_mb", "workload.compute_ms", "seed"]
    assert len(sweep.points) == 2 * 3 * 2 and not sweep.bad
    first, last = sweep.points[0], sweep.points[-1]
    assert first.coords == {
        "cluster.uplink_gbps": 10,
        "workload.gradient_mb": 10.0,
        "workload.compute_ms": 1.0,
        "seed": 0,
    }
    assert last.coords == {
        "cluster.uplink_gbps": 25,
        "workload.gradient_mb": 80.0,
        "workload.compute_ms": 4.0,
        "seed": 7,
    }
    assert last.config is not None and last.config.seed == 7 and last.config.cluster.uplink_gbps == 25  # type: ignore[union-attr]
    assert len({p.key for p in sweep.points}) == len(sweep.points)  # every resolved config differs
    again = expand({**base(), "sweep": spec})
    assert [p.key for p in again.points] == [p.key for p in sweep.points]  # keys are stable


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"grid": {"cluster.uplink_gbps": []}}, r"sweep.grid.cluster.uplink_gbps: expected a non-empty list"),
        (
            {"zip": [{"iterations": [1, 2], "seed": [1]}]},
            r"sweep.zip\[0\]: .* need equal lengths \(iterations: 2, seed: 1\)",
        ),
        ({"grid": {"seed": [1]}, "seeds": [1]}, "seed is already an axis"),
        ({"seeds": [1, 1]}, "lists a seed twice"),
        ({"seeds": [-1]}, "integers >= 0"),
        ({"grid": {"cluster..x": [1]}}, "not a config path"),
        ({"grids": {}}, "unknown key"),
        ({}, "nothing to sweep"),
    ],
)
def test_a_bad_sweep_section_names_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        expand({**base(), "sweep": spec})


@pytest.mark.parametrize(
    ("spec", "line"),
    [
        (
            {"grid": {"cluster.uplink_gbps": [25, 25]}},
            "sweep.grid.cluster.uplink_gbps: value 1 (25) repeats value 0 (25); list each value once",
        ),
        (  # YAML's 1 and 1.0 are one setting: the config reads both as 1.0
            {"grid": {"cluster.uplink_gbps": [10, 1, 1.0]}},
            "sweep.grid.cluster.uplink_gbps: value 2 (1.0) repeats value 1 (1); list each value once",
        ),
        (
            {"zip": [{"cluster.uplink_gbps": [25, 50, 25.0], "iterations": [2, 2, 2]}]},
            "sweep.zip[0]: row 2 (cluster.uplink_gbps=25.0, iterations=2) repeats row 0; list each combination once",
        ),
    ],
)
def test_a_repeated_axis_value_is_refused_naming_the_axis(spec: dict[str, Any], line: str) -> None:
    """Equal values make one point twice: one results folder (the config's key) and two rows in sweep.csv."""
    with pytest.raises(ConfigError) as caught:
        expand({**base(), "sweep": spec})
    (only,) = str(caught.value).splitlines()
    assert only.startswith(line), only


def test_a_zip_column_may_repeat_a_value_when_rows_differ() -> None:
    spec = {"zip": [{"cluster.uplink_gbps": [25, 25], "iterations": [2, 3]}]}
    assert len(expand({**base(), "sweep": spec}).points) == 2


def test_values_that_validate_to_one_config_are_refused_naming_both_points() -> None:
    """numerics.model is read case-blind ('MLP' is mlp): different values on the axis, one config."""
    data = {**base(), "numerics": {"model": "mlp", "global_batch": 64}}
    with pytest.raises(ConfigError) as caught:
        expand({**data, "sweep": {"grid": {"numerics.model": ["mlp", "logreg", "MLP"]}}})
    assert str(caught.value) == (
        "sweep: point 2 (numerics.model='MLP') resolves to the same config as point 0 (numerics.model='mlp'); "
        "drop one of the values"
    )


def test_every_bad_axis_is_reported_in_one_pass() -> None:
    spec = {"grid": {"cluster..x": [1], "policies[0]x": [2], "workload.batch_size": 3}, "seeds": [1, 1]}
    with pytest.raises(ConfigError) as caught:
        expand({**base(), "sweep": spec})
    lines = str(caught.value).splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        ["sweep.grid", "'cluster..x'"],
        ["sweep.grid", "'policies[0]x'"],
        ["sweep.grid.workload.batch_size", "expected a non-empty list of values, got 3"],
        ["sweep.seeds", "[1, 1] lists a seed twice"],
    ]


def test_a_point_reports_every_axis_path_that_names_nothing_and_every_bad_value() -> None:
    spec = {"grid": {"policies[5].x": [1], "policies[9].group_size": [2], "cluster.uplink_gbps": [-5]}}
    (point,) = expand({**base(), "sweep": spec}).bad
    assert str(point.error).split(" / ") == [
        "policies[5].x: policies has 2 item(s) (indices 0-1)",
        "policies[9].group_size: policies has 2 item(s) (indices 0-1)",
        "cluster.uplink_gbps: Input should be greater than or equal to 0.001 (got -5)",
    ]


def test_a_point_that_does_not_validate_keeps_its_coordinates_and_field() -> None:
    sweep = expand({**base(), "sweep": {"grid": {"cluster.uplink_gbps": [10, -5]}}})
    assert [p.index for p in sweep.bad] == [1]
    assert "cluster.uplink_gbps: Input should be greater than or equal to" in str(sweep.bad[0].error)
    assert sweep.bad[0].label() == "cluster.uplink_gbps=-5"


def test_a_billion_point_sweep_is_refused_from_its_axis_lengths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    axes = {
        "cluster.uplink_gbps": list(range(1, 1001)),
        "workload.compute_ms": [float(v) for v in range(1, 1001)],
        "workload.gradient_mb": [float(v) for v in range(1, 1001)],
    }
    start = time.perf_counter()
    with pytest.raises(
        ConfigError, match=r"^sweep: 1,000 x 1,000 x 1,000 = 1,000,000,000 points; a sweep has at most 100,000$"
    ):
        expand({**base(), "sweep": {"grid": axes}})
    assert main(["check", str(sweep_file(tmp_path, {"grid": axes}))]) == 2
    assert "1,000,000,000 points; a sweep has at most 100,000" in capsys.readouterr().err
    # a bound that only tells "at once" from "never" (expanding 10^9 points first takes days at a few ms
    # each), so load cannot cross it; benchmarks/check_scale.py times it
    assert time.perf_counter() - start < 120.0


def test_progress_is_told_the_count_before_any_point_is_built() -> None:
    seen: list[Any] = []

    def progress(points: Any, total: int) -> Any:
        seen.append(f"total {total}")
        for index, coords in points:
            seen.append(index)
            yield index, coords

    sweep = expand({**base(), "sweep": {"grid": {"cluster.uplink_gbps": [10, 25]}, "seeds": [0, 1]}}, progress)
    assert seen == ["total 4", 0, 1, 2, 3] and [p.index for p in sweep.points] == [0, 1, 2, 3] and not sweep.bad


def test_check_says_what_it_is_validating_before_a_long_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli.common import progress

    assert list(progress("validating", at_least=3)(iter([1, 2]), 2)) == [1, 2]
    assert capsys.readouterr().err == ""  # a short sweep says nothing more
    assert list(progress("validating", at_least=3)(iter([1, 2, 3]), 3)) == [1, 2, 3]
    assert capsys.readouterr().err == "validating 3 points...\n"  # stderr is no terminal here: one line, no bar


def test_check_of_a_100k_point_sweep_validates_every_axis_setting_and_a_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not every point of a large sweep: each axis setting once, the last point and a seeded sample (the
    wall time, about a second, is printed by benchmarks/check_scale.py)."""
    import sim.config
    import sim.estimate.cost
    import sim.experiments.sweep

    counts = {"validated": 0, "estimated": 0}

    def counting(name: str, real: Any, most: int) -> Any:
        def wrapped(*args: Any) -> Any:
            counts[name] += 1
            assert counts[name] <= most, f"check {name} more than {most} points"
            return real(*args)

        return wrapped

    monkeypatch.setattr(sim.experiments.sweep, "parse_config", counting("validated", sim.config.parse_config, 2_000))
    monkeypatch.setattr(sim.estimate.cost, "estimate", counting("estimated", sim.estimate.cost.estimate, 100))
    uplinks = [float(v) for v in range(1, 317)]
    axes = {"cluster.uplink_gbps": uplinks, "workload.compute_ms": [float(v) for v in range(1, 317)]}
    assert main(["check", str(sweep_file(tmp_path, {"grid": axes}))]) == 0
    out = capsys.readouterr().out
    assert (
        f"sweep of 99,856 points over cluster.uplink_gbps, workload.compute_ms; {counts['validated']:,} validated"
        in out
    )
    assert "(every setting of each axis beside the first point's others, the last point and a seeded sample)" in out
    assert f"note: the other {99_856 - counts['validated']:,} points are validated when `syncsim sweep`" in out
    assert counts["estimated"] == 100
    uplinks[200], counts["validated"], counts["estimated"] = -5.0, 0, 0  # a bad setting mid-axis is found
    assert main(["check", str(sweep_file(tmp_path, {"grid": axes}))]) == 2
    assert (
        "point 63200 (cluster.uplink_gbps=-5.0, workload.compute_ms=1.0): cluster.uplink_gbps:"
        in capsys.readouterr().err
    )


def test_check_chooses_each_setting_the_corners_and_a_seeded_sample() -> None:
    from sim.experiments.sweep_check import AXIS_SETTINGS, SAMPLE_POINTS, choose

    indices, axis_points, settings = choose([316, 316], 99_856)
    assert settings == (632, 632) and axis_points == 631  # the first point is each axis's first setting
    assert set(indices[:axis_points]) == {k * 316 for k in range(316)} | set(range(316))
    assert indices[axis_points] == 99_855 and len(indices) <= axis_points + 1 + SAMPLE_POINTS
    assert choose([316, 316], 99_856) == (indices, axis_points, settings)  # the sample is seeded
    indices, axis_points, settings = choose([100_000], 100_000)  # a long axis: evenly spaced settings
    assert settings == (AXIS_SETTINGS, 100_000) and indices[0] == 0 and indices[AXIS_SETTINGS - 1] == 99_999
    assert choose([10, 20], 200) == (list(range(200)), 200, (30, 30))  # a small sweep: every point


def test_the_table_has_a_row_per_point_and_policy_and_resumes(tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file(tmp_path, {"grid": {"cluster.uplink_gbps": [5, 50]}, "seeds": [0, 1]}))
    out = tmp_path / "out"
    first = run_sweep(sweep, out, jobs=1)
    assert (first.ran, first.skipped, len(first.errors)) == (4, 0, 0)
    table = first.table
    assert len(table) == 4 * 2 and list(table.columns[:5]) == ["point", "key", "cluster.uplink_gbps", "seed", "policy"]
    assert set(table["policy"]) == {"ring", "hierarchical"} and (table["status"] == "ok").all()
    slow = table[(table["cluster.uplink_gbps"] == 5) & (table["policy"] == "ring")]["mean_iteration_s"]
    fast = table[(table["cluster.uplink_gbps"] == 50) & (table["policy"] == "ring")]["mean_iteration_s"]
    assert slow.min() > fast.max()  # a 5 Gbps uplink is the bottleneck of a cross-rack ring
    (point_folder(out, sweep.points[2]) / POINT_FILE).unlink()  # as if killed while running it
    again = run_sweep(sweep, out, jobs=1)
    assert (again.ran, again.skipped) == (1, 3)
    pd.testing.assert_frame_equal(pd.read_csv(out / TABLE_FILE), table)
    parallel = run_sweep(sweep, tmp_path / "parallel", jobs=2)  # processes: the same table
    pd.testing.assert_frame_equal(parallel.table, table)


def test_each_points_decisions_are_kept_beside_the_table(tmp_path: Path) -> None:
    """DS-Sync over 8 one-GPU hosts in 2 racks of 25 Gb/s NICs (100 Gb/s a rack): a 50 Gb/s uplink is
    oversubscribed 2:1 (an island per rack), a 100 Gb/s one is not (one island)."""
    sweep = load_sweep(
        sweep_file(tmp_path, {"grid": {"cluster.uplink_gbps": [50, 100]}}, policies=[{"name": "ds_sync"}])
    )
    out = tmp_path / "out"
    run_sweep(sweep, out, jobs=1)
    decisions = pd.read_csv(out / DECISIONS_FILE)
    assert list(decisions.columns[:4]) == ["point", "key", "cluster.uplink_gbps", "policy"]
    schedule = decisions[decisions["setting"] == "schedule"].set_index("cluster.uplink_gbps")["value"]
    assert schedule[50].startswith("2 rack islands of 4 ranks") and schedule[100] == "one island of 8 ranks"


def test_one_bad_point_exits_1_and_the_good_points_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = sweep_file(tmp_path, {"grid": {"cluster.uplink_gbps": [10, -5, 40]}})
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "point 1 (cluster.uplink_gbps=-5): cluster.uplink_gbps: Input should be" in err
    table, errors = pd.read_csv(out / TABLE_FILE), pd.read_csv(out / "errors.csv")
    assert sorted(set(table["point"])) == [0, 2] and len(table) == 2 * 2
    assert errors["point"].tolist() == [1] and errors["cluster.uplink_gbps"].tolist() == [-5]
    assert main(["check", str(path)]) == 2  # check validates every point
    assert "point 1 (cluster.uplink_gbps=-5)" in capsys.readouterr().err
    assert main(["run", str(path)]) == 2  # run points to sweep
    assert "run it with: syncsim sweep" in capsys.readouterr().err


def test_a_sweep_killed_midway_completes_only_what_is_missing(tmp_path: Path) -> None:
    """SIGKILL while points are running; the re-run runs only the unfinished ones, and the table is
    the uninterrupted run's."""
    path = sweep_file(tmp_path, {"grid": {"workload.gradient_mb": [20.0, 40.0, 60.0, 80.0, 100.0, 120.0]}})
    whole = run_sweep(load_sweep(path), tmp_path / "whole", jobs=1).table
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "sim.cli", "sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while len(list(out.glob(f"points/*/{POINT_FILE}"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(list(out.glob(f"points/*/{POINT_FILE}")))
    assert 2 <= done_before < 6, "the sweep finished before it could be killed: make its points slower"
    again = run_sweep(load_sweep(path), out, jobs=1)
    assert again.skipped == done_before and again.ran == 6 - done_before
    pd.testing.assert_frame_equal(pd.read_csv(out / TABLE_FILE), whole)


def test_the_table_is_also_parquet_with_the_same_rows(tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file(tmp_path, {"seeds": [3, 4]}))
    outcome = run_sweep(sweep, tmp_path / "out", jobs=1)
    parquet = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert len(parquet) == len(outcome.table) == 2 * 2
    assert parquet["seed"].tolist() == [3, 3, 4, 4]
    pd.testing.assert_frame_equal(parquet, outcome.table, check_dtype=False)


def test_a_dask_cluster_gives_the_local_table(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    sweep = load_sweep(sweep_file(tmp_path, {"grid": {"cluster.uplink_gbps": [5, 50, -1]}, "seeds": [0, 1]}))
    local = run_sweep(sweep, tmp_path / "local", jobs=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster:
        remote = run_sweep(sweep, tmp_path / "dask", dask=cluster.scheduler_address)
    assert remote.ran == 4 and len(remote.errors) == 2  # the two points with a negative uplink
    pd.testing.assert_frame_equal(remote.table, local.table)
    pd.testing.assert_frame_equal(remote.errors, local.errors)
    for point in sweep.points:  # the same files, kept by this process
        if point.config is not None:
            kept = point_folder(tmp_path / "dask", point) / "summary.csv"
            assert kept.read_text() == (point_folder(tmp_path / "local", point) / "summary.csv").read_text()


def test_plot_draws_a_sweep_and_a_run_in_three_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sweep_file(tmp_path, {"grid": {"cluster.uplink_gbps": [5, 50]}, "seeds": [0, 1]})
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    assert main(["plot", str(out), "--metric", "mean_iteration_s"]) == 0
    assert all((out / f"sweep_mean_iteration_s.{fmt}").stat().st_size > 1000 for fmt in ("png", "pdf", "svg"))
    assert main(["plot", str(out), "--x", "seed"]) == 2
    assert "--x: 'seed' is not an axis of this sweep; allowed: cluster.uplink_gbps" in capsys.readouterr().err
    assert main(["plot", str(out), "--metric", "nope"]) == 2
    run = tmp_path / "run"
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(base()))
    assert main(["run", str(tmp_path / "one.yaml"), "--out", str(run), "--quiet", "--no-plot"]) == 0
    assert not (run / "comparison.png").exists()
    assert main(["plot", str(run)]) == 0
    assert all(
        (run / f"{name}.{fmt}").is_file() for name in ("comparison", "utilization") for fmt in ("png", "pdf", "svg")
    )
    assert main(["plot", str(tmp_path / "empty")]) == 2


def test_a_sweep_figure_is_titled_by_its_config_not_only_its_folder(tmp_path: Path, drawn: list) -> None:
    path = sweep_file(tmp_path, {"seeds": [0, 1]}, name="uplink_study")
    out = tmp_path / "results-folder"
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    assert main(["plot", str(out)]) == 0
    assert drawn[0]._suptitle.get_text().startswith("config: uplink_study (2 seeds")
    (out / "sweep.json").unlink()  # a sweep folder from before the name was kept
    assert main(["plot", str(out)]) == 0
    assert drawn[-1]._suptitle.get_text().startswith("results-folder (config not recorded)")


BUNDLED_SWEEPS = sorted((Path(__file__).parent.parent / "configs" / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("path", BUNDLED_SWEEPS, ids=[p.stem for p in BUNDLED_SWEEPS])
def test_bundled_sweep_validates_every_point(path: Path) -> None:
    sweep = load_sweep(path)
    assert len(sweep.points) >= 2 and not sweep.bad, [(p.label(), p.error) for p in sweep.bad]


def test_a_lock_naming_a_dead_pid_is_taken_over_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """What orphans of a SIGKILLed holder leave: the flock still held, the pid it names gone."""
    import fcntl

    import sim.files
    from sim.errors import OutputBusy
    from sim.files import LOCK_NAME, hold_output

    monkeypatch.setattr(sim.files, "SETTLE_S", 0.0)
    out = tmp_path / "out"
    out.mkdir()
    orphan = os.open(out / LOCK_NAME, os.O_RDWR | os.O_CREAT)  # another open file: its flock conflicts
    try:
        fcntl.flock(orphan, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(orphan, f"{os.getpid()} syncsim sweep live.yaml\n".encode(), 0)
        with pytest.raises(OutputBusy), hold_output(out):  # a live holder is still refused
            pass
        os.ftruncate(orphan, 0)
        os.pwrite(orphan, b"999999999 syncsim sweep old.yaml\n", 0)  # above any pid_max: no such process
        with hold_output(out, command="syncsim sweep new.yaml"):
            assert (out / LOCK_NAME).read_text() == f"{os.getpid()} syncsim sweep new.yaml\n"
        assert "took over the lock of a syncsim process that is gone (pid 999999999, syncsim sweep old.yaml)" in (
            capsys.readouterr().err
        )
    finally:
        os.close(orphan)


def test_a_sigkilled_sweep_leaves_no_worker_and_no_lock(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only the sweep's own process is killed (as `kill -9 PID` does): its workers die with it, and a
    re-run into the folder goes on at once and gives the uninterrupted table."""
    grid = {"grid": {"workload.gradient_mb": [20.0, 40.0, 60.0, 80.0, 100.0, 120.0]}}
    path = sweep_file(tmp_path, grid, iterations=6)
    whole = run_sweep(load_sweep(path), tmp_path / "whole", jobs=1).table
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "sim.cli", "sweep", str(path), "--out", str(out), "--jobs", "2", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not list(out.glob(f"points/*/{POINT_FILE}")) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the sweep finished before it could be killed"
        workers = children(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert workers and not any(alive(pid) for pid in workers), "a worker outlived its sweep"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group, before the test ends
    assert main(["sweep", str(path), "--out", str(out), "--jobs", "1", "--quiet"]) == 0, capsys.readouterr().err
    pd.testing.assert_frame_equal(pd.read_csv(out / TABLE_FILE), whole)


def alive(pid: int) -> bool:
    """Running, and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def children(pid: int) -> list[int]:
    """The processes `pid` started (Linux's /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    return [int(child) for task in tasks.iterdir() for child in (task / "children").read_text().split()]


def test_a_piped_sweep_prints_a_line_per_finished_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = sweep_file(tmp_path, {"grid": {"cluster.uplink_gbps": [5, 50]}})
    assert main(["sweep", str(path), "--out", str(tmp_path / "sweep"), "--jobs", "1"]) == 0  # stderr: not a TTY
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("sweep: point ")]
    assert len(lines) == 2 and "done, 1 of 2" in lines[0] and "done, 2 of 2" in lines[1]
    assert "cluster.uplink_gbps=5" in " ".join(lines)
