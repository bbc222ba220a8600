"""Local SGD (periodic model averaging): workers step alone and average their parameters every H steps."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from policies.base import Bucket, Policy, SettingError
from policies.membership import Membership
from policies.ops import (
    AllGather,
    AllReduce,
    Broadcast,
    Collective,
    Group,
    Payload,
    Program,
    ReduceScatter,
    groups_by_rank,
)
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
    each share crosses between replicas once.

    Workers leaving and joining (`ClusterView.membership`, policies.membership): at the first step of an
    outer round only, and whole replicas at a time. The averages run over the live replicas; at the step a
    replica comes back, the lowest rank that stayed hands it the state it missed (`hand_over`)."""

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
        self.replica_of, self.across_of = groups_by_rank(groups)
        self.membership = view.membership

    def membership_problems(self, membership: Membership) -> list[tuple[str, str]]:
        """Changes that are not at the first step of an outer round (or step 0), that split a replica, that
        leave no worker, or that leave nobody who stayed to hand the joiners the model."""
        w, h, problems = self.settings.warmup_steps, self.settings.period, []
        for step, kind, i in membership.boundaries():
            if step != 0 and (step < w or (step - w) % h):
                allowed = f"0, {w}, {w + h}, {w + 2 * h}, ..." if w else f"0, {h}, {2 * h}, ..."
                problems.append(
                    (
                        f"departures[{i}].{kind}",
                        f"{step} is not the first step of an outer round (warmup_steps {w}, period {h}: allowed "
                        f"{allowed})",
                    )
                )
            elif not membership.live(step):
                problems.append((f"departures[{i}].{kind}", f"no worker is left at step {step}"))
            elif kind == "join_step" and membership.source(step) is None:
                problems.append(
                    (f"departures[{i}].{kind}", f"no worker trains both before and at step {step} to hand over")
                )
        for absence in membership.absences:
            away = set(absence.ranks)
            cut = [g for g in self.replica_of.values() if away & set(g.ranks) and not set(g.ranks) <= away]
            split = cut[0] if cut else None
            if split is not None:
                problems.append(
                    (
                        f"departures[{absence.index}]",
                        f"takes part of the replica of ranks {list(split.ranks)} away; with replica: "
                        f"{self.settings.replica} whole replicas leave",
                    )
                )
        return problems

    def world_at(self, step: Optional[int]) -> Group:
        """The ranks live at `step` (None: every rank)."""
        if step is None or not self.membership.changes:
            return self.world
        return Group(self.membership.live(step))

    def across_at(self, rank: int, step: Optional[int]) -> Group:
        """`rank`'s peers in the other replicas that are live at `step` (None: all of them)."""
        across = self.across_of[rank]
        if step is None or not self.membership.changes:
            return across
        return Group(tuple(r for r in across.ranks if self.membership.is_live(r, step)))

    def warming_up(self, step: int) -> bool:
        return step < self.settings.warmup_steps

    def averages_after(self, step: int) -> bool:
        """Whether `step` ends with the replicas' parameters averaged."""
        local = step - self.settings.warmup_steps
        return local >= 0 and (local + 1) % self.settings.period == 0

    def begin_step(self, rank: int, step: int) -> Program:
        joining = self.membership.joining(step)
        if not joining:
            return
        source = self.membership.source(step)
        if rank == source or rank in joining:
            yield from self.hand_over(rank, Group((source, *joining)), source)  # type: ignore[arg-type]

    def hand_over(self, rank: int, group: Group, source: int) -> Program:
        """What `source` hands the workers joining at a round's first step (`group`: it and them): here the
        parameters, which every live replica shares after the last average."""
        yield Broadcast(group, self.bound_model.parameter_bytes, payload=Payload.PARAMETERS, root=source)

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        if self.warming_up(step):
            yield AllReduce(self.world_at(step), bucket.nbytes)
        elif self.replica_size > 1:
            yield AllReduce(self.replica_of[rank], bucket.nbytes)

    def end_step(self, rank: int, step: int) -> Program:
        if self.averages_after(step):
            yield from self.parameter_average(rank, self.bound_model.parameter_bytes, step=step)

    def parameter_average(
        self,
        rank: int,
        nbytes: float,
        tensor: Optional[str] = None,
        fragment: Optional[Fragment] = None,
        handle: Optional[str] = None,
        step: Optional[int] = None,
    ) -> Program:
        """Average `nbytes` of fp32 parameter-space values (of `tensor`; default the parameters) over the
        replicas live at `step` (None: all), in `wire` when set: one all-reduce, or with replicas of g ranks
        the 2-D all-reduce. `fragment` and `handle` need replicas of one rank (a launched 2-D all-reduce
        would need its three ops chained)."""
        where = {"tensor": tensor, "fragment": fragment, "handle": handle}
        if self.replica_size == 1:
            yield self._average_op(AllReduce, self.world_at(step), nbytes, where)
            return
        if fragment is not None or handle is not None:
            raise SettingError("replica", "fragments and launched averages need replica: rank")
        g, inside, across = self.replica_size, self.replica_of[rank], self.across_at(rank, step)
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
