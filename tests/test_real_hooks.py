"""real/hooks.py and real/averager.py: the DDP hook against DDP's own all-reduce, and the DS-Sync
averager against the mean of each group's parameters, in one spawn of four gloo processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import spawn_ranks

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from policies.ops import AllReduce, Group, Payload, ReduceScatter  # noqa: E402
from policies.registry import create  # noqa: E402
from policies.view import ModelInfo  # noqa: E402
from real.averager import PolicyAverager, make_averager  # noqa: E402
from real.hooks import (  # noqa: E402
    FlatReplica,
    PolicyHookState,
    cluster_view,
    default_steps,
    make_hook_state,
    policy_hook,
)
from sim.errors import PolicyError  # noqa: E402

WORLD = 4
VIEW = {"topology": "star", "hosts": 2, "gpus_per_host": 2}  # 2 hosts x 2 GPUs
DS_SETTINGS = {"group_size": 2}  # on one island of 4: groups {0,1},{2,3} then {3,0},{1,2}
STEPS = 3
CALLS = 3


# --------------------------------------------------------------------------------------- in-process
def test_flat_replica_nests_reduce_scatter_slices() -> None:
    flat = FlatReplica(1, "hierarchical", torch.arange(10.0), Payload.GRADIENTS)
    assert flat.range() == (0, 10)
    assert flat.pop_slice(0) is None  # nothing scattered: AllGather acts on the whole tensor
    flat.push_slice(0, (5, 10))
    flat.push_slice(0, (5, 7))
    assert flat.range(0) == (5, 7)
    assert flat.pop_slice(0) == (5, 10)
    assert flat.pop_slice(0) == (0, 10)
    with pytest.raises(ValueError, match="part"):
        flat.push_slice(0, (8, 12))


def test_flat_replica_rejects_the_other_payload() -> None:
    flat = FlatReplica(0, "ds_sync", torch.zeros(4), Payload.GRADIENTS)
    group = Group.of([0, 1])
    assert flat.data(ReduceScatter(group, 16.0)) is flat.tensor
    with pytest.raises(PolicyError, match="ds_sync.*parameters"):
        flat.data(AllReduce(group, 16.0, payload=Payload.PARAMETERS))


def test_parameter_policies_cannot_be_a_gradient_hook() -> None:
    model = torch.nn.Linear(3, 2)
    with pytest.raises(PolicyError, match="'ds_sync'.*on_gradients.*PolicyAverager"):
        make_hook_state("ds_sync", DS_SETTINGS, VIEW, model)
    with pytest.raises(PolicyError, match="'ps'.*syncsim real"):
        make_hook_state("ps", None, VIEW, model)
    with pytest.raises(PolicyError, match="'ring'.*gradients.*policy_hook"):
        make_averager("ring", None, VIEW, model)


def test_setup_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match="cluster.hosts"):
        cluster_view({"topology": "star", "hosts": 0})
    with pytest.raises(ValueError, match="settings"):
        make_hook_state(create("ring"), {"x": 1}, VIEW, torch.nn.Linear(3, 2))
    shuffle = create("ds_sync", {"schedule": "shuffle", "group_size": 2})
    shuffle.bind(cluster_view(VIEW), ModelInfo(8.0, (8.0,)))
    with pytest.raises(ValueError, match="steps"):
        default_steps(shuffle, None)
    assert default_steps(shuffle, 5) == 5
    with pytest.raises(RuntimeError, match="init_process_group"):
        make_hook_state("ring", None, VIEW, torch.nn.Linear(3, 2))  # plans fine, then needs the world


# --------------------------------------------------------------------------------------- four ranks
class _Bucket:
    """What `PolicyHookState.store` reads of a DDP GradBucket."""

    def __init__(self, index: int, shapes: list[tuple[int, ...]]) -> None:
        self._index, self._shapes = index, shapes
        self._buffer = torch.zeros(sum(torch.Size(shape).numel() for shape in shapes))

    def index(self) -> int:
        return self._index

    def buffer(self) -> Any:
        return self._buffer

    def gradients(self) -> list[Any]:
        return [torch.zeros(shape) for shape in self._shapes]


def test_a_checkpoint_keeps_every_buckets_buffers_factors_and_optimizer_state() -> None:
    """PowerSGD's residuals and warm-start Q survive `state_dict` / `load_state_dict` (through torch.save), bucket
    by bucket, applied when DDP hands the same bucket over again; a bucket of other tensors starts afresh."""
    import io

    policy = create("powersgd", {"rank": 1})
    shapes = [[(3, 4)], [(5,)]]
    policy.bind(cluster_view(VIEW), ModelInfo(68.0, (48.0, 20.0), bucket_shapes=(((3, 4),), ((5,),))))

    def fresh() -> PolicyHookState:
        return PolicyHookState(policy, 0, None, 2, buffers=list(policy.buffers()))  # type: ignore[arg-type]

    state = fresh()
    for index, bucket_shapes in enumerate(shapes):
        store = state.store(_Bucket(index, bucket_shapes))
        assert store is not None
        store.tensor("powersgd_error").fill_(index + 1.5)
        store.factors.tensor("powersgd_q", (0, store.tensor("powersgd_error").numel())).fill_(index - 2.0)
        store.states["outer"] = {"momentum": torch.full((4,), 7.0 + index)}
    saved = io.BytesIO()
    torch.save(state.state_dict(), saved)
    saved.seek(0)
    loaded = fresh()
    loaded.load_state_dict(torch.load(saved, weights_only=False))
    for index, bucket_shapes in enumerate(shapes):
        store = loaded.store(_Bucket(index, bucket_shapes))
        assert store is not None
        assert torch.equal(store.tensor("powersgd_error"), torch.full_like(store.tensor("powersgd_error"), index + 1.5))
        (q,) = store.factors.tensors.values()
        assert torch.equal(q, torch.full_like(q, index - 2.0))
        assert torch.equal(store.states["outer"]["momentum"], torch.full((4,), 7.0 + index))
    other = fresh()
    other.load_state_dict(state.state_dict())
    store = other.store(_Bucket(0, [(2, 6)]))  # same size, other tensors: DDP rebuilt its buckets
    assert store is not None and not store.tensor("powersgd_error").any() and not store.factors.tensors


def _mlp() -> Any:
    torch.manual_seed(0)  # the same initial model on every rank, as DDP's broadcast would make it anyway
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))


def _batch(rank: int, step: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(8, 5, generator=g), torch.randn(8, 3, generator=g)


def _ddp_run(rank: int, policy: str | None) -> dict[str, Any]:
    """A few SGD steps of DDP with the policy's hook (None: DDP's default all-reduce)."""
    model = DDP(_mlp(), bucket_cap_mb=1e-4)  # ~100-byte buckets: several per step, odd sizes
    state = None
    if policy is not None:
        state = make_hook_state(policy, None, VIEW, model)
        model.register_comm_hook(state, policy_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        x, y = _batch(rank, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "grads": [p.grad.clone() for p in model.parameters()],
        "step": None if state is None else state.step,
        "buckets": None if state is None else state.buckets,
    }


def _flat(params: Any) -> Any:
    return torch.cat([p.detach().reshape(-1) for p in params])


def _averager_run(rank: int) -> dict[str, Any]:
    """DS-Sync calls on rank-specific parameters; records every rank's values before each call."""
    model = torch.nn.Linear(5, 3)
    model.register_parameter("frozen", torch.nn.Parameter(torch.full((3,), float(rank))))  # never gets a .grad
    torch.manual_seed(rank)
    with torch.no_grad():
        for p in (model.weight, model.bias):
            p.normal_()
    averager = make_averager("ds_sync", DS_SETTINGS, VIEW, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    calls = []
    for call in range(CALLS):
        x, y = _batch(rank, 100 + call)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        trained = [model.weight, model.bias]
        before = [torch.zeros_like(_flat(trained)) for _ in range(WORLD)]
        dist.all_gather(before, _flat(trained))
        group = averager.policy.group_of(rank, averager.step).ranks
        # the first call passes an optimizer's parameter groups, as torch's averagers accept
        averager.average_parameters(opt.param_groups if call == 0 else model.parameters())
        calls.append({"before": torch.stack(before), "after": _flat(trained), "group": group})
    return {"calls": calls, "frozen": model.frozen.detach().clone(), "step": averager.step}


def _worker(rank: int, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        result = {name: _ddp_run(rank, policy) for name, policy in [("reference", None), ("ring", "ring")]}
        result["hierarchical"] = _ddp_run(rank, "hierarchical")
        result["averager"] = _averager_run(rank)
        torch.save(result, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return spawn_ranks(_worker, WORLD, tmp_path_factory.mktemp("real_hooks"))


@pytest.mark.slow
def test_four_ranks_hooks_match_ddp_and_averager_matches_group_means(ranks: list[dict[str, Any]]) -> None:
    # (a) every hook against a reference run without it: DDP's default all-reduce
    for policy in ("ring", "hierarchical"):
        for rank, result in enumerate(ranks):
            ref, got = result["reference"], result[policy]
            assert got["step"] == STEPS
            assert got["buckets"] > 1, "the check needs several DDP buckets"
            for name in ("grads", "params"):
                for a, b in zip(ref[name], got[name]):
                    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), f"{policy}: rank {rank} {name} differ"
        # the reference itself keeps the replicas identical, and the data differ per rank
        assert torch.equal(_flat(ranks[0][policy]["params"]), _flat(ranks[3][policy]["params"]))
    assert not torch.allclose(_flat(ranks[0]["reference"]["grads"]), _flat(_mlp().parameters()))

    # (b) DS-Sync: each group's members hold the mean of the group's values before the call
    policy = create("ds_sync", DS_SETTINGS)
    policy.bind(cluster_view(VIEW), ModelInfo(72.0, (72.0,)))
    for rank, result in enumerate(ranks):
        avg = result["averager"]
        assert avg["step"] == CALLS
        assert torch.equal(avg["frozen"], torch.full((3,), float(rank))), "a parameter without .grad moved"
        for call, record in enumerate(avg["calls"]):
            assert record["group"] == policy.group_of(rank, call).ranks
            members = list(record["group"])
            expected = record["before"][members].mean(0)
            assert torch.allclose(record["after"], expected, atol=1e-6), f"rank {rank} call {call}"
            assert not torch.allclose(record["after"], record["before"][rank]), "nothing was averaged"
    # the groups change between calls as the schedule says: {0,1},{2,3} then {3,0},{1,2}
    assert [sorted(ranks[0]["averager"]["calls"][c]["group"]) for c in range(CALLS)] == [[0, 1], [0, 3], [0, 1]]
    assert [sorted(ranks[2]["averager"]["calls"][c]["group"]) for c in range(CALLS)] == [[2, 3], [1, 2], [2, 3]]


def test_averager_needs_a_bound_policy_and_a_rank_of_the_view() -> None:
    with pytest.raises(ValueError, match="policy"):
        PolicyAverager(create("ds_sync"), 0, None)  # type: ignore[arg-type]
    bound = create("ds_sync", DS_SETTINGS)
    bound.bind(cluster_view(VIEW), ModelInfo(8.0, (8.0,)))
    with pytest.raises(ValueError, match="rank"):
        PolicyAverager(bound, 4, None)  # type: ignore[arg-type]
