"""Result files are never half-written, and one run at a time writes an output folder (sim/files.py):
unit checks of the atomic writes, the stale-temporary sweep and the folder lock, then `syncsim run`
SIGKILLed at random moments of a multi-policy run."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import matplotlib.image
import pandas as pd
import pytest
import yaml
from helpers import star, synthetic

import sim.results.result
from sim.api import simulate
from sim.errors import OutputBusy, SyncsimError
from sim.files import LOCK_NAME, TEMPORARY, atomic_path, atomic_write, clean_temporaries, hold_output
from sim.results import Result

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"

# holds a folder until killed; prints a line once it holds it
HOLDER = """import sys, time
from sim.files import hold_output
with hold_output(sys.argv[1], command="syncsim run held.yaml"):
    print("held", flush=True)
    time.sleep(300)
"""


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if TEMPORARY.match(p.name))


# -- atomic writes ------------------------------------------------------------------------------


def test_atomic_write_replaces_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "summary.csv"
    atomic_write(path, "a,b\n1,2\n")
    atomic_write(path, "a,b\n3,4\n")
    assert path.read_text() == "a,b\n3,4\n"
    atomic_write(tmp_path / "blob.bin", b"\x00\x01")
    assert (tmp_path / "blob.bin").read_bytes() == b"\x00\x01"
    atomic_write(tmp_path / "name.txt", "Zürich")  # text is UTF-8 whatever the locale
    assert (tmp_path / "name.txt").read_bytes() == "Zürich".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob.bin", "name.txt", "summary.csv"]


def test_files_get_the_mode_a_plain_write_gives(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.csv", "x\n")
        with atomic_path(tmp_path / "b.png") as tmp:
            tmp.write_bytes(b"png")
    finally:
        os.umask(umask)
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o644  # not the 0600 of mkstemp
    assert (tmp_path / "b.png").stat().st_mode & 0o777 == 0o644


def test_a_writer_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "iterations.csv"
    path.write_text("old, complete\n")
    with pytest.raises(RuntimeError, match="disk on fire"), atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and tmp.suffix == ".csv"
        tmp.write_text("new, half")
        assert path.read_text() == "old, complete\n"  # nothing visible before the block ends
        raise RuntimeError("disk on fire")
    assert path.read_text() == "old, complete\n"
    assert [p.name for p in tmp_path.iterdir()] == ["iterations.csv"]


def test_atomic_path_keeps_the_extension_for_savefig(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    with atomic_path(tmp_path / "comparison.png") as tmp:
        assert TEMPORARY.match(tmp.name) and tmp.name.endswith(".png")
        fig.savefig(tmp)  # the format comes from the temporary's extension
    plt.close(fig)
    assert matplotlib.image.imread(tmp_path / "comparison.png").ndim == 3
    assert [p.name for p in tmp_path.iterdir()] == ["comparison.png"]


def test_clean_temporaries_removes_what_a_killed_writer_left_and_nothing_else(tmp_path: Path) -> None:
    killed = """import os, signal, sys
from sim.files import atomic_path
with atomic_path(sys.argv[1]) as tmp:
    tmp.write_text("half a tab")
    os.kill(os.getpid(), signal.SIGKILL)
