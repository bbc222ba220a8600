"""The gradient schemes of `policies/` as a DDP communication hook.

`policy_hook` is registered on a `DistributedDataParallel` model like torch's own hooks
(`model.register_comm_hook(state, policy_hook)`). For each bucket DDP hands over it runs the policy's
`on_gradients` program on the bucket's flat buffer through `real.collectives.start`, the same rules as
the real backend: AllReduce leaves the group mean, ReduceScatter narrows the bucket's later ops to
this rank's slice, AllGather widens it back. Ring and hierarchical (reduce-scatter / cross all-reduce
/ all-gather) therefore average the gradient exactly as DDP's default all-reduce does.

The program of a bucket runs to completion inside the hook and the hook returns a completed future.
Running the next bucket's program from a completion callback would overlap communication with
backward, but then ranks could interleave two buckets' collectives on one group in different
orders, which gloo and NCCL both require to be identical (the real backend's executor keeps
per-group queues for that; a hook has no place for them).

Parameter averaging (DS-Sync, `end_step` programs) runs after the optimizer step instead: see
`real.averager.PolicyAverager`. This module also holds what both share: the flat-tensor stand-in for
a replica, running a program, the up-front dry run that finds the groups, and building a view.
"""

# no `from __future__ import annotations`: DDP compares the hook's annotations with the real
# dist.GradBucket and Future[Tensor] objects, and string annotations fail that check
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
import torch.distributed as dist
from pydantic import TypeAdapter, ValidationError

from policies.base import Bucket, Policy
from policies.ops import (
    AllGather,
    AllReduce,
    Barrier,
    Collective,
    Group,
    LocalOp,
    Op,
    Payload,
    Program,
    ReduceScatter,
    step_ops,
)
from policies.registry import create
from policies.tensors import GRADIENTS, Buffer
from policies.view import ClusterView, ModelInfo
from real.collectives import start
from real.groups import ProcessGroups, planned_groups
from sim.cluster.topology import build_cluster
from sim.config import ClusterBase, ClusterConfig
from sim.errors import PolicyError
from sim.numerics.local_ops import TensorStore

Range = tuple[int, int]
PolicyLike = Union[str, Policy]
ViewLike = Union[ClusterView, ClusterBase, Mapping[str, Any]]

# the collectives `real.collectives.start` has tensor rules for
_RUNNABLE = (AllReduce, ReduceScatter, AllGather, Barrier)
_REMEDY = {
    Payload.GRADIENTS: "use real.hooks.policy_hook on the DDP model for it",
    Payload.PARAMETERS: "use real.averager.PolicyAverager after optimizer.step() for it",
}


class FlatReplica:
    """One flat tensor in the role of a replica for `real.collectives.start`.

    Every op acts on the whole tensor, narrowed to the slice the last unmatched ReduceScatter left
    (an AllGather widens it back to the enclosing range), as `sim.numerics.replica.Replica` does for
    one bucket. `payload` is the only meaning the tensor has; an op of another payload is an error.
    """

    def __init__(self, rank: int, policy: str, tensor: torch.Tensor, payload: Payload) -> None:
        if tensor.dim() != 1:
            raise ValueError(f"tensor: must be 1-D, got shape {tuple(tensor.shape)}")
        self.rank, self.policy, self.tensor, self.payload = rank, policy, tensor, payload
        self._slices: list[Range] = []

    def data(self, op: Collective) -> torch.Tensor:
        if op.payload is not self.payload:
            raise PolicyError(
                f"policy {self.policy!r}: {op!r} acts on {op.payload.value}, this tensor holds {self.payload.value}"
            )
        return self.tensor

    def range(self, bucket: Optional[int] = None) -> Range:
        return self._slices[-1] if self._slices else (0, self.tensor.numel())

    def push_slice(self, bucket: Optional[int], part: Range) -> None:
        """A ReduceScatter left this rank `part`: later ops act on it."""
        a, b = self.range()
        if not a <= part[0] <= part[1] <= b:
            raise ValueError(f"part: {part} is not inside the current range {(a, b)}")
        self._slices.append(part)

    def pop_slice(self, bucket: Optional[int]) -> Optional[Range]:
        """An AllGather gathers the last slice back: the enclosing range (None: nothing was scattered)."""
        if not self._slices:
            return None
        self._slices.pop()
        return self.range()


