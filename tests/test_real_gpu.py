"""The GPU paths of real/, skipped without CUDA (the CI machine has none): the DDP hooks (ring,
hierarchical) on CUDA tensors under NCCL and gloo against DDP's own all-reduce; `syncsim real`
training on the GPU against numerics mode, in every precision, with workers on the GPU and
parameter-server shards on the host (`ranks.csv`); autocast and fp16 loss scaling firing; NCCL
across 2 and 4 workers for ring, hierarchical, DS-Sync and Zen (step 0's collective times printed
beside the later ones); one group's late collective not holding back another's; `syncsim profile` and
calibration's measurements on a CUDA device.

DiLoCo (int8 with error feedback) and Streaming DiLoCo run their buffers, local ops, a fragment's
gathered all-reduce and launched all-reduces on CUDA tensors over gloo, two workers sharing GPU 0.

NCCL refuses two ranks of one host on one GPU. With fewer GPUs than workers the multi-rank NCCL
tests make each rank a node of its own on GPU 0 (`nodes_of_one`: NCCL_HOSTID), so every NCCL code
path runs on a single GPU too, over NCCL's socket transport instead of NVLink."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from real.backends import backend_for, device_for  # noqa: E402
from real.calibrate import measure  # noqa: E402
from real.hooks import make_hook_state, policy_hook  # noqa: E402
from real.launch import emulated_host_env, free_port  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

STEPS = 3


def _ddp_grads(rank: int, world: int, device: Any, policy: str | None) -> list[Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).to(device)
    model = DDP(model, device_ids=[device.index], bucket_cap_mb=1e-4)
    if policy is not None:
        view = {"topology": "star", "hosts": 1, "gpus_per_host": world}
        model.register_comm_hook(make_hook_state(policy, None, view, model), policy_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(8, 5, generator=g).to(device), torch.randn(8, 3, generator=g).to(device)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.grad.detach().cpu().clone() for p in model.parameters()]


def _worker(rank: int, backend: str, world: int, init: str, out: str) -> None:
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        result = {
            policy or "reference": _ddp_grads(rank, world, device, policy) for policy in (None, "ring", "hierarchical")
        }
        if backend == "nccl":
            curve = measure.collective_curve([1 << 10, 1 << 20], 3, device=device) or []
            result["collectives"] = [(s.nbytes, s.seconds) for s in curve]  # plain values: torch.load's weights_only
        torch.save(result, Path(out) / f"{backend}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _spawn(tmp_path: Path, backend: str, world: int) -> list[dict[str, Any]]:
    port = free_port()
    mp.spawn(_worker, args=(backend, world, f"tcp://127.0.0.1:{port}", str(tmp_path)), nprocs=world)
    return [torch.load(tmp_path / f"{backend}-rank{r}.pt") for r in range(world)]


@pytest.mark.parametrize(("backend", "world"), [("nccl", 1), ("gloo", 2)])
def test_hooks_on_cuda_tensors_match_ddp(tmp_path: Path, backend: str, world: int) -> None:
    for rank, result in enumerate(_spawn(tmp_path, backend, world)):
        for policy in ("ring", "hierarchical"):  # hierarchical: ring reduce-scatter and all-gather on CUDA
            for a, b in zip(result["reference"], result[policy]):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{backend} {policy}: rank {rank} gradients differ"
        if backend == "nccl":
            assert [n for n, _ in result["collectives"]] == [1 << 10, 1 << 20]
            assert all(seconds > 0 for _, seconds in result["collectives"])


def test_auto_picks_nccl_and_each_rank_its_gpu() -> None:
    from real.backends import training_device

    assert backend_for("auto", calibrate=True) == backend_for("auto") == "nccl"
    assert device_for("nccl", local_rank=torch.cuda.device_count()) == torch.device("cuda", 0)
    assert training_device(torch.cuda.device_count()) == torch.device("cuda", 0)  # LOCAL_RANK modulo the GPUs


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_a_profile_is_measured_on_the_gpu_with_cuda_events(tmp_path: Path, precision: str) -> None:
    from real.profiler import measure_profile

    profile = measure_profile("resnet32", 32, precision, warmup=2, repeats=5)
    assert profile.device == torch.cuda.get_device_name() and profile.precision == precision
    assert all(t.forward_s >= 0 and t.backward_s >= 0 for t in profile.layers)
    assert 0 < profile.forward_s < profile.forward_s + profile.backward_s < math.inf  # times: figures, not bounds


def test_syncsim_profile_runs_on_the_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cli import main

    out = tmp_path / "profile.yaml"
    assert main(["profile", "resnet32", "--batch", "8", "--precision", "bf16", "--out", str(out)]) == 0
    assert torch.cuda.get_device_name() in capsys.readouterr().out + out.read_text()


# ---- syncsim real on the GPU ----


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_a_replica_steps_on_the_gpu_with_fp32_master_weights(precision: str) -> None:
    from real.placement import optimizer_on, task_on
    from real.precision import PrecisionTask
    from sim.config.numerics import NumericsConfig
    from sim.numerics.batches import ShardSampler
    from sim.numerics.optim import FlatOptimizer
    from sim.numerics.replica import Replica, bucket_ranges
    from sim.numerics.tasks import Task

    gpu = torch.device("cuda", 0)
    cfg = NumericsConfig(dataset="digits", model="cnn", global_batch=16)
    task = Task(cfg, seed=0)
    placed = task_on(task, gpu)
    replica = Replica(
        cfg, PrecisionTask(placed, precision, gpu), 0, placed.initial.clone(), torch.zeros(task.size, device=gpu),
        optimizer_on(FlatOptimizer(cfg.optimizer, 1, task.size), gpu), 0, bucket_ranges(task.size, [1.0, 1.0]),
        ShardSampler(len(task.data.y_train), 1, 0, 16, 0), 10, "gpu",
    )  # fmt: skip
    replica.forward_done(0)
    replica.step_done()
    assert replica.params.device == replica.grads.device == gpu
    assert replica.params.dtype == replica.grads.dtype == torch.float32
    assert torch.isfinite(replica.params).all() and not torch.equal(replica.params.cpu(), task.initial)
    assert task.initial.device.type == "cpu"  # rank 0 evaluates with the host task


def _real_config(tmp_path: Path, gpus: int, policies: list[str], **workload: Any) -> Path:
    config: dict[str, Any] = {
        "name": "gpu",
        "seed": 1,
        "iterations": 6,
        "cluster": {"topology": "star", "hosts": 1, "gpus_per_host": gpus, "gpu": "H100"},
        "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 5, "synthetic_layers": 2, **workload},
        "numerics": {"dataset": "digits", "model": "cnn", "global_batch": 32, "eval_every": 3},
        "policies": [{"name": name} for name in policies],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    ("backend", "gpus", "policies"), [("nccl", 1, ["ring", "ps"]), ("gloo", 2, ["hierarchical", "ps"])]
)
def test_syncsim_real_trains_on_the_gpu_as_numerics_mode(
    tmp_path: Path, backend: str, gpus: int, policies: list[str]
) -> None:
    """Workers on GPU 0, the parameter-server shard on the host: NCCL at one worker (the shard's
    traffic on the gloo control group), gloo at two (ring reduce-scatter staged through pinned memory)."""
    from real.launch import launch
    from sim.api import simulate

    path = _real_config(tmp_path, gpus, policies)
    outcome = launch(path, tmp_path / "out", nproc=gpus, timeout_s=120, backend=backend)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    for run in simulate(path).runs:  # the CPU's float32 against the GPU's: rounding apart
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("precision", ["tf32", "fp16", "bf16"])
def test_syncsim_real_trains_in_every_precision_on_the_gpu(tmp_path: Path, precision: str) -> None:
    from real.launch import launch

    path = _real_config(tmp_path, 1, ["ring", "ps"], precision=precision)
    outcome = launch(path, tmp_path / "out", nproc=1, timeout_s=120, backend="nccl")
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    assert all(np.isfinite(real[f"{label}/workers"]).all() for label in ("ring", "ps"))


# ---- calibration on the GPU: NCCL at world 1 (each measurement), gloo at two ranks sharing the GPU ----


def _calibration_worker(rank: int, backend: str, world: int, init: str, out: str) -> None:
    from real.calibrate import profiled
    from real.calibrate.run import calibrate
    from sim.config.numerics import NumericsConfig
    from sim.numerics.tasks import Task

    gpu = torch.device("cuda", 0)
    torch.cuda.set_device(gpu)
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    spec = profiled.ProfileSpec("resnet32", 8, "fp32")
    try:
        result: dict[str, Any] = {}
        if backend == "nccl":  # calibrate() needs two hosts: its measurements one by one, on the GPU
            task = Task(NumericsConfig(model="mlp", hidden=[16]), seed=0)
            (row,) = measure.compute(task, 8, 3, device=gpu, compute_device=gpu) or []  # token: was on the CPU
            profile, _ = profiled.measure(spec, 2, device=gpu) or (None, None)
            curve = measure.collective_curve([1 << 12, 1 << 20], 3, ops=measure.COLLECTIVE_OPS, device=gpu) or []
            result = {
                "compute_s": row.seconds,
                "profile_device": profile.device if profile else None,
                "collectives": [(s.op, s.nbytes, s.seconds) for s in curve],
            }
        else:  # two pretend hosts: the network over gloo (CPU tensors), the zoo model profiled on the GPU
            hosts, racks = ("hostA", "hostB"), {"hostA": "r0", "hostB": "r1"}
            options: dict[str, Any] = {"repeats": 3, "statistic": "min", "max_bytes": 1 << 22}
            report = calibrate(rank, world, hosts, racks, None, profile=spec, compute_device=gpu, **options)
            if report is not None:
                result = {"profile_device": report.profile.device, "workload": report.workload}
        torch.save(result, Path(out) / f"calibration-{backend}-rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("backend", "world"), [("nccl", 1), ("gloo", 2)])
def test_calibration_measures_on_the_gpu(tmp_path: Path, backend: str, world: int) -> None:
    port = free_port()
    mp.spawn(_calibration_worker, args=(backend, world, f"tcp://127.0.0.1:{port}", str(tmp_path)), nprocs=world)
    result = torch.load(tmp_path / f"calibration-{backend}-rank0.pt")
    assert result["profile_device"] == torch.cuda.get_device_name(0)  # CUDA events, not the CPU
    if backend == "nccl":
        assert result["compute_s"] > 0
        assert [(op, n) for op, n, _ in result["collectives"]] == [
            (op, n) for op in measure.COLLECTIVE_OPS for n in (1 << 12, 1 << 20)
        ]
    else:
        assert result["workload"] == {"model": "resnet32", "batch_size": 8, "precision": "fp32"}


# ---- what a GPU run must show: where each rank trained, loss scaling, NCCL across GPUs ----


def _ranks(out: Path) -> Any:
    import pandas as pd

    return pd.read_csv(out / "ranks.csv")


def test_workers_train_on_the_gpu_and_shards_stay_on_the_host(tmp_path: Path) -> None:
    """ranks.csv: each worker's parameters lived on its GPU, which held memory during the policy;
    the parameter-server shard kept its tensors on the host, away from the workers' GPU."""
    from real.launch import launch

    path = _real_config(tmp_path, 2, ["ring", "ps"])
    outcome = launch(path, tmp_path / "out", nproc=2, timeout_s=120, backend="gloo")
    assert outcome.ok, outcome.failed
    ranks = _ranks(tmp_path / "out")
    workers = ranks[ranks.role == "worker"]
    assert sorted(set(workers["rank"])) == [0, 1]
    assert (workers.device.str.startswith("cuda")).all()
    assert (workers.device_name == torch.cuda.get_device_name(0)).all()
    assert (workers.peak_memory_bytes > 0).all()
    shards = ranks[ranks.role.str.startswith("parameter-server")]
    assert len(shards) == 1 and (shards.device == "cpu").all()