"""
    for name in ("summary.csv", "comparison.png"):
        done = subprocess.run([sys.executable, "-c", killed, str(tmp_path / name)], cwd=ROOT)
        assert done.returncode == -signal.SIGKILL
    left = temporaries(tmp_path)
    assert len(left) == 2 and not (tmp_path / "summary.csv").exists()
    keep = ["summary.csv", LOCK_NAME, ".hidden", "notes.tmp", ".x.tmp", ".config.yaml.0123abcd.tmpl"]
    for name in keep:
        (tmp_path / name).write_text("mine")
    assert sorted(p.name for p in clean_temporaries(tmp_path)) == left
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(keep)
    assert clean_temporaries(tmp_path / "absent") == []


# -- the output-folder lock ---------------------------------------------------------------------


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding tmp_path/out."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "out")], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    out = tmp_path / "out"
    with pytest.raises(OutputBusy) as busy, hold_output(out, command="syncsim run mine.yaml"):
        pytest.fail("held a folder another process holds")
    message = str(busy.value)
    assert f"--out {out}:" in message and f"pid {holder.pid}, syncsim run held.yaml" in message
    assert "wait for it or choose another --out" in message
    assert isinstance(busy.value, SyncsimError)


def test_a_sigkilled_holder_frees_the_folder(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    out = tmp_path / "out"
    stale = out / ".summary.csv.0123abcd.tmp"
    stale.write_text("half")
    holder.send_signal(signal.SIGKILL)
    assert holder.wait() == -signal.SIGKILL
    with hold_output(out, command="syncsim run next.yaml") as held:
        assert held == out
        assert (out / LOCK_NAME).read_text() == f"{os.getpid()} syncsim run next.yaml\n"
        assert not stale.exists()  # the killed run's temporaries go once the folder is held
    assert (out / LOCK_NAME).read_text() == ""  # released: no stale holder to report
    with hold_output(out):  # and free again
        pass


def test_without_fcntl_nothing_is_locked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.files

    monkeypatch.setattr(sim.files, "fcntl", None)
    with hold_output(tmp_path / "out") as out, hold_output(out):
        assert out.is_dir() and not (out / LOCK_NAME).exists()


# -- what a killed run leaves -------------------------------------------------------------------


def parse(path: Path) -> None:
    """Fails unless `path` is a complete file of its kind."""
    if path.suffix == ".csv":
        pd.read_csv(path)  # an empty file raises
    elif path.suffix == ".yaml":
        assert isinstance(yaml.safe_load(path.read_text()), dict), path
    elif path.suffix == ".json":
        json.loads(path.read_text())
    elif path.suffix == ".png":
        raw = path.read_bytes()
        assert raw.startswith(b"\x89PNG\r\n\x1a\n") and raw[-12:-4] == b"\x00\x00\x00\x00IEND", path
        assert matplotlib.image.imread(path).size
    elif path.suffix == ".txt":
        path.read_text()
    else:
        pytest.fail(f"{path.name}: a result file this test cannot check")


def finished_policies(out: Path, rows_per_policy: int) -> list[str]:
    """Check every visible file in `out` parses and every policy summary.csv reports ok has all its
    rows in iterations.csv; return those policies."""
    if not out.exists():
        return []
    for path in out.iterdir():
        if not path.name.startswith("."):
            parse(path)
    if not (out / "summary.csv").exists():
        return []
    summary = pd.read_csv(out / "summary.csv")
    finished = list(summary.loc[summary["status"] == "ok", "policy"])
    if finished:
        rows = pd.read_csv(out / "iterations.csv")["policy"].value_counts()
        for policy in finished:
            assert rows.get(policy, 0) == rows_per_policy, f"{policy}: {rows.get(policy, 0)} of {rows_per_policy}"
    return finished


def test_a_write_stopped_at_any_file_never_claims_missing_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic twin of the SIGKILL test: the second policy's save stops before each file in turn."""
    config = synthetic(star(4), [{"name": "ring"}, {"name": "no_sync"}], 10, compute_ms=5.0, iterations=3)
    partials: list[Result] = []
    simulate(config, on_policy_done=partials.append)
    calls: list[Path] = []

    def counted(path: Path, data: str) -> None:
        calls.append(path)
        atomic_write(path, data)

    monkeypatch.setattr(sim.results.result, "atomic_write", counted)
    partials[1].write(tmp_path / "count", plot=False, trace=False)
    monkeypatch.undo()
    assert len(calls) == 11  # config.yaml and 10 tables
    for stop in range(len(calls) + 1):
        out = tmp_path / f"stop{stop}"
        partials[0].write(out, plot=False, trace=False)
        monkeypatch.setattr(sim.results.result, "atomic_write", stopping_after(stop))
        with pytest.raises(KeyboardInterrupt) if stop < len(calls) else nullcontext():
            partials[1].write(out, plot=False, trace=False)
        monkeypatch.undo()
        finished = finished_policies(out, 3 * 4)
        assert finished == (["ring", "no_sync"] if stop == len(calls) else ["ring"]), stop


def stopping_after(count: int) -> Callable[[Path, str], None]:
    """An atomic_write that writes `count` files, then stops the writer as abruptly as in-process can."""
    budget = iter(range(count))

    def write(path: Path, data: str) -> None:
        if next(budget, None) is None:
            raise KeyboardInterrupt
        atomic_write(path, data)

    return write


def syncsim_run(config: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "sim.cli", "run", str(config), "--out", str(out), "--quiet"]


def wait_until(proc: subprocess.Popen[bytes], ready: Callable[[], bool], pause_s: float) -> bool:
    """Poll `ready` every `pause_s`; False if the run ended first (or after a minute)."""
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            return True
        time.sleep(pause_s)
    return False


