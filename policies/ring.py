"""Ring all-reduce of every gradient bucket across all workers (data-parallel BSP, as in DDP/NCCL)."""

from __future__ import annotations

from policies.base import Bucket, Policy
from policies.ops import AllReduce, Group, Program
from policies.view import ClusterView, ModelInfo
from policies.wire_settings import WireSettings, gradient_op


class Ring(Policy):
    """Each bucket is all-reduced over one ring of all ranks, in rank order, in the settings' `wire`
    type when one is set."""

    name = "ring"
    Settings = WireSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))

    @property
    def host_symmetric(self) -> bool:
        """One ring of every rank; a subclass may issue other ops, so it says so itself."""
        return type(self) is Ring

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if self.settings.wire is None:
            yield AllReduce(self.world, bucket.nbytes)
        else:
            yield gradient_op(AllReduce, self.world, bucket.nbytes, self.settings, self.bound_model)