def test_autocast_and_loss_scaling_fire_on_the_gpu() -> None:
    """fp16: the task's gradient runs under CUDA autocast in float16 and an overflowing gradient is
    recomputed at a lower scale; bf16: autocast in bfloat16, no loss scale."""
    from real.precision import PrecisionTask

    gpu = torch.device("cuda", 0)
    seen: list[Any] = []

    class Probe:
        initial = torch.zeros(3, device=gpu)

        def gradient(self, flat: Any, x: Any, y: Any, loss_scale: float = 1.0) -> tuple[Any, float]:
            product = torch.ones(4, 4, device=gpu) @ torch.ones(4, 4, device=gpu)
            seen.append((torch.is_autocast_enabled("cuda"), product.dtype, loss_scale))
            grad = torch.full((3,), loss_scale, device=gpu) / loss_scale
            return (grad if loss_scale < 2.0**10 else grad * float("inf")), 0.5

    fp16 = PrecisionTask(Probe(), "fp16", gpu)
    fp16.gradient(Probe.initial, None, None)
    assert all(enabled and dtype == torch.float16 for enabled, dtype, _ in seen)
    assert fp16.loss_scale is not None and fp16.loss_scale.overflows > 0 and seen[-1][2] < 2.0**10
    seen.clear()
    PrecisionTask(Probe(), "bf16", gpu).gradient(Probe.initial, None, None)
    assert seen == [(True, torch.bfloat16, 1.0)]


