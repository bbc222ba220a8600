"""Policies used by the tests, loaded through `module:Class` paths like any third-party policy."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from policies.base import Bucket, Policy
from policies.local_sgd import LocalSGD, LocalSGDSettings
from policies.ops import AllReduce, Group, Op, Program
from policies.view import ClusterView, ModelInfo


class InterleavedRings(Policy):
    """Even ranks and odd ranks all-reduce in two separate rings, which cross the same links at
    times set by each group's own rendezvous: two collectives genuinely competing."""

    name = "interleaved_rings"

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        ranks = range(view.world_size)
        self.groups = [Group.of(r for r in ranks if r % 2 == 0), Group.of(r for r in ranks if r % 2 == 1)]

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllReduce(self.groups[rank % 2], bucket.nbytes)


class YieldsGarbage(Policy):
    """Yields a value that is not an op at step 2."""

    name = "yields_garbage"

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if step == 2:
            yield 42  # type: ignore[misc]
        yield AllReduce(Group.of(range(self.bound_view.world_size)), bucket.nbytes)


class ForeignGroup(Policy):
    """Issues a collective on a group it is not a member of."""

    name = "foreign_group"

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllReduce(Group.of([(rank + 1) % self.bound_view.world_size]), bucket.nbytes)


class HalfTheRanks(Policy):
    """Only rank 0 enters a world all-reduce: the others never do, so rank 0 waits forever."""

    name = "half_the_ranks"

    def end_step(self, rank: int, step: int) -> Program:
        if rank == 0:
            yield AllReduce(Group.of(range(self.bound_view.world_size)), 1.0)


class MismatchedSizes(Policy):
    """Ranks disagree on the size of the same all-reduce."""

    name = "mismatched_sizes"

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllReduce(Group.of(range(self.bound_view.world_size)), bucket.nbytes + rank)


class NegativeBytes(Policy):
    name = "negative_bytes"

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        op: Op = AllReduce(Group.of(range(self.bound_view.world_size)), -1.0)
        yield op


class ClockedAsyncPS(Policy):
    """Asynchronous pushes and pulls on one shard, with an SSP-style bound of `staleness` steps."""

    name = "clocked_async_ps"
    staleness = 1

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.server_host = view.worker_hosts[0]

    def servers(self):  # type: ignore[no-untyped-def]
        from policies.ops import ServerSpec

        return [ServerSpec(shard=0, host=self.server_host, sync=False, apply_s_per_mb=0.001)]

    def begin_step(self, rank: int, step: int) -> Program:
        from policies.ops import WaitForClock

        yield WaitForClock(step - self.staleness)

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        from policies.ops import Pull, Push

        yield Push(0, bucket.nbytes)
        yield Pull(0, bucket.nbytes)


class SparseOnEndStep(Policy):
    """A sparse all-gather from a whole-model hook, where no gradient bucket says whose rows move."""

    name = "sparse_on_end_step"

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))

    def end_step(self, rank: int, step: int) -> Program:
        from policies.ops import AllGather, Density, SparseCoding

        yield AllGather(self.world, 8.0, density=Density.SPARSE, coding=SparseCoding("none"))


class LaxSettings(BaseModel):
    """Settings of a plug-in that does not derive from PolicySettings (plain pydantic: inf allowed)."""

    scale: float = 1.0


class LaxSettingsPolicy(Policy):
    """A ring all-reduce whose plug-in settings model skips the project's strict base."""

    name = "lax_settings"
    Settings = LaxSettings

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllReduce(Group.of(range(self.bound_view.world_size)), bucket.nbytes)


class WireBytesApart(Policy):
    """Declares a bf16 all-reduce of a bucket's values but gives the bucket's fp32 bytes as nbytes."""

    name = "wire_bytes_apart"

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        world = Group.of(range(self.bound_view.world_size))
        yield AllReduce(world, bucket.nbytes, elements=self.bound_model.gradient_values(bucket.nbytes), wire="bf16")


class ReplicaSettings(LocalSGDSettings):
    level: Literal["rack", "world"] = "rack"


class ReplicaPerRack(LocalSGD):
    """DiLoCo's timing with M replicas of several GPUs as Charles et al. (arXiv 2503.09799, Appendix A.2) model
    it: every step all-reduces the gradient inside the rank's rack (a star datacenter is one rack; `level: world`
    makes one replica of all ranks), and every `period` steps one flat ring over all ranks all-reduces the model.
    The built-in `replica: datacenter` averages by a 2-D all-reduce instead (tests/test_diloco_closed_form.py
    holds both to their closed forms)."""

    name = "replica_per_rack"
    Settings = ReplicaSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        if self.settings.level == "world":
            self.replicas = {r: self.world for r in range(view.world_size)}
        else:
            groups = [Group.of(g) for g in view.local_groups("rack")]
            self.replicas = {r: g for g in groups for r in g.ranks}

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllReduce(self.replicas[rank], bucket.nbytes)


class ButterflySettings(BaseModel):
    interleaved: bool = False


class ButterflyBuckets(Policy):
    """Every bucket all-reduced over all ranks by the butterfly (hivemind's), not the ring; `interleaved`: even
    and odd ranks in two butterflies that compete for the same links, as InterleavedRings' rings do."""

    name = "butterfly_buckets"
    Settings = ButterflySettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        ranks = range(view.world_size)
        if self.settings.interleaved:
            self.groups = [Group.of(r for r in ranks if r % 2 == 0), Group.of(r for r in ranks if r % 2 == 1)]
        else:
            self.groups = [Group.of(ranks)] * 2

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield AllReduce(self.groups[rank % 2], bucket.nbytes, algorithm="butterfly")