def saved(out: Path, policies: int) -> bool:
    """summary.csv lists `policies` policies."""
    try:
        return len(pd.read_csv(out / "summary.csv")) >= policies
    except (FileNotFoundError, pd.errors.EmptyDataError):
        return False


def visible_name(out: Path, prefix: str) -> bool:
    """A visible name starting with `prefix` is in `out`: a non-atomic writer would be mid-write now."""
    try:
        return any(name.startswith(prefix) for name in os.listdir(out))
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_only_complete_files(tmp_path: Path) -> None:
    data = yaml.safe_load(QUICKSTART.read_text())  # 4 policies, 8 workers, 20 iterations: ~1 s of simulation
    assert len(data["policies"]) == 4
    config = tmp_path / "quickstart.yaml"
    config.write_text(yaml.safe_dump(data))
    per_policy = data["iterations"] * 8

    start = time.monotonic()
    done = subprocess.run(syncsim_run(config, tmp_path / "whole"), cwd=ROOT, capture_output=True)
    duration = time.monotonic() - start
    assert done.returncode == 0, done.stderr.decode()
    assert len(finished_policies(tmp_path / "whole", per_policy)) == 4

    # 4 seeded random moments over the run (imports, policies, the final write with its plots); 3 just
    # after the 1st, 2nd, 3rd policy is saved, so that kills with finished policies always happen; and 2
    # the instant the largest table and the trace first show up, where a non-atomic writer is mid-file
    rng = random.Random(7)
    moments: list[tuple[str, float | str]] = [("at_s", rng.uniform(0.3, 1.0) * duration) for _ in range(4)]
    moments += [("after_policies", k) for k in (1, 2, 3)]
    moments += [("on_write", "utilization"), ("on_write", "trace")]
    outcomes = []
    for i, (kind, value) in enumerate(moments):
        out = tmp_path / f"kill{i}"
        proc = subprocess.Popen(syncsim_run(config, out), cwd=ROOT, stdout=subprocess.DEVNULL)
        try:
            if kind == "at_s":
                time.sleep(float(value))
            elif kind == "after_policies":
                assert wait_until(proc, partial(saved, out, int(value)), 0.005), f"ended before {value}"
                time.sleep(rng.uniform(0.0, 0.05))
            else:
                assert wait_until(proc, partial(visible_name, out, str(value)), 0.0002), f"ended before {value}"
            proc.send_signal(signal.SIGKILL)
        finally:
            killed = proc.wait() == -signal.SIGKILL
        finished = finished_policies(out, per_policy)
        outcomes.append((kind, value, killed, len(finished)))
        if kind != "at_s":
            assert killed, outcomes
        if kind == "after_policies":
            assert len(finished) >= int(value), outcomes
    assert sum(killed and 0 < n < 4 for _, _, killed, n in outcomes) >= 3, outcomes  # rows checked mid-run
    assert sum(killed for _, _, killed, _ in outcomes) >= 8, outcomes  # nearly every moment fell inside the run

    last = tmp_path / f"kill{len(moments) - 1}"
    done = subprocess.run(syncsim_run(config, last), cwd=ROOT, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    assert len(finished_policies(last, per_policy)) == 4
    for name in ("summary.csv", "iterations.csv", "config.yaml", "trace.json", "comparison.png", "utilization.png"):
        assert (last / name).exists(), name
    assert temporaries(last) == []


def test_run_refuses_a_held_folder_and_clears_a_killed_runs_temporaries(
    tmp_path: Path, holder: subprocess.Popen[str]
) -> None:
    out = tmp_path / "out"
    config = tmp_path / "small.yaml"
    config.write_text(yaml.safe_dump({**yaml.safe_load(QUICKSTART.read_text()), "iterations": 2}))
    busy = subprocess.run(syncsim_run(config, out), cwd=ROOT, capture_output=True, text=True)
    assert busy.returncode == 3 and f"pid {holder.pid}" in busy.stderr, busy.stderr
    assert not (out / "summary.csv").exists()
    (out / ".summary.csv.0123abcd.tmp").write_text("half")
    holder.kill()
    holder.wait()
    done = subprocess.run(syncsim_run(config, out), cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert temporaries(out) == [] and len(finished_policies(out, 2 * 8)) == 4


# -- one run's files, whole or marked -------------------------------------------------------------


def four_policies(tmp_path: Path, name: str = "four.yaml", **change: object) -> Path:
    """4 quick policies on 4 workers, as a config file."""
    policies = [{"name": "ring"}, {"name": "no_sync"}, {"name": "ps"}, {"name": "asp"}]
    data = {**synthetic(star(4), policies, 10, compute_ms=5.0, iterations=3), **change}
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_rerun_into_the_same_out_never_mixes_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from sim.cli import main

    numerics = {"model": "logreg", "global_batch": 16, "eval_every": 2}
    first = four_policies(tmp_path, "numerics.yaml", policies=[{"name": "ring"}, {"name": "ps"}], numerics=numerics)
    out = tmp_path / "out"
    assert main(["run", str(first), "--out", str(out), "--quiet"]) == 0
    assert (out / "accuracy.csv").is_file() and (out / "accuracy.png").is_file()
    (out / "notes.md").write_text("mine")  # not a run's file: left alone
    second = four_policies(tmp_path, policies=[{"name": "no_sync"}, {"name": "asp"}])
    assert main(["run", str(second), "--out", str(out), "--quiet", "--no-plot"]) == 0
    capsys.readouterr()
    for name in ("accuracy.csv", "accuracy.png", "comparison.png", "utilization.png"):
        assert not (out / name).exists(), f"{name} of the first run is still there"
    assert (out / "notes.md").read_text() == "mine"
    back = Result.read(out)
    assert back.accuracy is None and list(back.summary["policy"]) == ["no_sync", "asp"]
    assert set(back.iterations["policy"]) == {"no_sync", "asp"}


def test_result_write_removes_an_older_accuracy_table(tmp_path: Path) -> None:
    (tmp_path / "accuracy.csv").write_text("policy,iteration\nold,0\n")
    simulate(synthetic(star(2), [{"name": "ring"}], 10, iterations=2)).write(tmp_path, plot=False)
    assert Result.read(tmp_path).accuracy is None


def stop_at_policy(monkeypatch: pytest.MonkeyPatch, index: int, stop: type[BaseException]) -> None:
    """run_policy raises `stop` (Ctrl-C's KeyboardInterrupt, SIGTERM's Terminated) when policy `index` starts."""
    import sim.api

    real = sim.api.run_policy

    def run_policy(config, i, *args, **kwargs):  # type: ignore[no-untyped-def]
        if i == index:
            raise stop()
        return real(config, i, *args, **kwargs)

    monkeypatch.setattr(sim.api, "run_policy", run_policy)


@pytest.mark.parametrize(
    ("stop", "code", "how"), [(KeyboardInterrupt, 130, "Ctrl-C (SIGINT)"), ("Terminated", 143, "SIGTERM")]
)
def test_an_interrupted_run_keeps_finished_policies_and_marks_the_others(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    stop: object,
    code: int,
    how: str,
) -> None:
    from sim.cli import main
    from sim.errors import Terminated

    stop_at_policy(monkeypatch, 1, Terminated if stop == "Terminated" else KeyboardInterrupt)  # type: ignore[arg-type]
    out = tmp_path / "out"
    assert main(["run", str(four_policies(tmp_path)), "--out", str(out), "--quiet"]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"stopped by {how}; 1 of 4 policies finished, kept in {out}/"]
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["ring", "no_sync", "ps", "asp"]  # every configured policy has a row
    assert list(summary["status"]) == [
        "ok",
        f"interrupted: stopped by {how} while it ran",
        f"interrupted: not started, stopped by {how}",
        f"interrupted: not started, stopped by {how}",
    ]
    assert set(pd.read_csv(out / "iterations.csv")["policy"]) == {"ring"}
    assert finished_policies(out, 3 * 4) == ["ring"]


def test_ctrl_c_anywhere_in_a_command_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.cli import main

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Result, "plot", interrupted)  # Ctrl-C while the figures are drawn
    assert main(["run", str(four_policies(tmp_path)), "--out", str(tmp_path / "out"), "--quiet"]) == 130
    assert capsys.readouterr().err.strip() == "syncsim run: stopped by Ctrl-C (SIGINT)"
    assert finished_policies(tmp_path / "out", 3 * 4) == ["ring", "no_sync", "ps", "asp"]


def test_sigterm_stops_a_run_with_one_line_and_every_row(tmp_path: Path) -> None:
    config = four_policies(tmp_path, iterations=400)
    out = tmp_path / "out"
    proc = subprocess.Popen(syncsim_run(config, out), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert wait_until(proc, partial(saved, out, 1), 0.01), "the run ended before its first policy was saved"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err.decode()
    assert err.decode().strip().startswith("stopped by SIGTERM;") and len(err.decode().strip().splitlines()) == 1
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["ring", "no_sync", "ps", "asp"]
    assert summary["status"].iloc[-1].startswith("interrupted")


def test_out_naming_a_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main

    out = tmp_path / "taken.txt"
    out.write_text("a file")
    assert main(["run", str(four_policies(tmp_path)), "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"syncsim run: --out {out}: is a file, not a folder; name a folder (it is created if missing)"
    )
    assert out.read_text() == "a file"


def test_a_read_only_out_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.cli import main

    out = tmp_path / "readonly"
    out.mkdir()
    out.chmod(0o555)  # enough for a user; root writes anyway, so the file system also refuses (EROFS)
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(path).startswith(str(out)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    try:
        assert main(["run", str(four_policies(tmp_path)), "--out", str(out), "--quiet"]) == 1
    finally:
        out.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"syncsim run: --out {out}: cannot create or lock the folder: ") and "\n" not in err, err
    assert list(out.iterdir()) == []


def test_a_full_disk_is_one_line_and_keeps_the_finished_policies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sim.cli import main

    writes: list[str] = []

    def filling(path: Path, data: str) -> None:  # the disk fills while the second policy's tables are saved
        writes.append(Path(path).name)
        if writes.count("config.yaml") == 2 and Path(path).name == "ops.csv":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(path).with_name(".ops.csv.0123abcd.tmp")))
        atomic_write(path, data)

    monkeypatch.setattr(sim.results.result, "atomic_write", filling)
    out = tmp_path / "out"
    assert main(["run", str(four_policies(tmp_path)), "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err.strip() == (
        f"syncsim run: --out {out}: writing the finished policies' tables: No space left on device (ops.csv); "
        "free some space (what was finished before is kept)"
    )
    assert finished_policies(out, 3 * 4) == ["ring"]


# one argv per command with an --out flag; {out} is the link (the walk below checks none is missing)
OUT_COMMANDS = {
    "run": ["run", "configs/quickstart.yaml", "--out", "{out}"],
    "sweep": ["sweep", "configs/quickstart.yaml", "--out", "{out}"],
    "real": ["real", "configs/real_2x2_digits.yaml", "--out", "{out}"],
    "calibrate": ["calibrate", "configs/real_2x2_digits.yaml", "--out", "{out}"],
    "validate": ["validate", "configs/real_2x2_digits.yaml", "--out", "{out}"],
    "search": ["search", "configs/sync_switch_search_digits.yaml", "--out", "{out}"],
    "fidelity": ["fidelity", "--out", "{out}"],
    "bandwidth": ["bandwidth", "configs/wan_bandwidth_sweep.yaml", "--out", "{out}"],
    "profile": ["profile", "resnet32", "--batch", "2", "--out", "{out}"],
    "report": ["report", "configs", "--out", "{out}"],
}


def test_every_command_with_out_is_listed_for_the_link_test() -> None:
    import argparse

    from sim.cli.main import build_parser

    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    with_out = {
        name for name, sub in commands.choices.items() if any("--out" in a.option_strings for a in sub._actions)
    }
    assert with_out == set(OUT_COMMANDS)


@pytest.mark.parametrize("command", sorted(OUT_COMMANDS))
@pytest.mark.parametrize("dangling", [False, True])
def test_an_out_that_is_a_symbolic_link_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str, dangling: bool
) -> None:
    """Results are never written through a link (its target may be anywhere): one argument error naming
    --out, exit 2, and the link's target (a folder, or a file for calibrate and profile) untouched."""
    from sim.cli import main

    monkeypatch.chdir(Path(__file__).parent.parent)
    target = tmp_path / "elsewhere"
    if not dangling:
        target.mkdir()
        (target / "keep.txt").write_text("mine")
    link = tmp_path / "link"
    link.symlink_to(target)
    argv = [part.format(out=link) for part in OUT_COMMANDS[command]]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"syncsim {command}: argument error: --out: {link} is a symbolic link (to {target}); output is not written "
        "through a link: name the folder or file it points to, or another path\n"
    )
    assert link.is_symlink()
    if dangling:
        assert not target.exists()
    else:
        assert [p.name for p in target.iterdir()] == ["keep.txt"] and (target / "keep.txt").read_text() == "mine"
