"""policies/powersgd.py on torch.distributed against PyTorch's own `powerSGD_hook`: two gloo processes train
the same DDP model twice, once with torch's hook and once with `real.hooks.policy_hook` running the
`powersgd` policy, and every bucket's all-reduces (order, element count, type) and the final parameters
must be the same."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import spawn_ranks

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from real.hooks import make_hook_state, policy_hook  # noqa: E402

WORLD = 2
STEPS = 6
VIEW = {"topology": "star", "hosts": 2, "gpus_per_host": 1}
# (the policy's settings, torch's PowerSGDState arguments): the default rank-1 codec (biases travel as
# they are), rank 3 without warm start (the QR path, a fresh draw every step), and rank 2 with a rate low
# enough that every tensor is factored (no tensor travels as it is)
CASES = {
    "rank1": ({"rank": 1, "warmup_steps": 2}, {"matrix_approximation_rank": 1, "start_powerSGD_iter": 2}),
    "rank3_cold": (
        {"rank": 3, "warmup_steps": 2, "warm_start": False, "seed": 7},
        {"matrix_approximation_rank": 3, "start_powerSGD_iter": 2, "warm_start": False, "random_seed": 7},
    ),
    "rank2_all": (
        {"rank": 2, "warmup_steps": 3, "min_compression_rate": 0.5},
        {"matrix_approximation_rank": 2, "start_powerSGD_iter": 3, "min_compression_rate": 0.5},
    ),
}


def _mlp() -> Any:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    )


def _train(rank: int, register: Callable[[Any, Any, list], None], trace: list) -> list[Any]:
    model = _mlp()
    ddp = DDP(model, bucket_cap_mb=0.002)  # ~2 kB buckets: several per step
    register(ddp, model, trace)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
    for _ in range(STEPS):
        x, y = torch.randn(16, 24, generator=data), torch.randint(0, 4, (16,), generator=data)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def _traced(hook: Callable) -> Callable:
    """`hook`, marking in the trace where each bucket's all-reduces begin, and done before the next bucket's
    hook is called: torch's hook chains its three all-reduces in callbacks, and with several buckets in flight
    gloo ranks then issue them in different orders (a collective mismatch); waiting changes no value."""

    def traced(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        state[1].append(("bucket", bucket.index()))
        future = hook(state[0], bucket)
        future.wait()
        return future

    traced.__annotations__ = torch_powersgd.powerSGD_hook.__annotations__
    return traced


def _worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    trace: list = []
    all_reduce = dist.all_reduce

    def recorded(tensor: Any, *args: Any, **kwargs: Any) -> Any:  # both hooks call dist.all_reduce
        trace.append((tensor.numel(), str(tensor.dtype)))
        return all_reduce(tensor, *args, **kwargs)

    dist.all_reduce = recorded
    try:
        result: dict[str, Any] = {}
        for name, (ours, theirs) in CASES.items():
            state = torch_powersgd.PowerSGDState(None, **theirs)
            hook = _traced(torch_powersgd.powerSGD_hook)
            reference = _train(rank, lambda ddp, m, t, s=state, h=hook: ddp.register_comm_hook((s, t), h), trace)
            torch_trace = list(trace)
            trace.clear()

            def register(ddp: Any, model: Any, t: list, settings: dict = ours) -> None:
                ddp.register_comm_hook((make_hook_state("powersgd", settings, VIEW, model), t), _traced(policy_hook))

            got = _train(rank, register, trace)
            result[name] = {"torch": (reference, torch_trace), "ours": (got, list(trace))}
            trace.clear()
        result["plain"] = _train(rank, lambda ddp, m, t: None, [])
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        dist.all_reduce = all_reduce
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return spawn_ranks(_worker, WORLD, tmp_path_factory.mktemp("real_powersgd"))


def _by_bucket(trace: list) -> list[tuple[int, list]]:
    """The trace cut at each bucket mark: (bucket index, its all-reduces)."""
    calls: list[tuple[int, list]] = []
    for entry in trace:
        if entry[0] == "bucket":
            calls.append((entry[1], []))
        else:
            calls[-1][1].append(entry)
    return calls


@pytest.mark.slow
def test_powersgd_moves_what_torchs_hook_moves_and_ends_on_its_parameters(ranks: list[dict[str, Any]]) -> None:
    numel = sum(p.numel() for p in _mlp().parameters())
    for name, (_, theirs) in CASES.items():
        for rank, result in enumerate(ranks):
            (reference, torch_trace), (got, ours_trace) = result[name]["torch"], result[name]["ours"]
            expected, actual = _by_bucket(torch_trace), _by_bucket(ours_trace)
            assert len({b for b, _ in expected}) > 1, "the check needs several DDP buckets"
            assert actual == expected, f"{name}: rank {rank}'s all-reduces differ from torch's hook"
            # warm-up steps all-reduce each bucket whole, then three all-reduces a bucket, moving less in all
            lengths = [len(calls) for _, calls in expected]
            assert set(lengths) == {1, 3} and lengths == sorted(lengths)
            compressed = STEPS - theirs["start_powerSGD_iter"]
            assert lengths.count(3) % compressed == 0
            assert sum(n for _, calls in expected if len(calls) == 3 for n, _ in calls) < compressed * numel
            for a, b in zip(reference, got):
                assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{name}: rank {rank}'s parameters differ"
            # the codec changed the training: the parameters are not plain data parallelism's
            assert max(float((a - b).abs().max()) for a, b in zip(got, result["plain"])) > 1e-4
        assert all(torch.equal(a, b) for a, b in zip(ranks[0][name]["ours"][0], ranks[1][name]["ours"][0]))
    # rank 2 with rate 0.5 factors every tensor: the first all-reduce of each bucket carries nothing
    calls = _by_bucket(ranks[0]["rank2_all"]["torch"][1])
    assert all(bucket[0][0] == 0 for _, bucket in calls if len(bucket) == 3)