# ----------------------------------------------------------------------------------------- programs
def check_op(policy: Policy, hook: str, op: Op, payload: Payload) -> None:
    """Raise `PolicyError` naming the policy, the hook and the op when `op` cannot act on `payload`."""
    where = f"policy {policy.name!r} yields {op!r} in {hook}"
    if isinstance(op, LocalOp) and payload is Payload.GRADIENTS:
        return  # on the bucket's gradient and the policy's buffers of that bucket (`BucketTensors`)
    if not isinstance(op, Collective):
        raise PolicyError(
            f"{where}: parameter-server and clock ops need server processes, which DDP hooks and model "
            "averagers do not run; run this policy with the real backend (`syncsim real`)"
        )
    if not isinstance(op, _RUNNABLE):
        raise PolicyError(f"{where}: there is no tensor rule for {type(op).__name__} yet")
    if op.payload not in (payload, Payload.CONTROL):
        raise PolicyError(f"{where}, which acts on {op.payload.value}; {_REMEDY[op.payload]}")


def run_program(
    program: Program,
    target: FlatReplica,
    groups: ProcessGroups,
    policy: Policy,
    hook: str,
    step: int,
    store: Optional[TensorStore] = None,
) -> bool:
    """Run a program on `target` item by item (an item's ops concurrently); True if any op ran. `store`:
    the bucket's buffers (`BucketTensors`), which local ops and collectives naming a buffer act on."""
    ran = False
    for item in program:
        started = []
        for op in step_ops(item):
            check_op(policy, hook, op, target.payload)
            if isinstance(op, LocalOp):
                if store is None:
                    raise PolicyError(f"policy {policy.name!r} yields {op!r} in {hook}, where it declared no buffers")
                store.apply(op, [target.range()])
                continue
            assert isinstance(op, Collective)  # check_op allows collectives and local ops only
            pg = _process_group(groups, op.group, policy, step) if op.group.size > 1 else None
            started.append(start(op, _on_buffer(op, target, store), 0, pg))
        for s in started:
            if s.work is not None:
                s.work.wait()
            if s.finish is not None:
                s.finish()
        ran = ran or bool(started)
    return ran


def _on_buffer(op: Collective, target: FlatReplica, store: Optional[TensorStore]) -> FlatReplica:
    """What a collective acts on: the bucket itself, or the buffer (or factor buffer) it names."""
    if op.tensor is None or op.buffer == GRADIENTS or isinstance(op, Barrier):
        return target
    if store is None:
        raise PolicyError(f"policy {target.policy!r}: {op!r} names a buffer, and the policy declared none")
    if op.buffer in store.factors:
        tensor = store.factors.tensor(op.buffer, target.range())
    else:
        tensor = store.tensor(op.buffer)
    return FlatReplica(target.rank, target.policy, tensor, target.payload)


def _process_group(groups: ProcessGroups, group: Group, policy: Policy, step: int) -> Any:
    try:
        return groups.get(group)
    except KeyError:
        raise PolicyError(
            f"policy {policy.name!r} uses {group!r} at step {step}, which was not planned; its groups change "
            "with the step beyond the planned ones: pass steps= covering the run (or its schedule's cycle)"
        ) from None


def plan(
    policy: Policy,
    workers: int,
    steps: int,
    buckets: Sequence[Bucket],
    payload: Payload,
    run: Sequence[str],
) -> list[Group]:
    """Dry-run every rank's hooks for `steps` steps: the hooks in `run` may only yield ops on `payload`,
    begin_step and on_forward nothing at all (neither a DDP hook nor an averager has a place to run
    them). Returns the groups to create, in the same order on every process."""
    for step in range(steps):
        for rank in range(workers):
            for hook, program in _programs(policy, rank, step, buckets):
                for item in program:
                    for op in step_ops(item):
                        if hook in run:
                            check_op(policy, hook, op, payload)
                        elif hook in ("begin_step", "on_forward"):
                            raise PolicyError(
                                f"policy {policy.name!r} yields {op!r} in {hook}, which neither a DDP hook "
                                "nor a model averager can run; run it with the real backend (`syncsim real`)"
                            )
    return planned_groups(policy, workers, steps, buckets)


