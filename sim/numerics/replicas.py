"""The simulated workers' replicas, and what each collective does to the members' tensors.

`params[r]` and `grads[r]` are worker r's flat parameters and gradient: rows of two shared tensors,
viewed by one `Replica` per worker (`replica.py`: batches, the local optimizer step, which element
range an op acts on) and held, with the policy's buffers (`Policy.buffers`), by one `TensorStore` per
worker (`local_ops.py`: what local ops do). This module adds the cross-worker rules, applied when the
simulator completes an op, to the op's buffer (`Collective.buffer`: `tensor`, else the parameters or
gradients as its payload says), over its region narrowed to its `fragment`:

- AllReduce: every member gets the group mean. A fragment of several buckets is gathered end to end,
  reduced as one tensor and written back (a dense AllReduce only).
- ReduceScatter: member i gets the mean of the i-th slice (`shards.shards`: chunks of ceil(n / p) elements,
  as FSDP pads a flat parameter), and its later ops on that bucket act on that slice until an AllGather
  gathers the slices back (so 2-D all-reduce nests correctly; a slice still held at the end of a step is
  the shard the rank owns and steps, `shards.full_models` the model its owners hold).
- AllGather: every member gets every member's slice.
- A dense gradient op (payload GRADIENTS) of two or more members rounds what travels to
  `workload.gradient_precision`
  (`replica.through_wire`): each member's values, and the sum the collective forms in that type.
  Parameter-space buffers (payload PARAMETERS: the parameters, DiLoCo's pseudo-gradient) travel in fp32.
- A dense op with a `wire` of two or more members reduces and gathers as `wire_cast` says (a ring
  in a native type, fp32 sums of decoded blocks for a scaled one); every member ends with the same
  values, the sender of an AllGather slice included.
- Sparse AllToAll and AllGather (ops with a `coding`): on (index, value) pairs, see
  `sim.numerics.sparse_rules`; the members end with the mean, as after an AllReduce. Pair values
  travel in `workload.gradient_precision` too (`sparse_rules.on_wire`).
- Push (gradients): the pushes of one program item split the range in proportion to their bytes;
  the shard receives the values as they are when the push is issued, rounded to the wire type.
  Pull (parameters): the rank's range is overwritten with the servers' values when the shard
  replies, rounded to the wire type (the servers keep theirs in fp32).

The real backend (`real/`) carries out the same rules with torch.distributed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import torch

from policies.lowrank import FactorBuffer
from policies.membership import Membership
from policies.ops import (
    AllGather,
    AllReduce,
    AllToAll,
    Barrier,
    Broadcast,
    Collective,
    LocalOp,
    Op,
    Payload,
    Pull,
    Push,
    ReduceScatter,
)
from policies.tensors import Buffer
from sim.config.numerics import NumericsConfig
from sim.config.sparsity import SparsityConfig
from sim.errors import PolicyError
from sim.numerics.batches import ShardSampler, per_worker_batch
from sim.numerics.local_ops import TensorStore, op_ranges
from sim.numerics.optim import FlatOptimizer
from sim.numerics.replica import Range, Replica, bucket_ranges, partition, through_wire, wire_dtype
from sim.numerics.servers import ServerTensors, Update
from sim.numerics.shards import full_models, shards
from sim.numerics.sparse_rules import Pairs, on_wire, reduce_pairs, scatter, sent_pairs, split_by_owner
from sim.numerics.tasks import Task
from sim.numerics.wire_rules import same_sizes, wired

__all__ = ["Replicas", "Range", "bucket_ranges", "partition"]

Rows = Sequence[torch.Tensor]  # one flat tensor per rank (indexed by rank), or gathered copies keyed by rank


class Replicas:
    def __init__(
        self,
        cfg: NumericsConfig,
        task: Task,
        world: int,
        bucket_bytes: Sequence[float],
        iterations: int,
        seed: int,
        policy: str,
        servers: bool,
        sparsity: Optional[SparsityConfig] = None,
        gradient_precision: str = "fp32",
        buffers: Sequence[Buffer | FactorBuffer] = (),
        global_tensor: Optional[str] = None,
    ) -> None:
        """`sparsity`: the workload's (its `topk` sparsifies every worker's real gradient);
        `gradient_precision`: the type dense gradient collectives send (`WorkloadConfig.wire_precision`);
        `buffers`: the policy's (`local_ops.phase_buffers`); `global_tensor`: the buffer evaluated as the model
        (`Policy.global_tensor`; the phase runner sets it per phase), None: the replicas' mean."""
        self.cfg, self.task, self.world, self.iterations, self.policy = cfg, task, world, iterations, policy
        self.membership = Membership(world)  # ranks away at some steps: the run sets the policy's
        self.wire = wire_dtype(gradient_precision)
        n = task.size
        self.params = task.initial.repeat(world, 1)
        self.grads = torch.zeros(world, n)
        self.optimizer = FlatOptimizer(cfg.optimizer, world, n)
        self.ranges = bucket_ranges(n, bucket_bytes)
        batch = per_worker_batch(cfg.global_batch, world)
        n_train = len(task.data.y_train)
        self.replicas = [
            Replica(
                cfg,
                task,
                r,
                self.params[r],
                self.grads[r],
                self.optimizer,
                r,
                self.ranges,
                ShardSampler(n_train, world, r, batch, seed),
                iterations,
                policy,
                sparsity=sparsity,
                gradient_precision=gradient_precision,
            )
            for r in range(world)
        ]
        self.buffers = list(buffers)
        shapes = task.tensor_shapes
        self.stores = [TensorStore(self.params[r], self.grads[r], self.buffers, shapes) for r in range(world)]
        self._rows = {name: [store.tensors[name] for store in self.stores] for name in self.stores[0].tensors}
        self.global_tensor = global_tensor
        self._owned: dict[tuple[Optional[int], int], Pairs] = {}  # (bucket, owner rank) -> its reduced share
        self.server = ServerTensors(cfg, task.initial, world, iterations) if servers else None
        self.serving = servers  # the phase running now has servers (policies.phases)

    @property
    def losses(self) -> list[list[float]]:
        """Per worker: minibatch losses since the last evaluation (the evaluator clears them)."""
        return [rep.losses for rep in self.replicas]

    # ----------------------------------------------------------------------------- worker timeline
    def forward_done(self, rank: int, step: int) -> None:
        self.replicas[rank].forward_done(step)

    def step_done(self, rank: int, step: int) -> None:
        self.replicas[rank].step_done()

    # ----------------------------------------------------------------------------- collectives
    def arrive(self, rank: int, op: Collective, bucket: Optional[int]) -> None:
        self.replicas[rank].arrive(op, bucket)

    def collective_done(self, op: Collective, buckets: Mapping[int, Optional[int]]) -> None:
        """Carry out `op` on the members' tensors; `buckets` maps each member to its program's bucket."""
        if isinstance(op, Barrier) or op.payload is Payload.CONTROL:
            return
        if isinstance(op, Broadcast):  # a joiner takes the source's tensor or optimizer state
            for r in op.group.ranks:
                if r != op.root:
                    self.stores[r].take_from(self.stores[op.root], op, [self._region(op, r, buckets[r])])
            return
        if op.buffer in self.stores[0].factors:
            self._factors(op, buckets)
            return
        data = self.rows(op.buffer)
        ranks = op.group.ranks
        reps = self.replicas
        if op.fragment is not None:
            self._fragment(op, data, ranks, buckets)
            return
        if op.coding is not None:
            self._sparse(op, data, ranks, buckets)
            return
        if op.wire is not None and len(ranks) > 1:
            wired(op, data, ranks, buckets, self.replicas, self.policy)
            return
        if isinstance(op, AllGather):
            self._all_gather(op, data, ranks, buckets)
            return
        ranges = [reps[r].range(buckets[r]) for r in ranks]
        p = len(ranks)
        self._same_sizes(op, ranges)
        if isinstance(op, AllReduce):
            self._all_reduce(op, data, ranks, ranges)
        elif isinstance(op, ReduceScatter):
            parts = [shards(a, b, p) for a, b in ranges]
            for i, r in enumerate(ranks):
                mean = self._mean(op, [data[q][parts[j][i][0] : parts[j][i][1]] for j, q in enumerate(ranks)])
                lo, hi = parts[i][i]
                data[r][lo:hi] = mean
                reps[r].push_slice(buckets[r], (lo, hi))
        else:
            raise PolicyError(
                f"policy {self.policy!r}: numerics mode has no tensor rule for {type(op).__name__}; "
                "run this policy with numerics disabled"
            )

    def _all_reduce(self, op: Collective, data: Rows, ranks: Sequence[int], ranges: Sequence[Range]) -> None:
        mean = self._mean(op, [data[r][a:b] for r, (a, b) in zip(ranks, ranges)])
        for r, (a, b) in zip(ranks, ranges):
            data[r][a:b] = mean

    def _fragment(self, op: Collective, data: Rows, ranks: Sequence[int], buckets: Mapping[int, Optional[int]]) -> None:
        """A dense AllReduce narrowed to a fragment: its buckets' elements gathered end to end, reduced
        as one tensor (a wire's blocks start at the first), written back."""
        if not isinstance(op, AllReduce) or op.coding is not None:
            raise PolicyError(
                f"policy {self.policy!r}: numerics mode narrows only a dense AllReduce to a fragment, got {op!r}"
            )
        spans = [op_ranges(self.ranges, self._region(op, r, buckets[r]), op.fragment) for r in ranks]
        gathered = {r: torch.cat([data[r][a:b] for a, b in span]) for r, span in zip(ranks, spans)}
        self._reduce_whole(op, gathered, buckets)
        for r, span in zip(ranks, spans):
            offset = 0
            for a, b in span:
                data[r][a:b] = gathered[r][offset : offset + b - a]
                offset += b - a

    def _factors(self, op: Collective, buckets: Mapping[int, Optional[int]]) -> None:
        """A dense AllReduce on a factor buffer (`lowrank_rules.Factors`): each member's factors of its region."""
        ranks = op.group.ranks
        if not isinstance(op, AllReduce) or op.coding is not None or op.fragment is not None:
            raise PolicyError(f"policy {self.policy!r}: a factor buffer takes a dense AllReduce only, got {op!r}")
        if any(buckets[r] is None for r in ranks):
            raise PolicyError(f"policy {self.policy!r}: {op!r} on a factor buffer belongs in a bucket's program")
        data = {r: self.stores[r].factors.tensor(op.buffer, self.replicas[r].range(buckets[r])) for r in ranks}
        self._reduce_whole(op, data, buckets)

    def _reduce_whole(
        self, op: Collective, data: dict[int, torch.Tensor], buckets: Mapping[int, Optional[int]]
    ) -> None:
        """A dense AllReduce of each member's whole tensor in `data` (in its `wire`, if any)."""
        ranks = op.group.ranks
        ranges = [(0, data[r].numel()) for r in ranks]
        self._same_sizes(op, ranges)
        if op.wire is not None and len(ranks) > 1:
            wired(op, data, ranks, buckets, self.replicas, self.policy, ranges)  # type: ignore[arg-type]
        else:
            self._all_reduce(op, data, ranks, ranges)  # type: ignore[arg-type]

    def _on_wire(self, op: Collective) -> Optional[torch.dtype]:
        """The type `op` sends its values in: `wire` for gradients between two or more members."""
        return self.wire if op.payload is Payload.GRADIENTS and op.group.size > 1 else None

    def _mean(self, op: Collective, values: Sequence[torch.Tensor]) -> torch.Tensor:
        """The members' mean as `op` leaves it: in fp32, or summed in the wire type, then averaged in fp32."""
        wire = self._on_wire(op)
        if wire is None:
            return torch.stack(list(values)).mean(dim=0)
        total = torch.stack([through_wire(v, wire) for v in values]).sum(dim=0)
        return through_wire(total, wire) / len(values)

    def _all_gather(
        self, op: Collective, data: Rows, ranks: Sequence[int], buckets: Mapping[int, Optional[int]]
    ) -> None:
        p = len(ranks)
        whole = []
        for r in ranks:
            rep = self.replicas[r]
            enclosing = rep.pop_slice(buckets[r])  # gathering a reduce-scatter's slices: its enclosing range
            whole.append(enclosing if enclosing is not None else rep.range(buckets[r]))
        self._same_sizes(op, whole)
        parts = [shards(a, b, p) for a, b in whole]
        for i, r in enumerate(ranks):
            lo, hi = parts[i][i]
            values = through_wire(data[r][lo:hi], self._on_wire(op)).clone()  # what the others receive
            for j, q in enumerate(ranks):
                if q != r:
                    a, b = parts[j][i]
                    data[q][a:b] = values

    def _sparse(self, op: Collective, data: Rows, ranks: Sequence[int], buckets: Mapping[int, Optional[int]]) -> None:
        """Sparse AllToAll and AllGather on (index, value) pairs (`sim.numerics.sparse_rules`)."""
        coding = op.coding
        assert coding is not None
        if op.payload is not Payload.GRADIENTS:
            raise PolicyError(f"policy {self.policy!r}: sparse ops carry gradients, got {op!r}")
        ranges = [self.replicas[r].range(buckets[r]) for r in ranks]
        self._same_sizes(op, ranges)
        p, size, bucket = len(ranks), ranges[0][1] - ranges[0][0], buckets[ranks[0]]
        wire = self._on_wire(op)
        pairs = [on_wire(sent_pairs(data[r][a:b], coding), wire) for r, (a, b) in zip(ranks, ranges)]
        if isinstance(op, AllToAll):
            sent = [split_by_owner(mine, coding, p, size) for mine in pairs]
            for j in range(p):
                self._owned[(bucket, ranks[j])] = reduce_pairs([sent[i][j] for i in range(p)], size, p)
            return
        if coding.partition == "none":
            result = scatter([reduce_pairs(pairs, size, p)], size, data[0].dtype)
        else:
            missing = [r for r in ranks if (bucket, r) not in self._owned]
            if missing:
                raise PolicyError(
                    f"policy {self.policy!r}: {op!r} gathers owners' shares, but no sparse AllToAll on "
                    f"bucket {bucket} reduced them first"
                )
            result = scatter([on_wire(self._owned.pop((bucket, r)), wire) for r in ranks], size, data[0].dtype)
        for r, (a, b) in zip(ranks, ranges):
            data[r][a:b] = result

    def rows(self, buffer: str) -> list[torch.Tensor]:
        """Every worker's flat tensor `buffer`, indexed by rank (views: writing them writes the replicas)."""
        found = self._rows.get(buffer)
        if found is None:
            names = ", ".join(sorted(self._rows))
            raise PolicyError(f"policy {self.policy!r}: no buffer {buffer!r} in numerics mode; buffers: {names}")
        return found

    def _region(self, op: Op, rank: int, bucket: Optional[int]) -> Range:
        """Where `op` acts on worker `rank`: its bucket's (or slice's) range, the whole vector in a
        whole-model hook; a fragment belongs to whole-model hooks only."""
        if getattr(op, "fragment", None) is not None and bucket is not None:
            raise PolicyError(
                f"policy {self.policy!r}: {op!r} names a fragment in a bucket's program (bucket {bucket}); "
                "fragments narrow whole-model hooks (begin_step, end_step)"
            )
        return self.replicas[rank].range(bucket)

    # ----------------------------------------------------------------------------- local ops
    def local(self, rank: int, op: LocalOp, bucket: Optional[int]) -> None:
        """Worker `rank` issues local op `op` in bucket `bucket`'s program (None: a whole-model hook)."""
        self.stores[rank].apply(op, op_ranges(self.ranges, self._region(op, rank, bucket), op.fragment))  # type: ignore[attr-defined]

    def _same_sizes(self, op: Collective, ranges: Sequence[Range]) -> None:
        same_sizes(self.policy, op, ranges)

    # ----------------------------------------------------------------------------- servers
    def push_updates(self, rank: int, bucket: Optional[int], pushes: Sequence[Push]) -> list[Update]:
        return self.replicas[rank].push_updates(bucket, pushes, self.server is not None)

    def pull_ranges(self, rank: int, bucket: Optional[int], pulls: Sequence[Pull]) -> list[Range]:
        return self.replicas[rank].pull_ranges(bucket, pulls)

    def pulled(self, rank: int, ranges: Sequence[Range]) -> None:
        """The servers' reply arrived: overwrite those elements with the servers' values, as they
        arrive in the wire type (a sparse pull on the real backend sends only the rows that changed,
        and rounds the rest of the range in place, which gives the same)."""
        assert self.server is not None
        lo, hi = min(a for a, _ in ranges), max(b for _, b in ranges)
        if sum(b - a for a, b in ranges) == hi - lo:  # one item's pulls: contiguous, one copy
            self.params[rank, lo:hi] = through_wire(self.server.params[lo:hi], self.wire)
            return
        for a, b in ranges:
            self.params[rank, a:b] = through_wire(self.server.params[a:b], self.wire)

    # ----------------------------------------------------------------------------- phases
    def restart(self, from_servers: bool, updates: int) -> torch.Tensor:
        """A switch between phases (policies.phases): checkpoint the model (the servers' parameters
        if the phase that ended ran servers, else the replicas' mean) and restart every replica and
        the servers from it; `updates` worker-iterations are done (the servers' schedules go on).
        Returns the checkpoint."""
        servers = from_servers and self.server is not None
        checkpoint = self.server.params.clone() if servers else self.consensus().clone()  # type: ignore[union-attr]
        self.params[:] = checkpoint
        for store in self.stores:  # the buffers restart too: from the checkpoint, or zeros; no optimizer state
            store.restart(checkpoint, self.buffers)
        if self.server is not None:
            self.server.begin_phase(checkpoint, updates)
        return checkpoint

    # ----------------------------------------------------------------------------- models
    def full(self, ranks: Optional[Sequence[int]] = None) -> torch.Tensor:
        """The replicas of `ranks` (default all) as full models: where a rank holds a shard (a ReduceScatter's
        slice not gathered back), the other elements from their owners (`shards.full_models`)."""
        rows = list(range(self.world)) if ranks is None else list(ranks)
        params = self.params if ranks is None else self.params[rows]
        return full_models(params, [self.replicas[r].owned() for r in rows])

    def gather_shards(self) -> None:
        """Write every replica's full model into it (the end of a run: FSDP's full state dict)."""
        self.params.copy_(self.full())

    def global_model(self, rank: int) -> Optional[torch.Tensor]:
        """Worker `rank`'s copy of the policy's global model (`global_tensor`), None when it names none."""
        return None if self.global_tensor is None else self.stores[rank].tensors[self.global_tensor]

    @property
    def scored(self) -> str:
        """Which model `consensus` is: `servers`, the global tensor's name, or `mean` of the replicas."""
        if self.server is not None and self.serving:
            return "servers"
        return self.global_tensor or "mean"

    def consensus(
        self, replicas: Optional[torch.Tensor] = None, global_model: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """The servers' model while a phase with servers runs; else the policy's global model
        (`global_model`: a live worker's copy taken earlier; default: the first worker's live at the last step,
        now: every live worker holds the same one, having applied the same ops to the same reduced values); else
        the mean of the replicas (`replicas`: copies taken earlier, one row per live worker; default: those
        live at the last step, now)."""
        if self.server is not None and self.serving:
            return self.server.params
        live = list(self.membership.live(self.iterations - 1)) if self.membership.changes else []
        if self.global_tensor is not None:
            first = live[0] if live else 0
            return global_model if global_model is not None else self.stores[first].tensors[self.global_tensor]
        if replicas is None:
            replicas = self.full(live or None)  # a view unless some worker is away or holds a shard
        return replicas.mean(dim=0)
