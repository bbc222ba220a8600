"""A real run's folder reports like a simulated one: trace.json from the measured timings, the
figures a real run can draw, the staleness its shards measured, and no per-link tables (a real run
cannot see links). Under torchrun rank 0 prints the summary table `syncsim real` prints.

One launch (~12 s, start-up included), started the way torchrun starts ranks, serves every test
that needs processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from real import launch as launch_module  # noqa: E402
from real.launch import LAUNCHED_ENV, free_port, watch  # noqa: E402
from real.layout import placement  # noqa: E402
from real.results import draw  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.config import load_config  # noqa: E402
from sim.results import Result  # noqa: E402

ITERATIONS = 6
WORKERS = 2
CONFIG = {
    "name": "real-reports",
    "seed": 3,
    "iterations": ITERATIONS,
    "cluster": {"topology": "star", "hosts": WORKERS, "gpus_per_host": 1, "nic_gbps": 1},
    "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 5, "synthetic_layers": 4, "bucket_mb": 0.3},
    "numerics": {"dataset": "digits", "model": "mlp", "hidden": [32], "global_batch": 32, "eval_every": 3},
    "policies": [{"name": "asp"}, {"name": "ring"}],
}


class Launched:
    def __init__(self, config: Path, out: Path, stdout: dict[int, str], codes: dict[int, Any]) -> None:
        self.config, self.out, self.stdout, self.codes = config, out, stdout, codes


pytestmark = pytest.mark.slow  # one real launch serves the module


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """Every rank as `python -m real CONFIG --out DIR`, with the environment torchrun gives it."""
    root = tmp_path_factory.mktemp("real_reports")
    config, out = root / "config.yaml", root / "out"
    config.write_text(yaml.safe_dump(CONFIG))
    world = placement(load_config(config)).world
    port = free_port()
    procs = {}
    for rank in range(world):
        env = {k: v for k, v in os.environ.items() if k != LAUNCHED_ENV}
        env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        cmd = [sys.executable, "-m", "real", str(config), "--out", str(out), "--timeout", "60"]
        procs[rank] = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    outcome = watch(procs, 60.0)
    stdout = {rank: proc.stdout.read() if proc.stdout else "" for rank, proc in procs.items()}
    return Launched(config, out, stdout, outcome.codes)


def test_the_run_succeeds_and_leaves_out_the_per_link_tables(launched: Launched) -> None:
    assert set(launched.codes.values()) == {0}, launched.codes
    names = {p.name for p in launched.out.iterdir()}
    assert {"summary.csv", "iterations.csv", "ops.csv", "staleness.csv", "accuracy.csv", "trace.json"} <= names
    assert not names & {"links.csv", "utilization.csv"}  # a real run cannot see per-link traffic
    result = Result.read(launched.out)  # still reads back, with empty per-link frames
    assert result.measured and result.links.empty and result.utilization.empty
    assert list(result.utilization.columns) == ["policy", "time_s", "link", "kind", "utilization"]


def test_trace_has_a_compute_span_per_rank_and_iteration(launched: Launched) -> None:
    trace = json.loads((launched.out / "trace.json").read_text())
    events = trace["traceEvents"]
    assert trace["otherData"]["time"] == "measured, seconds from the policy's start"
    assert "C" not in {e["ph"] for e in events}  # no link-utilisation counters
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    for label in ("asp", "ring"):
        pid = next(pid for pid, name in processes.items() if name == f"{label}: workers")
        spans = [e for e in events if e["pid"] == pid and e["name"] == "forward + backward"]
        assert len(spans) == ITERATIONS * WORKERS  # asp: workers share iterations x workers updates
        assert {e["tid"] for e in spans} == set(range(WORKERS))
        assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)
    ops = pd.read_csv(launched.out / "ops.csv")
    for label in ("asp", "ring"):  # one span per call in ops.csv
        pid = next(pid for pid, name in processes.items() if name == f"{label}: communication")
        assert sum(e["pid"] == pid and e["ph"] == "X" for e in events) == (ops["policy"] == label).sum() > 0


def test_figures_are_drawn_except_utilisation(launched: Launched) -> None:
    for name in ("comparison.png", "staleness.png", "accuracy.png"):
        assert (launched.out / name).stat().st_size > 0, name
    assert not (launched.out / "utilization.png").exists()  # no data: no figure, not an empty one


def test_staleness_counts_every_applied_asynchronous_update(launched: Launched) -> None:
    staleness = pd.read_csv(launched.out / "staleness.csv")
    ops = pd.read_csv(launched.out / "ops.csv")
    pushes = int(((ops["policy"] == "asp") & (ops["kind"] == "push")).sum())
    assert set(staleness["policy"]) == {"asp"} and pushes > 0
    assert int(staleness["updates"].sum()) == pushes
    simulated = simulate(launched.config).staleness  # the same pushes, whichever worker made them
    assert int(simulated["updates"].sum()) == pushes


def test_rank_0_prints_the_summary_under_torchrun(launched: Launched) -> None:
    printed = launched.stdout[0]
    assert "mean iter (ms)" in printed and "final acc." in printed
    assert "asp" in printed and "ring" in printed
    assert f"results: {launched.out}/" in printed and "trace.json" in printed
    assert all("mean iter (ms)" not in text for rank, text in launched.stdout.items() if rank)


def test_a_plotting_failure_costs_one_line_not_the_tables(
    launched: Launched, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = Result.read(launched.out)

    def broken(self: Result, out: Any, formats: Any = ("png",)) -> list[Path]:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(Result, "plot", broken)
    draw(result, tmp_path)
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == ["rank 0: the figures not written (RuntimeError: no fonts); the tables are"]
    assert (tmp_path / "trace.json").is_file()


def test_syncsim_real_marks_its_ranks_so_only_the_parent_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's ranks get `LAUNCHED_ENV` (no processes start here)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    envs: list[dict[str, str]] = []

    class Done:
        def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
            envs.append(env)

        def poll(self) -> int:
            return 0

    monkeypatch.setattr(launch_module, "subprocess", SimpleNamespace(Popen=Done))
    assert launch_module.launch(config, tmp_path / "out", nproc=WORKERS, backend="gloo").ok
    assert len(envs) == placement(load_config(config)).world
    assert all(env[LAUNCHED_ENV] == "1" for env in envs)
