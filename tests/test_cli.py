"""The `syncsim` command: run writes every result file, check validates, errors exit 2 cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from policies.registry import available
from sim.cli import main

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def small_config(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(QUICKSTART.read_text())
    data.update({"iterations": 3, **changes})
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_run_writes_the_result_contract(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["run", str(small_config(tmp_path)), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "mean iter (ms)" in printed and "hierarchical" in printed
    assert printed.rstrip().endswith(
        f"results: {out}/ (summary, iterations, phases, ops, links, utilization, staleness, faults, memory, "
        "decisions: .csv; trace.json, comparison.png, utilization.png)"
    )
    for name in (
        "summary.csv", "iterations.csv", "ops.csv", "links.csv", "utilization.csv", "config.yaml", "trace.json",
        "comparison.png", "utilization.png",
    ):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["no_sync", "ring", "hierarchical", "ps"]
    for column in ("policy", "mean_iteration_s", "p50_iteration_s", "p99_iteration_s", "throughput_samples_s"):
        assert column in summary.columns
    iterations = pd.read_csv(out / "iterations.csv")
    assert len(iterations) == 4 * 3 * 8  # policies x iterations x workers
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    assert resolved["iterations"] == 3 and resolved["workload"]["bucket_mb"] == 25.0  # defaults filled in
    trace = json.loads((out / "trace.json").read_text())
    assert {e["ph"] for e in trace["traceEvents"]} == {"M", "X", "C"}  # metadata, spans, utilisation counters


def test_run_writes_each_policys_tables_once_and_the_whole_run_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The save after each policy writes the tables so far; the last one's are the run's, not written again."""
    from sim.results.result import Result

    written = []
    keep = Result._write_tables
    monkeypatch.setattr(Result, "_write_tables", lambda self, out: (written.append(len(self.runs)), keep(self, out)))
    out = tmp_path / "out"
    assert main(["run", str(small_config(tmp_path)), "--out", str(out), "--quiet", "--no-plot"]) == 0
    assert written == [1, 2, 3, 4]  # after each of the 4 policies; nothing after the last
    assert list(pd.read_csv(out / "summary.csv")["policy"]) == ["no_sync", "ring", "hierarchical", "ps"]
    assert (out / "trace.json").stat().st_size > 0


def test_the_last_line_names_only_what_the_run_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    config = small_config(tmp_path, simulation={"trace": False})
    assert main(["run", str(config), "--out", str(out), "--quiet", "--no-plot"]) == 0
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.endswith("memory, decisions: .csv)") and "trace.json" not in last and ".png" not in last


def test_console_exits_with_mains_code_its_objects_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    """The console script exits with what `main` returned, the interpreter's last collections spared."""
    import gc
    import importlib

    cli = importlib.import_module("sim.cli.main")  # the module: the package's `main` is the function
    monkeypatch.setattr(cli, "main", lambda: 3)
    try:
        with pytest.raises(SystemExit) as exited:
            cli.console()
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()  # this test process goes on
    assert exited.value.code == 3 and frozen > 0


def test_the_parser_and_a_short_run_leave_the_heavy_imports_alone(tmp_path: Path) -> None:
    """`syncsim --help` builds every command's parser without pandas, networkx, the policies or the
    emulation planner (0.8 s of imports before); a short run never loads numba, which only a run's
    first compiled solve needs."""
    heavy = ("pandas", "networkx", "policies", "real.emulate.plan", "numba", "torch")
    probe = (
        "import sys\n"
        "from sim.cli import build_parser, main\n"
        "build_parser()\n"
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))\n"
        f"main(['run', {str(small_config(tmp_path))!r}, '--out', {str(tmp_path / 'out')!r}, '--quiet', '--no-plot'])\n"
        "print(sorted(m for m in ('numba', 'torch') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert (lines[0], lines[-1]) == ("[]", "[]"), proc.stdout


def test_check_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(QUICKSTART)]) == 0
    assert "ok - 8 GPUs on 8 hosts in 2 racks" in capsys.readouterr().out


def test_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert ", ".join(sorted(available())) in out and "resnet50" in out and "H100" in out
    assert "transformer (workload.transformer" in out and "profiled (" in out  # the model sources beside the zoo


def test_bad_config_exits_2_without_traceback(tmp_path: Path) -> None:
    """As a user sees it: a separate process, one message naming the field and the choices."""
    bad = small_config(tmp_path, policies=[{"name": "rign"}])
    for args in (["check", str(bad)], ["run", str(bad), "--out", str(tmp_path / "o")]):
        proc = subprocess.run([sys.executable, "-m", "sim.cli", *args], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        assert f"policies[0].name: unknown policy 'rign'; allowed: {', '.join(sorted(available()))}" in proc.stderr
        assert not (tmp_path / "o").exists()


def test_a_step_that_cannot_run_exits_1_with_its_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A domain error out of a command (a failed calibration, an emulation that cannot come up) is one
    line naming the command, not a traceback."""
    import sim.cli.simulation as commands
    from real.validate import ValidationError

    def fails(args: object) -> int:
        raise ValidationError("calibration failed: rank 0 (worker) exited with code 2")

    monkeypatch.setattr(commands, "_cmd_list", fails)
    assert main(["list"]) == 1
    assert capsys.readouterr().err == "syncsim list: calibration failed: rank 0 (worker) exited with code 2\n"


def test_failing_policy_keeps_other_results_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = small_config(
        tmp_path,
        iterations=4,
        policies=[{"name": "ring"}, {"name": "custom_policies:YieldsGarbage"}, {"name": "no_sync"}],
    )
    out = tmp_path / "out"
    assert main(["run", str(config), "--out", str(out), "--quiet"]) == 1
    assert "policy 'yields_garbage' stopped early: PolicyError" in capsys.readouterr().err
    summary = pd.read_csv(out / "summary.csv").set_index("policy")
    assert summary.loc["ring", "status"] == "ok" and summary.loc["no_sync", "status"] == "ok"
    assert summary.loc["yields_garbage", "status"].startswith("failed: PolicyError")
    assert summary.loc["yields_garbage", "iterations"] == 2  # steps 0 and 1 completed
    assert "Traceback" in (out / "errors.txt").read_text()
