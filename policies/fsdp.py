"""Sharded data parallelism (PyTorch FSDP, DeepSpeed ZeRO): each rank holds a shard of the model's state and
gathers the parameters a unit needs just before computing it.

A *unit* is a gradient bucket of the workload: FSDP wraps modules into units and DDP cuts buckets by size,
both in backward order, so the bucket partition stands in for the wrapping. Parameters are gathered in the
gradients' type (FSDP's `MixedPrecision` with `param_dtype` = `reduce_dtype`), so a unit's all-gather moves
its bucket's bytes. Per unit and step, over the shard group of g ranks (all ranks, or one host / rack /
datacenter under `hybrid`):

- `full` (FSDP FULL_SHARD, ZeRO-3): all-gather before forward, again before backward (the parameters were
  freed after forward; `reshard_after_forward: false` keeps them, as SHARD_GRAD_OP does), reduce-scatter of
  the gradient: 3(g - 1)/g of the unit's bytes out of each rank, against DDP's 2(g - 1)/g.
- `grad_op` (SHARD_GRAD_OP, ZeRO-2) and `optimizer` (ZeRO-1): all-gather before forward, reduce-scatter of the
  gradient: 2(g - 1)/g, the ZeRO paper's volume for both (they differ in the memory they keep, not in what they
  send: Rajbhandari et al., arXiv 1910.02054, section 7).
- `hybrid` (HYBRID_SHARD): `full` inside each shard group, and each rank's 1/g shard of the reduced gradient
  all-reduced across the replicas (the ranks with the same place in every group).

Every rank steps only its shard: `optimizer_share` = 1/g. Numerics mode and the real backend carry the ops out
on real tensors: a reduce-scatter leaves each rank the mean gradient on its FSDP-padded piece of the unit, the
rank steps that piece only, and the next all-gather of the parameters overwrites its stale copies of the others'
pieces; evaluations gather the full model (sim/numerics/shards.py). The real backend also frees what a rank
does not own between steps (real/sharding.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from policies.base import Bucket, Policy, PolicySettings, SettingError
from policies.held import HeldState
from policies.ops import AllGather, AllReduce, Payload, Program, ReduceScatter, groups_by_rank
from policies.view import ClusterView, ModelInfo


class FSDPSettings(PolicySettings):
    strategy: Literal["full", "grad_op", "optimizer", "hybrid"] = Field(
        "full",
        description="what is sharded: full (FSDP FULL_SHARD, ZeRO-3), grad_op (ZeRO-2), optimizer (ZeRO-1), "
        "hybrid (full inside each shard_group, replicated across)",
    )
    shard_group: Literal["host", "rack", "datacenter"] = Field(
        "host", description="hybrid only: the ranks that shard one replica"
    )
    reshard_after_forward: bool = Field(
        True, description="full and hybrid: free gathered parameters after forward and gather them again for backward"
    )


class FSDP(Policy):
    """Sharded data parallelism; the module's text says what each `strategy` sends."""

    name = "fsdp"
    Settings = FSDPSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        s = self.settings
        if s.strategy == "hybrid":
            try:
                groups = view.local_groups(s.shard_group)
            except ValueError as exc:
                raise SettingError("shard_group", f"{exc}; allowed: host, rack, datacenter") from None
            if len({len(g) for g in groups}) > 1:
                raise SettingError("shard_group", "every shard group must hold the same number of ranks")
        else:
            groups = [tuple(range(view.world_size))]
        self.shard_of, self.replicas_of = groups_by_rank(groups)
        self.group_size = len(groups[0])

    @property
    def host_symmetric(self) -> bool:
        """One shard group of every rank, or one per host (`hybrid` at host level, its replica groups each
        holding one rank of host 0); a subclass may issue other ops, so it says so itself."""
        s = self.settings
        return type(self) is FSDP and (s.strategy != "hybrid" or s.shard_group == "host")

    @property
    def optimizer_share(self) -> float:
        return 1.0 / self.group_size

    def held_state(self) -> HeldState:
        """A 1/g shard of the master weights, their gradients and the optimizer state (ZeRO-1 shards only the
        optimizer state). Gathered at the peak, the start of backward: the unit backward needs and the next
        one prefetched, or every unit where parameters stay gathered from forward on (`grad_op`, no
        reshard after forward); ZeRO-1 computes on its replica. Buffers: a unit's unsharded gradient and the
        next one's, reduce-scattered in turn; ZeRO-1 all-reduces DDP's flat buckets."""
        s, model, share = self.settings, self.bound_model, 1.0 / self.group_size
        if s.strategy == "optimizer":
            return HeldState(optimizer=share, buffer_bytes=model.gradient_bytes)
        unit = max(model.bucket_bytes)
        in_flight = min(2.0 * unit, model.gradient_bytes)
        stays = s.strategy == "grad_op" or not s.reshard_after_forward
        gathered = model.gradient_bytes if stays else in_flight
        return HeldState(share, share, share, gathered_bytes=gathered, buffer_bytes=in_flight)

    def on_forward(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllGather(self.shard_of[rank], bucket.nbytes, payload=Payload.PARAMETERS)

    def on_backward(self, rank: int, step: int, bucket: Bucket) -> Program:
        s = self.settings
        if s.strategy in ("full", "hybrid") and s.reshard_after_forward:
            yield AllGather(self.shard_of[rank], bucket.nbytes, payload=Payload.PARAMETERS)

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield ReduceScatter(self.shard_of[rank], bucket.nbytes)
        if self.settings.strategy == "hybrid" and self.replicas_of[rank].size > 1:
            yield AllReduce(self.replicas_of[rank], bucket.nbytes / self.group_size)
