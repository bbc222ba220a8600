"""Hierarchical (2-D) all-reduce: reduce-scatter locally, all-reduce across, all-gather locally."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from policies.base import Bucket, Policy, SettingError
from policies.ops import AllGather, AllReduce, Collective, Group, Program, ReduceScatter, groups_by_rank
from policies.view import ClusterView, ModelInfo
from policies.wire_settings import WireSettings, gradient_op


class HierarchicalSettings(WireSettings):
    level: Literal["auto", "host", "rack"] = Field(
        "auto", description="what a local group shares; auto: host when hosts hold several GPUs, else rack"
    )


class Hierarchical(Policy):
    """Ranks sharing a host (or rack) form a local group of size g; the i-th members of all local
    groups form cross group i. A bucket of n bytes is reduce-scattered in the local group, each
    rank all-reduces its n/g shard over its cross group, and the local group all-gathers the result.
    `level: auto` picks 'host' when hosts hold several GPUs, else 'rack'. With a `wire` set, all three
    ops send in it.
    """

    name = "hierarchical"
    Settings = HierarchicalSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        level = self.settings.level
        if level == "auto":
            multi_gpu = any(len(h.ranks) > 1 for h in view.hosts.values())
            level = "host" if multi_gpu or not view.racks else "rack"
        if level == "rack" and not view.racks:
            raise SettingError("level", "'rack' needs a topology with racks; allowed here: auto, host")
        self.level = level
        local_groups = view.local_groups(level)
        sizes = sorted({len(g) for g in local_groups})
        if len(sizes) > 1:
            raise SettingError(
                "level", f"every {level} must hold the same number of ranks for a 2-D all-reduce, got sizes {sizes}"
            )
        self.local_size = sizes[0]
        self._ops: dict[tuple[type[Collective], Group, float], Collective] = {}
        self._programs: dict[tuple[int, float], tuple[Collective, ...]] = {}  # (rank, bucket bytes) -> program
        self.local_of, self.cross_of = groups_by_rank(local_groups)

    @property
    def host_symmetric(self) -> bool:
        """Host-level groups: each host's local group is its own, each cross group holds one rank of host 0
        (a subclass may issue other ops, so it says so itself)."""
        return type(self) is Hierarchical and self.level == "host"

    def pinned_settings(self) -> dict[str, Any]:
        return super().pinned_settings() | {"level": self.level}

    def decisions(self) -> list[tuple[str, str, str]]:
        if self.settings.level != "auto":
            return []
        why = "hosts hold several GPUs" if self.level == "host" else "every host holds one GPU"
        return [("level", self.level, f"auto: {why}; local groups of {self.local_size} ranks")]

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        key = (rank, bucket.nbytes)
        program = self._programs.get(key)
        if program is None:
            local, n = self.local_of[rank], bucket.nbytes
            program = self._programs[key] = (
                self._op(ReduceScatter, local, n),
                self._op(AllReduce, self.cross_of[rank], n / self.local_size),
                self._op(AllGather, local, n),
            )
        return program

    def _op(self, kind: type[Collective], group: Group, nbytes: float) -> Collective:
        """One op object per (kind, group, size), shared by every member and step: backends check an
        op they have seen before only for membership."""
        key = (kind, group, nbytes)
        op = self._ops.get(key)
        if op is None:
            op = self._ops[key] = gradient_op(kind, group, nbytes, self.settings, self.bound_model)
        return op
