"""Faults on the real backend beyond a dead worker (tests/test_real_backend.py has that one): a dead
parameter-server shard and a frozen one. Each ends the run within a bound, the launcher names the
rank and its role, and the tables keep the finished policy and what the survivors measured of the
failed one. Two launches (~15 s of start-up each), each checked as far as it goes.

`SYNCSIM_REAL_CRASH=rank:n[:hang]` (real/worker.py, `crash_point`) makes a shard die or freeze
instead of applying its n-th update; with one bucket per shard, ps's shard does so holding round n,
which every worker pushed (finishing step n) and none can read: each worker's rows are steps 0..n.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Optional

import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from test_real_backend import ITERATIONS, write_config  # noqa: E402

from real.launch import Outcome, launch  # noqa: E402
from real.liveness import named  # noqa: E402

TIMEOUT = 5.0
# loose: load stretches the end of a run by seconds, while a fault that is never noticed never ends it
ENDS_WITHIN_S = 120.0
ROUND = 3  # the shard fails holding this round: workers keep steps 0..ROUND of ps
WORKERS = 4  # ranks 0-3; ps's shards 0 and 1 (one per host) are ranks 4 and 5
POLICIES = [{"name": "ring"}, {"name": "ps"}]  # ring finishes, then ps's shard fails
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="times the fault from /proc")


def one_bucket(path: Path) -> Path:
    """The config with the whole gradient in one bucket (one key per shard: rounds are steps)."""
    config = yaml.safe_load(path.read_text())
    config["workload"]["bucket_mb"] = 2 * config["workload"]["gradient_mb"]
    path.write_text(yaml.safe_dump(config))
    return path


class FaultClock:
    """When the first of this process's children (the ranks) died or was stopped, read from /proc:
    the moment the fault happened, to time how long the run took to end after it."""

    def __init__(self) -> None:
        self.at: Optional[float] = None
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> FaultClock:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while self.at is None and not self._stop.wait(0.02):
            states = _children()
            gone = self._seen - set(states)
            if gone or any(state in "TtZ" for state in states.values()):
                self.at = time.monotonic()
            self._seen |= set(states)


def _children() -> dict[int, str]:
    """pid -> state letter of this process's children."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == os.getpid():
            out[int(entry)] = state
    return out


def run_with_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash: str) -> tuple[Outcome, float]:
    """Launch ring then ps with `SYNCSIM_REAL_CRASH=crash`; the outcome and the seconds from the fault
    to the end of the launch."""
    config = one_bucket(write_config(tmp_path, POLICIES))
    monkeypatch.setenv("SYNCSIM_REAL_CRASH", crash)
    with FaultClock() as clock:
        outcome = launch(config, tmp_path / "out", nproc=WORKERS, timeout_s=TIMEOUT)
        ended = time.monotonic()
    assert clock.at is not None, "no rank died or froze"
    return outcome, ended - clock.at


def check_tables(out: Path, culprit: str) -> None:
    """ring complete and ok; ps failed naming `culprit`, with every worker's steps 0..ROUND."""
    summary = pd.read_csv(out / "summary.csv").set_index("policy")
    assert list(summary.index) == ["ring", "ps"]
    assert summary.loc["ring", "status"] == "ok" and summary.loc["ring", "iterations"] == ITERATIONS
    status = summary.loc["ps", "status"]
    assert status.startswith("failed: policy 'ps' stopped (") and f"dead or frozen: {culprit} silent for" in status
    rows = pd.read_csv(out / "iterations.csv")
    steps = rows.groupby(["policy", "rank"])["iteration"].agg(list)
    for rank in range(WORKERS):
        assert steps[("ring", rank)] == list(range(ITERATIONS))
        assert steps[("ps", rank)] == list(range(ROUND + 1))
    assert len(rows) == WORKERS * (ITERATIONS + ROUND + 1)


@pytest.mark.slow
@needs_proc
def test_a_dead_parameter_server_shard_stops_the_run_and_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outcome, after = run_with_fault(tmp_path, monkeypatch, f"5:{ROUND}")  # shard 1 dies
    assert outcome.codes == {0: 3, 1: 3, 2: 3, 3: 3, 4: 3, 5: 17}  # the others stopped on their own
    assert outcome.failed == "rank 5 (parameter-server shard 1) exited with code 17"
    # its peers see its connections close at once and name it once its heartbeat is stale (2 s)
    assert after < ENDS_WITHIN_S, f"the run ended {after:.1f} s after the shard died"
    print(f"\nthe run ended {after:.1f} s after the shard died (timeout {TIMEOUT:g} s)")
    check_tables(tmp_path / "out", "rank 5 (parameter-server shard 1)")


@pytest.mark.slow
@needs_proc
def test_a_frozen_parameter_server_shard_is_killed_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    outcome, after = run_with_fault(tmp_path, monkeypatch, f"4:{ROUND}:hang")  # shard 0 freezes (SIGSTOP)
    assert outcome.codes == {0: 3, 1: 3, 2: 3, 3: 3, 4: None, 5: 3}  # None: killed by the launcher
    assert outcome.failed == "rank 4 (parameter-server shard 0) stopped responding (killed after the timeout)"
    # the others give up after TIMEOUT; the launcher kills the frozen one TIMEOUT + 5 s after the first exits
    # no sooner than that (load only adds time); the upper bound only tells an end from a hang
    assert TIMEOUT + 5.0 < after < ENDS_WITHIN_S, f"the run ended {after:.1f} s after the shard froze"
    print(f"\nthe run ended {after:.1f} s after the shard froze (timeout {TIMEOUT:g} s)")
    check_tables(tmp_path / "out", "rank 4 (parameter-server shard 0)")


def test_failure_messages_name_each_rank_with_its_role() -> None:
    roles = {0: "worker", 1: "worker", 2: "parameter-server shard 0"}
    assert named(2, roles) == "rank 2 (parameter-server shard 0)" and named(7, roles) == "rank 7"
    assert Outcome({0: 3, 1: 17, 2: 3}, roles).failed == "rank 1 (worker) exited with code 17"
    assert Outcome({0: 3, 1: 3, 2: -9}, roles).failed == "rank 2 (parameter-server shard 0) was killed by SIGKILL"
    assert Outcome({0: 3, 1: 3, 2: None}, roles).failed == (
        "rank 2 (parameter-server shard 0) stopped responding (killed after the timeout)"
    )
    assert Outcome({0: 0, 1: 3, 2: 0}, roles).failed == "rank 1 (worker) gave up waiting for its peers"
