"""real/precision.py on the CPU: TF32 switches, autocast, the loss scale, and a training step of a
replica in each precision (fp32 master weights and gradients whatever the compute precision)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from real.precision import PRECISIONS, LossScale, PrecisionTask, autocast, check, configure_tf32  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.numerics.batches import ShardSampler  # noqa: E402
from sim.numerics.optim import FlatOptimizer  # noqa: E402
from sim.numerics.replica import Replica, bucket_ranges  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

CPU = torch.device("cpu")


@pytest.fixture
def tf32_switches() -> Iterator[None]:
    matmul, cudnn = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(matmul)
    torch.backends.cudnn.allow_tf32 = cudnn


def test_a_precision_outside_the_four_names_the_field() -> None:
    assert PRECISIONS == ("fp32", "tf32", "fp16", "bf16")
    with pytest.raises(ValueError, match=r"workload.precision: 'fp8'; allowed: fp32, tf32, fp16, bf16"):
        check("fp8", "workload.precision")


def test_tf32_allows_it_in_matmuls_and_fp32_keeps_pytorchs_defaults(tf32_switches: None) -> None:
    configure_tf32("tf32")
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    for precision in ("fp32", "fp16", "bf16"):
        configure_tf32(precision)
        assert torch.get_float32_matmul_precision() == "highest" and torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize(("precision", "dtype"), [("fp32", torch.float32), ("tf32", torch.float32),
                                                  ("fp16", torch.float16), ("bf16", torch.bfloat16)])  # fmt: skip
def test_autocast_computes_in_the_precision(precision: str, dtype: torch.dtype) -> None:
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    with autocast(precision, CPU):
        assert torch.nn.functional.linear(x, w).dtype == dtype


def _replica(precision: str) -> tuple[Replica, Task]:
    cfg = NumericsConfig(dataset="digits", model="cnn", global_batch=16)
    task = Task(cfg, seed=0)
    replica = Replica(
        cfg,
        PrecisionTask(task, precision, CPU),
        0,
        task.initial.clone(),
        torch.zeros(task.size),
        FlatOptimizer(cfg.optimizer, 1, task.size),
        0,
        bucket_ranges(task.size, [1.0, 1.0]),
        ShardSampler(len(task.data.y_train), 1, 0, 16, 0),
        10,
        "test",
    )
    return replica, task


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_training_step_keeps_fp32_weights_and_gradients(precision: str) -> None:
    replica, task = _replica(precision)
    reference, _ = _replica("fp32")
    for r in (replica, reference):
        r.forward_done(0)
    assert replica.params.dtype == replica.grads.dtype == torch.float32
    assert torch.isfinite(replica.grads).all() and all(math.isfinite(v) for v in replica.losses)
    cosine = torch.nn.functional.cosine_similarity(replica.grads, reference.grads, dim=0)
    assert cosine > 0.99  # the same gradient, computed in fewer bits
    if precision in ("fp16", "bf16"):
        assert not torch.equal(replica.grads, reference.grads)
    replica.step_done()
    assert replica.params.dtype == torch.float32 and torch.isfinite(replica.params).all()
    assert not torch.equal(replica.params, task.initial)
    if precision == "fp16":  # the loss scale ran, and its scale is a power of two it kept or lowered
        scale = replica.task.loss_scale
        assert scale is not None and scale.scale <= 2.0**16 and float(scale.scale).is_integer()


def test_the_loss_scale_halves_and_recomputes_on_overflow_and_grows_when_clean() -> None:
    calls: list[float] = []

    def compute(scale: float) -> tuple[torch.Tensor, float]:
        calls.append(scale)
        return (torch.tensor([float("inf") if scale > 1024 else 1.0]), 0.5)

    scale = LossScale(growth_interval=2)
    grad, loss = scale.gradient(compute)
    assert torch.equal(grad, torch.tensor([1.0])) and loss == 0.5
    assert calls == [2.0**k for k in range(16, 9, -1)] and scale.scale == 1024 and scale.overflows == 6
    scale.gradient(compute)
    assert scale.scale == 2048  # two clean steps: grows
    calls.clear()
    scale.gradient(compute)
    assert calls == [2048, 1024]


def test_a_diverged_loss_is_not_retried_forever() -> None:
    scale = LossScale()
    with pytest.raises(FloatingPointError, match="fp16: the gradient is not finite"):
        scale.gradient(lambda s: (torch.tensor([float("nan")]), float("nan")))


@pytest.mark.parametrize("precision", ["tf32", "bf16"])
def test_a_profile_accepts_every_precision(precision: str, tf32_switches: None) -> None:
    from real.profiler import measure_profile

    profile = measure_profile("resnet32", 2, precision, device="cpu", warmup=0, repeats=1)
    assert profile.precision == precision and profile.forward_s > 0
    with pytest.raises(ValueError, match="precision: 'int8'"):
        measure_profile("resnet32", 2, "int8", device="cpu")


class _NormTask:
    """A task whose module has BatchNorm (running statistics updated by every training forward) and
    whose gradient overflows while the loss scale is above `limit`."""

    def __init__(self, limit: float) -> None:
        torch.manual_seed(0)
        self.module = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).train()
        self.limit, self.scales = limit, []

    def gradient(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, loss_scale: float = 1.0) -> tuple:
        self.scales.append(loss_scale)
        out = self.module(x).float()
        return torch.full((1,), math.inf if loss_scale > self.limit else 1.0), float(out.detach().square().mean())


def test_an_overflow_retry_leaves_batchnorm_as_one_forward_would() -> None:
    x = torch.randn(8, 4)
    task, once = _NormTask(limit=2.0**12), _NormTask(limit=math.inf)
    PrecisionTask(task, "fp16", CPU).gradient(torch.zeros(1), x, torch.zeros(8))
    PrecisionTask(once, "fp16", CPU).gradient(torch.zeros(1), x, torch.zeros(8))
    assert len(task.scales) == 5 and len(once.scales) == 1  # 2^16 .. 2^12: four retries
    for (name, retried), (_, single) in zip(task.module.named_buffers(), once.module.named_buffers()):
        assert torch.equal(retried, single), name  # running_mean, running_var, num_batches_tracked


def test_a_worker_records_the_steps_whose_gradient_it_recomputed() -> None:
    """`train` with a stand-in executor and replica: step 1's fp16 gradient overflows twice."""
    from types import SimpleNamespace

    from real.accounting import RankReport
    from real.worker import WorkerSetup, train

    class Model:
        def __init__(self) -> None:
            self.module, self.step = torch.nn.Linear(2, 1), 0

        def gradient(self, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, loss_scale: float = 1.0) -> tuple:
            bad = self.step == 1 and loss_scale > 2.0**14
            return torch.full((1,), math.inf if bad else 1.0), 0.5

    model = Model()
    task = PrecisionTask(model, "fp16", CPU)

    class Replica:
        params = torch.zeros(1)

        def __init__(self) -> None:
            self.task, self.losses = task, []

        def forward_done(self, step: int) -> None:
            model.step = step
            self.losses.append(task.gradient(self.params, torch.zeros(1), torch.zeros(1))[1])

        def step_done(self) -> None:
            pass

    policy = SimpleNamespace(**{h: lambda *a: None for h in ("begin_step", "on_forward", "on_gradients", "end_step")})
    executor = SimpleNamespace(
        replica=Replica(), blocked=[], timeout_s=5.0, run=lambda *a, **k: None, drain=lambda: None, tensors=None
    )
    report = RankReport(0)
    train(WorkerSetup(0, policy, executor, [], 3, [], None, 0.0), report)  # type: ignore[arg-type]
    assert len(report.rows) == 3 and report.overflows == [(1, 2)]
