"""real/device_use.py: which device each rank of a real run used, and the rows of ranks.csv."""

from __future__ import annotations

import math
from unittest import mock

import pytest

torch = pytest.importorskip("torch")

from real.accounting import RankReport  # noqa: E402
from real.device_use import (  # noqa: E402
    CPU_MEMORY_ENV,
    RANK_FIELDS,
    DeviceUse,
    begin,
    iteration_done,
    measured,
    rank_rows,
    rank_table,
)
from real.results import ServerReport, assemble  # noqa: E402


def test_a_cpu_peak_is_the_most_bytes_held_at_once_since_the_policy_began(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CPU_MEMORY_ENV, "1")  # `syncsim real --cpu-memory`
    """4 MB kept, then 8 MB and 8 MB more held together, then freed: a peak of 20 MB (plus the small Python
    objects made on the way); the block allocated before `begin`, and freed after, takes nothing off."""
    before = torch.ones(2_000_000)
    begin(torch.device("cpu"))
    kept = torch.zeros(1_000_000)
    first = torch.ones(2_000_000)
    second = first * 2
    del first, second, before
    iteration_done()
    use = measured(torch.device("cpu"))
    assert use.device == "cpu" and 20_000_000 <= use.peak_bytes < 20_000_000 + 2**18  # and small Python objects
    assert kept.numel() == 1_000_000


def test_a_cpu_worker_is_watched_only_when_asked() -> None:
    begin(torch.device("cpu"))  # no --cpu-memory
    assert measured(torch.device("cpu")).peak_bytes == 0


def test_a_cpu_rank_that_is_not_watched_reports_no_peak() -> None:
    begin(torch.device("cpu"), watch=False)  # a parameter-server shard's rank
    assert measured(torch.device("cpu")) == DeviceUse("cpu", "cpu", 0)


def test_a_gpu_reports_its_name_and_the_peak_since_the_policy_began() -> None:
    gpu = torch.device("cuda", 1)
    with (
        mock.patch.object(torch.cuda, "reset_peak_memory_stats") as reset,
        mock.patch.object(torch.cuda, "max_memory_allocated", return_value=3 * 2**20) as peak,
        mock.patch.object(torch.cuda, "get_device_name", return_value="NVIDIA H200"),
    ):
        begin(gpu)
        use = measured(gpu)
    reset.assert_called_once_with(gpu)
    peak.assert_called_once_with(gpu)  # the rank's own GPU, not the current one
    assert use == DeviceUse("cuda:1", "NVIDIA H200", 3 * 2**20)


def test_rows_are_in_rank_order_with_bytes() -> None:
    gpu, cpu = DeviceUse("cuda:0", "NVIDIA H200", 2**21), DeviceUse("cpu", "cpu", 0)
    ranks = [(2, "parameter-server shard 0", cpu, math.nan, 0), (0, "worker", gpu, 1024.0, 3)]
    rows = rank_rows("ring", ranks, 5e6, 4e6)
    assert [r[1] for r in rows] == [0, 2]
    assert rows[0] == ("ring", 0, "worker", "cuda:0", "NVIDIA H200", 2**21, 5e6, 4e6, 1024.0, 3)
    assert math.isnan(rows[1][6]) and math.isnan(rows[1][7])  # the predictions are of workers' memory only
    assert list(rank_table(rows).columns) == list(RANK_FIELDS)


def test_assemble_lists_every_reporting_rank() -> None:
    class Task:
        initial = torch.zeros(4)

        def evaluate(self, model: torch.Tensor) -> tuple[float, float]:
            return 0.0, 1.0

    entry = mock.Mock(display="ps", name="ps")
    worker = RankReport(0, parameters=torch.zeros(4), device_use=DeviceUse("cuda:0", "gpu", 10), loss_scale=512.0)
    shard = ServerReport(0, torch.zeros(4), torch.zeros(4, dtype=torch.bool), [], rank=1)
    shard.device_use = DeviceUse("cpu", "cpu", 0)
    run = assemble(entry, Task(), [worker, shard], 1.0, eval_workers=False)
    assert [(r[1], r[2], r[3]) for r in run.devices] == [
        (0, "worker", "cuda:0"),
        (1, "parameter-server shard 0", "cpu"),
    ]
    assert run.devices[0][8] == 512.0
