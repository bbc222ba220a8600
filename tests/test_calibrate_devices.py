"""Every tensor a calibration hands to torch.distributed lives on the measuring device (NCCL takes
no CPU tensors), checked on the CPU: a stand-in for `torch.distributed` records each call as rank 0
of two pretend hosts, and factory calls that name no device land on the `meta` device, so a tensor
made without `device=` (the CPU token NCCL refused) is caught."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from real.calibrate import measure, probe, profiled, run  # noqa: E402
from real.calibrate.rows import ComputeSample  # noqa: E402
from sim.compute.profile import ComputeProfile, LayerTime  # noqa: E402

HOSTS = ("hostA", "hostB")
RACKS = {"hostA": "r0", "hostB": "r1"}


class FakeDist:
    """Rank 0 of a world of two: every call returns at once; tensors are checked and recorded."""

    class ReduceOp:
        MAX = "max"
        SUM = "sum"

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.calls: list[tuple[str, torch.device]] = []
        self.wrong: list[str] = []

    def _check(self, name: str, *tensors: Any) -> None:
        for t in tensors:
            self.calls.append((name, t.device))
            if t.device != self.device:
                self.wrong.append(f"{name} got a tensor on {t.device}, the measuring device is {self.device}")

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def get_rank(self) -> int:
        return 0

    def get_world_size(self) -> int:
        return 2

    def barrier(self) -> None:
        self.calls.append(("barrier", self.device))

    def send(self, tensor: torch.Tensor, dst: int, *args: Any, **kwargs: Any) -> None:
        assert not args and "tag" not in kwargs  # NCCL's send and recv take no tags
        self._check("send", tensor)

    def recv(self, tensor: torch.Tensor, src: int, *args: Any, **kwargs: Any) -> None:
        assert not args and "tag" not in kwargs
        self._check("recv", tensor)

    def all_reduce(self, tensor: torch.Tensor, op: Any = None) -> None:
        self._check("all_reduce", tensor)

    def reduce_scatter_tensor(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        self._check("reduce_scatter_tensor", out, inp)

    def all_gather_into_tensor(self, out: torch.Tensor, inp: torch.Tensor) -> None:
        self._check("all_gather_into_tensor", out, inp)

    def gather_object(self, obj: Any, parts: Any, dst: int = 0) -> None:
        parts[0] = obj
        parts[1] = [] if isinstance(obj, list) else obj

    def broadcast_object_list(self, objects: list[Any], src: int = 0) -> None:
        pass


class Task:
    """Just what `measure.compute` reads of a numerics task."""

    class cfg:
        global_batch = 8

    class data:
        x_train = torch.zeros(8, 3)
        y_train = torch.zeros(8)

    initial = torch.zeros(5)

    def gradient(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeDist:
    d = FakeDist(torch.device("cpu"))
    for module in (measure, probe, profiled, run):
        monkeypatch.setattr(module, "dist", d)
    monkeypatch.setattr(run, "fit_report", lambda m, **_: m)  # the measurements, unfitted
    return d


def test_the_harness_catches_a_tensor_made_without_a_device(fake: FakeDist) -> None:
    with torch.device("meta"):
        fake.all_reduce(torch.zeros(1))  # what measure.compute did before: NCCL refused it
        fake.all_reduce(torch.zeros(1, device="cpu"))
    assert fake.wrong == ["all_reduce got a tensor on meta, the measuring device is cpu"]


def test_every_calibration_tensor_lives_on_the_measuring_device(fake: FakeDist) -> None:
    with torch.device("meta"):
        m = run.calibrate(0, 2, HOSTS, RACKS, Task(), device="cpu", repeats=2, max_bytes=1 << 20, batch=4)
        measure.collective_curve([1 << 12], 1, ops=measure.COLLECTIVE_OPS, device="cpu")
    assert fake.wrong == []
    names = {name for name, _ in fake.calls}
    assert {"send", "recv", "all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor"} <= names
    assert m.computes and m.pairs and m.collectives and m.uplinks
    assert max(p.nbytes for p in m.pairs) == 1 << 20  # probe on no-op transfers: unreadable, so the cap


def test_a_profiled_calibration_keeps_the_slowest_rank_and_its_tensors_on_the_device(
    fake: FakeDist, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[tuple[Any, ...]] = []

    def fake_profile(model: str, batch: int, precision: str, device: str, warmup: int, repeats: int) -> ComputeProfile:
        seen.append((model, batch, precision, device, warmup, repeats))
        return ComputeProfile(model, batch, precision, (LayerTime("fc", 1e-3, 2e-3),), "test")

    monkeypatch.setattr(profiled, "measure_profile", fake_profile)
    spec = profiled.ProfileSpec("resnet32", 4, "fp32")
    with torch.device("meta"):
        m = run.calibrate(
            0, 2, HOSTS, RACKS, None, device="cpu", repeats=3, max_bytes=1 << 20, profile=spec, compute_device="cuda:1"
        )
    assert fake.wrong == []
    assert seen == [("resnet32", 4, "fp32", "cuda:1", profiled.WARMUP, profiled.MIN_REPEATS)]
    assert m.profile is not None and m.profile.notes["ranks"] == 2 and m.batch == 4
    assert m.computes == (ComputeSample(0, 4, 3e-3, 0.0), ComputeSample(1, 4, 3e-3, 0.0))
    assert [u.nbytes for u in m.uplinks] == [1 << 20, 1 << 20]


def test_a_slower_rank_profile_is_the_one_kept() -> None:
    fast = ComputeProfile("resnet32", 4, "fp32", (LayerTime("fc", 1e-3, 1e-3),))
    slow = ComputeProfile("resnet32", 4, "fp32", (LayerTime("fc", 1e-3, 5e-3),))
    assert profiled.slowest([fast, slow, fast]) is slow


def test_the_knobs_reach_every_measurement(fake: FakeDist, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, dict[str, Any]] = {}

    def spy(name: str, real: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[name] = {"args": args, **kwargs}
            return real(*args, **kwargs)

        return wrapped

    for name in ("p2p", "uplink", "collective_curve", "compute"):
        monkeypatch.setattr(measure, name, spy(name, getattr(measure, name)))
    with torch.device("meta"):
        run.calibrate(
            0,
            2,
            HOSTS,
            RACKS,
            Task(),
            device="cpu",
            repeats=3,
            statistic="mean",
            uplink_bytes=1 << 13,
            max_bytes=1 << 16,
        )
    assert calls["uplink"]["args"][2:] == (1 << 13, 3) and calls["uplink"]["statistic"] == "mean"
    assert calls["p2p"]["args"][2] == 3 and calls["p2p"]["statistic"] == "mean"
    assert calls["collective_curve"]["args"][1] == 3 and calls["collective_curve"]["statistic"] == "mean"
    assert calls["compute"]["statistic"] == "mean" and calls["compute"]["device"] == "cpu"


def test_compute_on_a_gpu_beside_gloo_makes_that_gpu_current(monkeypatch: pytest.MonkeyPatch) -> None:
    from real.calibrate.session import compute_device

    made: list[torch.device] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", made.append)
    assert compute_device(torch.device("cpu"), 3) == torch.device("cuda", 1)  # gloo: the network on the CPU
    assert made == [torch.device("cuda", 1)]  # as training makes it: events and syncs then land on it


class PrecisionSpy(Task):
    """Records what each forward/backward of `measure.compute` runs under."""

    def __init__(self) -> None:
        self.seen: list[tuple[bool, Any, str]] = []

    def gradient(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, loss_scale: float = 1.0) -> tuple:
        autocast_on = torch.is_autocast_enabled("cpu")
        self.seen.append((autocast_on, torch.get_autocast_dtype("cpu") if autocast_on else None,
                          torch.get_float32_matmul_precision()))  # fmt: skip
        return torch.ones(5), 0.5


@pytest.mark.parametrize(
    ("precision", "expected"),
    [("fp32", (False, None, "highest")), ("tf32", (False, None, "high")),
     ("bf16", (True, torch.bfloat16, "highest")), ("fp16", (True, torch.float16, "highest"))],
)  # fmt: skip
def test_compute_is_timed_in_the_workloads_precision(precision: str, expected: tuple) -> None:
    matmul = torch.get_float32_matmul_precision()
    task = PrecisionSpy()
    try:
        (row,) = measure.compute(task, 4, 2, precision=precision)
    finally:
        torch.set_float32_matmul_precision(matmul)
    assert row.batch == 4 and task.seen == [expected] * 3  # warm-up and two timed steps
    with pytest.raises(ValueError, match="precision: 'int8'"):
        measure.compute(task, 4, 1, precision="int8")


def test_calibrate_hands_the_precision_to_the_compute_measurement(
    fake: FakeDist, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def compute(*args: Any, **kwargs: Any) -> list[ComputeSample]:
        seen.update(kwargs)
        return [ComputeSample(0, 4, 1e-3, 0.0)]

    monkeypatch.setattr(measure, "compute", compute)
    with torch.device("meta"):
        run.calibrate(0, 2, HOSTS, RACKS, Task(), device="cpu", repeats=2, max_bytes=1 << 16, precision="bf16")
    assert seen["precision"] == "bf16"