def _nccl_config(tmp_path: Path, gpus: int, policies: list[dict[str, Any]], sparse: bool = False) -> Path:
    """`gpus` workers on two hosts (one rack each when there are 4: hierarchical and DS-Sync groups
    within and across hosts)."""
    cluster: dict[str, Any] = {"topology": "two_tier", "racks": 2, "hosts_per_rack": 1, "gpus_per_host": gpus // 2}
    cluster.update(gpu="H100", nic_gbps=100, uplink_gbps=100)
    workload: dict[str, Any] = {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 5, "synthetic_layers": 2}
    numerics: dict[str, Any] = {"dataset": "digits", "model": "cnn", "global_batch": 32, "eval_every": 3}
    if sparse:
        workload = {"model": "deepfm", "batch_size": 8, "sparsity": {"topk": 0.05}}
        numerics = {"dataset": "synthetic", "model": "deepfm", "global_batch": 32, "eval_every": 5}
        numerics.update(zoo={"samples": 256, "features": 2000}, optimizer={"name": "sgd", "lr": 0.1, "momentum": 0})
    config = {"name": "nccl", "seed": 2, "iterations": 6, "cluster": cluster, "workload": workload}
    config.update(numerics=numerics, policies=policies)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


NCCL_RUNS = [
    (2, [{"name": "ring"}, {"name": "hierarchical"}, {"name": "ds_sync"}], False),
    (4, [{"name": "ring"}, {"name": "hierarchical"}, {"name": "ds_sync"}], False),
    (2, [{"name": "zen"}], True),
    (4, [{"name": "zen"}], True),
    # issue 46's policies: buffers, local ops, launched all-reduces (eager_diloco), a wire with error feedback,
    # declared top-k pairs and PowerSGD's low-rank factors, over NCCL across 4 ranks
    (
        4,
        [
            {"name": "diloco", "period": 2, "wire": "int8", "error_feedback": True},
            {"name": "eager_diloco", "period": 2},
            {"name": "topk", "ratio": 0.1},
            {"name": "powersgd", "rank": 2, "warmup_steps": 1},  # factor buffers and ops on CUDA tensors
        ],
        False,
    ),
]


def nodes_of_one(rank: int) -> dict[str, str]:
    """The environment that makes each rank a node of its own, as NCCL sees it, all on GPU 0:
    NCCL tells hosts apart by NCCL_HOSTID (else hostname and boot id) and refuses two ranks on one
    GPU only within a host, so ranks of different ids on one GPU talk over its socket transport.
    With fewer GPUs than workers this runs every multi-rank NCCL code path on one GPU. The NCCL
    settings are an emulated host's (`real.launch.emulated_host_env`), on the loopback interface."""
    return {**emulated_host_env(f"syncsim-gpu-test-{rank}", "lo"), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


@pytest.mark.parametrize(("gpus", "policies", "sparse"), NCCL_RUNS)
def test_nccl_across_ranks_trains_as_numerics_mode(tmp_path: Path, gpus: int, policies: list, sparse: bool) -> None:
    """NCCL with `gpus` workers, each on its own GPU (or, with fewer GPUs, each a node of its own on
    GPU 0: `nodes_of_one`): every policy ends with numerics mode's parameters (step 0's collective
    times are printed beside the later ones: a figure)."""
    import pandas as pd

    from real.launch import launch
    from sim.api import simulate

    own = torch.cuda.device_count() >= gpus
    path = _nccl_config(tmp_path, gpus, policies, sparse)
    out = tmp_path / "out"
    outcome = launch(path, out, nproc=gpus, timeout_s=120, backend="nccl", env_for=None if own else nodes_of_one)
    assert outcome.ok, outcome.failed
    real = np.load(out / "parameters.npz")
    for run in simulate(path).runs:
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-3, atol=1e-5)
    ranks = _ranks(out)
    for _, workers in ranks[ranks.role == "worker"].groupby("policy"):
        assert sorted(workers.device) == ([f"cuda:{i}" for i in range(gpus)] if own else ["cuda:0"] * gpus)
    ops = pd.read_csv(out / "ops.csv")
    ops = ops[ops.group >= 0]
    took = ops.finished_s - ops.launched_s
    first, later = took[ops.step == 0], took[ops.step > 0]
    # a figure, not a bound: that step 0 is free of communicator setup shows here as a step-0 max near the
    # later median; real/groups.py's warm_up does the setup before the clock starts
    print(f"collectives: step 0 max {first.max() * 1e3:.2f} ms, later median {later.median() * 1e3:.2f} ms")
    assert (took > 0).all() and len(first) > 0


def _overlap_worker(rank: int, init: str, out: str) -> None:
    """Rank 0 is in groups {0, 1} and {0, 2}. It starts waiting for a collective with rank 1, then
    issues one with rank 2, which must not queue behind the first. Rank 1 joins only once rank 0 has
    seen the second finish (a flag file), or after 60 s: if the second queued behind the first, the
    flag never comes before rank 1 joins, whatever the load (no time is compared)."""
    import os
    import threading
    import time

    from real.transport import complete  # how the executor's waiters wait

    own = torch.cuda.device_count() >= 3
    if not own:
        os.environ.update(nodes_of_one(rank))
    gpu = torch.device("cuda", rank if own else 0)
    torch.cuda.set_device(gpu)
    dist.init_process_group("nccl", init_method=init, rank=rank, world_size=3)
    flag = Path(out) / "quick-finished"
    try:
        slow, quick = dist.new_group([0, 1]), dist.new_group([0, 2])
        for group in (slow, quick):  # communicators created before anything is waited on
            if rank in dist.get_process_group_ranks(group):
                dist.all_reduce(torch.ones(1, device=gpu), group=group)
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            done = threading.Event()

            def wait_slow() -> None:
                complete([work], gpu)
                done.set()

            work = dist.all_reduce(torch.ones(1 << 20, device=gpu), group=slow, async_op=True)
            waiter = threading.Thread(target=wait_slow)
            waiter.start()
            time.sleep(0.2)  # the slow collective's waiter is waiting (ordering only; nothing is timed)
            complete([dist.all_reduce(torch.ones(1, device=gpu), group=quick, async_op=True)], gpu)
            partial = flag.with_suffix(".tmp")  # renamed, so rank 1 never reads half a file
            partial.write_text("slow done first" if done.is_set() else "slow still waiting")
            partial.replace(flag)
            waiter.join(timeout=120)
        elif rank == 1:
            deadline = time.monotonic() + 60.0  # only if the quick group never finishes (queued)
            while not flag.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            (Path(out) / "rank1-saw.txt").write_text(flag.read_text() if flag.exists() else "no flag")
            dist.all_reduce(torch.ones(1 << 20, device=gpu), group=slow)
        else:
            dist.all_reduce(torch.ones(1, device=gpu), group=quick)
        torch.cuda.synchronize()
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_a_late_group_does_not_hold_back_another_groups_collective(tmp_path: Path) -> None:
    """Waiting for one group's collective must not put the compute stream, and so every later
    collective, behind it (three ranks: on three GPUs, or as nodes of one on GPU 0): the quick group's
    collective finishes while the slow group's still waits for its late member."""
    port = free_port()
    mp.spawn(_overlap_worker, args=(f"tcp://127.0.0.1:{port}", str(tmp_path)), nprocs=3)
    assert (tmp_path / "rank1-saw.txt").read_text() == "slow still waiting"


def test_diloco_buffers_and_launches_run_on_cuda_tensors_over_gloo(tmp_path: Path) -> None:
    """Two workers share GPU 0 over gloo (`--backend gloo`: a process group of CUDA tensors): DiLoCo in
    fp32 and in int8 with error feedback, and Streaming DiLoCo (2 fragments of 2 buckets, an all-reduce
    launched and waited for a step later) keep their buffers on the GPU and end with the parameters of
    test_real_primitives' in-process reference on the CPU, to the CPU's and GPU's float32 rounding."""
    from test_real_primitives import ITERATIONS, config_path, reference

    from real.launch import launch

    policies = [
        {"name": "diloco", "period": 3, "warmup_steps": 2},
        {
            "name": "diloco",
            "label": "diloco_int8",
            "period": 3,
            "warmup_steps": 2,
            "wire": "int8",
            "error_feedback": True,
        },
        {"name": "streaming_diloco", "period": 4, "warmup_steps": 1, "fragments": 2, "overlap_steps": 1},
    ]
    path = config_path(tmp_path, policies, gpus=2)
    outcome = launch(path, tmp_path / "out", nproc=2, timeout_s=120, backend="gloo")
    assert outcome.ok, outcome.failed
    ranks = _ranks(tmp_path / "out")
    assert ranks[ranks.role == "worker"].device.str.startswith("cuda").all() and ITERATIONS > 8
    real = np.load(tmp_path / "out" / "parameters.npz")
    for entry in policies:
        label = entry.get("label", entry["name"])
        expected = reference(path, label)
        print(label, "max |real - reference|", float(np.abs(real[f"{label}/workers"] - expected).max()))
        np.testing.assert_allclose(real[f"{label}/workers"], expected, rtol=1e-3, atol=1e-5, err_msg=label)