def _programs(policy: Policy, rank: int, step: int, buckets: Sequence[Bucket]) -> Iterator[tuple[str, Program]]:
    yield "begin_step", policy.begin_step(rank, step)
    for b in buckets:
        yield "on_forward", policy.on_forward(rank, step, b)
    for b in buckets:
        yield "on_gradients", policy.on_gradients(rank, step, b)
    yield "end_step", policy.end_step(rank, step)


def default_steps(policy: Policy, steps: Optional[int]) -> int:
    """Steps to plan: `steps`, else the policy's schedule cycle (`cycle_length`), else 1 (groups that
    do not change with the step, as in ring and hierarchical)."""
    if steps is not None:
        if steps < 1:
            raise ValueError(f"steps: must be at least 1, got {steps}")
        return steps
    if not hasattr(policy, "cycle_length"):
        return 1
    cycle = policy.cycle_length
    if cycle is None:
        raise ValueError(
            f"steps: policy {policy.name!r} draws fresh groups every step (no cycle); pass steps= the number of "
            "steps the run takes, since every group is created up front"
        )
    return int(cycle)


# ----------------------------------------------------------------------------------------- setup
def cluster_view(cluster: ViewLike, seed: int = 0) -> ClusterView:
    """A ClusterView from a view, a validated cluster config, or the mapping under `cluster:` in YAML."""
    if isinstance(cluster, ClusterView):
        return cluster
    if isinstance(cluster, Mapping):
        try:
            cluster = TypeAdapter(ClusterConfig).validate_python(dict(cluster))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"] if p not in ("star", "two_tier", "custom"))
            raise ValueError(f"cluster.{where}: {err['msg']}" if where else f"cluster: {err['msg']}") from None
    if not isinstance(cluster, ClusterBase):
        raise ValueError(f"view: expected a ClusterView, a cluster config or a mapping, got {type(cluster).__name__}")
    return build_cluster(cluster, seed).view


def resolve_policy(policy: PolicyLike, settings: Optional[Mapping[str, Any]]) -> Policy:
    """A registered name (or `module:Class`) with its settings, or a Policy object as it is."""
    if isinstance(policy, Policy):
        if settings:
            raise ValueError("settings: give settings with a policy name; a Policy object carries its own")
        return policy
    return create(policy, settings)


