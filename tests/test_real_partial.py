"""What a failed rank saves for rank 0 (real/partial.py) comes back as the report it was, and
nothing else in `<out>/partial/` runs or is merged: not a planted pickle, not an older run's file."""

from __future__ import annotations

import math
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from real import partial, salvage  # noqa: E402
from real.accounting import RankReport  # noqa: E402
from real.device_use import DeviceUse  # noqa: E402
from real.results import ServerReport  # noqa: E402


def worker_report(rank: int) -> RankReport:
    report = RankReport(rank)
    report.rows = [(0, rank, 0.0, 0.1, 0.2, np.float64(0.3), 0.0, 0.4, 0.5, 7)]
    report.collectives = [(0, rank, (0, 1), 0, "all_reduce", 400, 0.1, 0.2, -1)]
    report.p2p = [(0, rank, "push", 1, 1, 64, 0.1, 0.2)]
    report.blocked = [(0, 0.1, 0.2)]
    report.losses = [2.5, 2.25]
    report.snapshots = [(2, 0.3, torch.arange(4.0), [2.5, 2.25])]
    report.phases = [("ring", 0, 2, 0.0, 0.3)]
    report.checkpoints = [torch.ones(4)]
    report.parameters = torch.arange(4.0) * rank
    report.device_use = DeviceUse("cpu", "cpu", 0)
    report.overflows = [(1, 2)]
    return report


def test_reports_come_back_whole(tmp_path: Path) -> None:
    worker = worker_report(1)
    server = ServerReport(0, torch.zeros(3), torch.tensor([True, False, True]), [(1, 0)], [(2, 0.5, torch.ones(3))])
    server.rank, server.device_use = 3, DeviceUse("cpu", "cpu", 0)
    partial.save(tmp_path, 0, 1, "ab12", worker)
    partial.save(tmp_path, 0, 3, "ab12", server)
    back = partial.read(tmp_path, 0, "ab12")
    assert [type(r) for r in back] == [RankReport, ServerReport]
    got, want = back[0], worker
    for name in ("rank", "rows", "collectives", "p2p", "blocked", "losses", "phases", "overflows", "device_use"):
        assert getattr(got, name) == getattr(want, name), name
    assert type(got.rows[0]) is tuple and type(got.collectives[0][2]) is tuple
    assert math.isnan(got.loss_scale) and got.serving is True and got.error is None
    assert torch.equal(got.parameters, want.parameters) and torch.equal(got.checkpoints[0], torch.ones(4))
    assert got.snapshots[0][:2] == (2, 0.3) and torch.equal(got.snapshots[0][2], torch.arange(4.0))
    assert torch.equal(back[1].touched, server.touched) and back[1].staleness == [(1, 0)] and back[1].rank == 3


def test_something_that_is_not_plain_data_is_refused(tmp_path: Path) -> None:
    report = worker_report(0)
    report.losses = [object()]  # type: ignore[list-item]
    with pytest.raises(TypeError, match="cannot save a object"):
        partial.save(tmp_path, 0, 0, "1", report)


class _Planted:
    """A pickle that, once loaded, would create `marker` (os.system in the issue's report)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (os.mkdir, (str(self.marker),))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
def test_a_planted_pickle_or_an_older_run_is_neither_run_nor_merged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out, run = tmp_path / "out", "c0ffee"
    marker = tmp_path / "executed"
    folder = out / "partial"
    folder.mkdir(parents=True)
    (folder / "0-rank1.pkl").write_bytes(pickle.dumps(_Planted(marker)))  # the old format's name
    (folder / f"0-rank2.{run}.pt").write_bytes(pickle.dumps(_Planted(marker)))  # even under this run's name
    buffer = pickle.dumps({"__report__": "RankReport", "rank": 3})  # a plain pickle of plain data: not torch's format
    (folder / f"0-rank3.{run}.pt").write_bytes(buffer)
    partial.save(out, 0, 4, "01d", worker_report(4))  # an older run's report
    partial.save(out, 0, 1, run, worker_report(1))  # this run's
    merged: list[Any] = []
    monkeypatch.setattr(salvage, "assemble", lambda entry, task, reports, wall, **_: merged.extend(reports) or _Run())
    monkeypatch.setattr(salvage, "write", lambda *args: None)
    monkeypatch.setattr(salvage, "real_plan", lambda *args: None)
    config: Any = type("C", (), {"policies": [object()]})()
    salvage.keep_partial(config, None, None, None, [], 0, "stopped", out, 0.0, run)
    assert not marker.exists()  # nothing in the folder ran
    assert [r.rank for r in merged] == [1]  # only this run's report; the older run's is not mixed in
    assert f"skipped {folder / f'0-rank2.{run}.pt'}: not a saved report" in capsys.readouterr().err
    assert not folder.exists()  # merged, then cleared


class _Run:
    error = ""


def test_a_run_clears_older_runs_files_and_keeps_its_own(tmp_path: Path) -> None:
    partial.save(tmp_path, 0, 1, "01d", worker_report(1))
    (tmp_path / "partial" / "0-rank2.pkl").write_bytes(b"old")
    (tmp_path / "partial" / "notes.txt").write_text("the user's")
    partial.save(tmp_path, 0, 1, "new", worker_report(1))
    partial.clear(tmp_path, keep="new")
    assert sorted(p.name for p in (tmp_path / "partial").iterdir()) == ["0-rank1.new.pt", "notes.txt"]
