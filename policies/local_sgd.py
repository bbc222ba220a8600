"""Local SGD (periodic model averaging): workers step alone and average their parameters every H steps."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from policies.base import Bucket, Policy, SettingError
from policies.ops import AllGather, AllReduce, Collective, Group, Payload, Program, ReduceScatter
from policies.tensors import Fragment
from policies.view import ClusterView, ModelInfo
from policies.warmup import WarmupSettings
from policies.wire_settings import WireName, WireSettings

MAX_PERIOD = 100_000  # past this no run of any config here averages at all; a typo, not a schedule
PARAMETER_BYTES_PER_VALUE = 4  # parameters travel as fp32 master weights (policies.ops: the PARAMETERS default)


class LocalSGDSettings(WireSettings, WarmupSettings):
    wire: Optional[WireName] = Field(
        None, description="element type the parameter averaging travels in (docs/policies.md); unset: fp32"
    )
    period: int = Field(4, description=f"H: local steps between two parameter averagings (1 to {MAX_PERIOD})")
    replica: Literal["rank", "host", "rack", "datacenter"] = Field(
        "rank",
        description="the ranks that train one replica, data parallel (gradients all-reduced every step among "
        "them): each rank alone, or all of a host, rack or datacenter",
    )

    @field_validator("period")
    @classmethod
    def _period_in_range(cls, period: int) -> int:
        if not 1 <= period <= MAX_PERIOD:
            raise ValueError(f"allowed: an integer from 1 to {MAX_PERIOD} (got {period})")
        return period


class LocalSGD(Policy):
    """Steps 0 .. warmup_steps-1 all-reduce every gradient bucket over one ring of all ranks (as `ring`);
    from then on each worker steps on its own gradients, and after every `period`-th such step the
    replicas' parameters are averaged by one all-reduce of the whole model (in `wire` when set), so
    that after step warmup_steps + k*period - 1 (k >= 1) every replica holds the mean of the replicas.

    `replica` other than `rank`: the g ranks of each host (rack, datacenter) train one replica and
    all-reduce their gradients every step among themselves; the average runs as a 2-D all-reduce (reduce-
    scatter inside the replica, all-reduce of each 1/g share across replicas, all-gather inside), so that
    each share crosses between replicas once."""

    name = "local_sgd"
    Settings = LocalSGDSettings

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        self.world = Group.of(range(view.world_size))
        try:
            groups = view.local_groups(self.settings.replica)
        except ValueError as exc:
            raise SettingError("replica", f"{exc}; allowed: rank, host, rack, datacenter") from None
        sizes = sorted({len(g) for g in groups})
        if len(sizes) > 1:
            raise SettingError("replica", f"every replica must hold the same number of ranks, got sizes {sizes}")
        self.replica_size = sizes[0]
        self.replica_of = {r: Group(g) for g in groups for r in g}
        self.across_of = {g[i]: Group(tuple(h[i] for h in groups)) for g in groups for i in range(len(g))}

    def warming_up(self, step: int) -> bool:
        return step < self.settings.warmup_steps

    def averages_after(self, step: int) -> bool:
        """Whether `step` ends with the replicas' parameters averaged."""
        local = step - self.settings.warmup_steps
        return local >= 0 and (local + 1) % self.settings.period == 0

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if self.warming_up(step):
            yield AllReduce(self.world, bucket.nbytes)
        elif self.replica_size > 1:
            yield AllReduce(self.replica_of[rank], bucket.nbytes)

    def end_step(self, rank: int, step: int) -> Program:
        if self.averages_after(step):
            yield from self.parameter_average(rank, self.bound_model.parameter_bytes)

    def parameter_average(
        self,
        rank: int,
        nbytes: float,
        tensor: Optional[str] = None,
        fragment: Optional[Fragment] = None,
        handle: Optional[str] = None,
    ) -> Program:
        """Average `nbytes` of fp32 parameter-space values (of `tensor`; default the parameters) over the
        replicas, in `wire` when set: one all-reduce over every rank, or with replicas of g ranks the 2-D
        all-reduce. `fragment` and `handle` need replicas of one rank (a launched 2-D all-reduce would
        need its three ops chained)."""
        where = {"tensor": tensor, "fragment": fragment, "handle": handle}
        if self.replica_size == 1:
            yield self._average_op(AllReduce, self.world, nbytes, where)
            return
        if fragment is not None or handle is not None:
            raise SettingError("replica", "fragments and launched averages need replica: rank")
        g, inside, across = self.replica_size, self.replica_of[rank], self.across_of[rank]
        where = {"tensor": tensor}
        yield self._average_op(ReduceScatter, inside, nbytes, where)
        yield self._average_op(AllReduce, across, nbytes / g, where)
        yield self._average_op(AllGather, inside, nbytes, where)

    def _average_op(self, kind: type[Collective], group: Group, nbytes: float, where: dict) -> Collective:
        s = self.settings
        if s.wire is None:
            return kind(group, nbytes, payload=Payload.PARAMETERS, **where)
        values = nbytes / PARAMETER_BYTES_PER_VALUE
        return kind(group, elements=values, wire=s.wire, block=s.block, payload=Payload.PARAMETERS, **where)