def trainable(params: Iterable[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    return [p for p in params if p.requires_grad]


def nbytes(params: Sequence[torch.Tensor]) -> float:
    return float(sum(p.numel() * p.element_size() for p in params))


def world_rank(view: ClusterView) -> int:
    """This process's rank, checking that the world matches the view's ranks."""
    if not dist.is_initialized():
        raise RuntimeError("torch.distributed is not initialized; call init_process_group first")
    world = dist.get_world_size()
    if world != view.world_size:
        raise ValueError(f"view: the cluster has {view.world_size} ranks but the process group has {world}")
    return dist.get_rank()


# ----------------------------------------------------------------------------------------- the hook
@dataclass
class PolicyHookState:
    """What `policy_hook` reads: settings (the bound policy, this rank, its process groups) apart from
    state (`step`, advanced after DDP's last bucket; `buckets`, DDP's bucket count as last seen)."""

    policy: Policy
    rank: int
    groups: ProcessGroups
    buckets: int  # passed to the policy as Bucket.count; an upper bound until the first step ends
    step: int = 0
    buffers: list[Any] = field(default_factory=list)  # the policy's declared buffers (checked by make_hook_state)
    stores: dict[int, tuple[list[tuple[int, ...]], TensorStore]] = field(
        default_factory=dict
    )  # bucket -> shapes, store
    # bucket -> shapes, TensorStore.state_dict: loaded from a checkpoint, applied when the bucket is next seen
    pending: dict[int, tuple[list[tuple[int, ...]], dict[str, Any]]] = field(default_factory=dict)

    def store(self, bucket: dist.GradBucket) -> Optional[TensorStore]:
        """The policy's buffers for `bucket` (None: it declares none): bucket-sized, kept across steps;
        made afresh when DDP hands over a bucket of other tensors (its rebuild after the first step)."""
        if not self.buffers:
            return None
        buffer, index = bucket.buffer(), bucket.index()
        shapes = [tuple(g.shape) for g in bucket.gradients()]
        held = self.stores.get(index)
        if held is None or held[0] != shapes:
            held = self.stores[index] = (shapes, TensorStore(buffer, buffer, self.buffers, shapes))
            saved = self.pending.pop(index, None)
            if saved is not None and saved[0] == shapes:  # a checkpoint's buffers for this very bucket
                held[1].load_state_dict(saved[1])
        held[1].tensors[GRADIENTS] = buffer
        return held[1]

    def state_dict(self) -> dict[str, Any]:
        """The step, the policy's state and every bucket's buffers (PowerSGD's residuals and warm-start
        factors, as torch's PowerSGDState keeps them)."""
        stores = {index: (shapes, store.state_dict()) for index, (shapes, store) in self.stores.items()}
        return {"step": self.step, "buckets": self.buckets, "policy": self.policy.state_dict(), "stores": stores}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step, self.buckets = int(state["step"]), int(state["buckets"])
        self.policy.load_state_dict(dict(state["policy"]))
        self.stores.clear()  # rebuilt from the checkpoint's as DDP hands each bucket over again
        self.pending = {int(i): (list(shapes), saved) for i, (shapes, saved) in dict(state.get("stores", {})).items()}


def policy_hook(state: PolicyHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Run `state.policy.on_gradients` on one DDP bucket; the future holds the synchronized gradient."""
    buffer = bucket.buffer()
    index = bucket.index()
    info = Bucket(index, float(buffer.numel() * buffer.element_size()), max(state.buckets, index + 1))
    target = FlatReplica(state.rank, state.policy.name, buffer, Payload.GRADIENTS)
    program = state.policy.on_gradients(state.rank, state.step, info)
    run_program(program, target, state.groups, state.policy, "on_gradients", state.step, state.store(bucket))
    if bucket.is_last():
        state.buckets = index + 1
        state.step += 1
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(buffer)
    return future


def make_hook_state(
    policy: PolicyLike,
    settings: Optional[Mapping[str, Any]],
    view: ViewLike,
    model: torch.nn.Module,
    *,
    steps: Optional[int] = None,
    seed: int = 0,
) -> PolicyHookState:
    """Bind `policy` to `view` and create its process groups; every rank calls it, in the same order.

    Buckets: DDP picks its own (by `bucket_cap_mb`, rebuilt after the first iteration) and the hook
    cannot know them in advance, but each holds at least one parameter. So the policy is bound and
    dry-run on the finest bucketing DDP could pick, one bucket per trainable parameter, last
    parameter first: its indices cover every index DDP may hand over. This assumes, as for every
    built-in policy, that groups depend on rank, step and bucket index, not on bucket bytes.
    Steps: see `default_steps`; a group not planned fails with a message naming it.
    The hook runs `on_gradients` only; a policy's `end_step` programs (parameter averaging) run in
    `real.averager.PolicyAverager(..., on_gradients=False)` next to it.
    """
    pol = resolve_policy(policy, settings)
    cluster = cluster_view(view, seed)
    params = trainable(model.parameters())
    if not params:
        raise ValueError("model: has no parameters that require grad")
    sizes = tuple(nbytes([p]) for p in reversed(params))
    shapes = tuple((tuple(p.shape),) for p in reversed(params))
    pol.bind(cluster, ModelInfo(nbytes(params), sizes, bucket_shapes=shapes))
    buckets = [Bucket(i, size, len(sizes)) for i, size in enumerate(sizes)]
    groups = plan(pol, cluster.world_size, default_steps(pol, steps), buckets, Payload.GRADIENTS, ("on_gradients",))
    declared = list(pol.buffers())
    if any(isinstance(b, Buffer) and b.initial == "parameters" for b in declared):
        raise PolicyError(
            f"policy {pol.name!r} declares a buffer starting from the parameters; a gradient hook holds none: "
            "run it with the real backend (`syncsim real`)"
        )
    rank = world_rank(cluster)
    return PolicyHookState(pol, rank, ProcessGroups(groups), len(sizes), buffers=declared)
