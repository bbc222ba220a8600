"""DS-Sync (divide and shuffle, Wang et al., arXiv 2007.03298): group-wise parameter averaging.

Each step the ranks are divided into disjoint groups that average their parameters inside the group,
all groups at once; between steps the groups change, so that over a cycle of patterns every rank's
updates reach every other rank. Optimizer state stays local. See docs/ds_sync.md.

Averaging runs optimizer-in-backward: as each gradient bucket is ready the worker steps its own
optimizer on that bucket's parameters, and the group all-reduces those parameters. For element-wise
optimizers this equals "step, then average the whole model", and it overlaps with the rest of
backward exactly as DDP's gradient all-reduce does.
"""

from __future__ import annotations

from math import lcm
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, Field

import policies.ds_schedule as ds
from policies.base import Bucket, Policy, PolicySettings, SettingError
from policies.ops import AllReduce, Group, Payload, Program
from policies.view import ClusterView, ModelInfo

# patterns kept ready (rank -> Group tables of the world size); cycles longer than this are rebuilt
# on demand, once per step for all ranks, so memory stays bounded at 4096 ranks
CACHED_PATTERNS = 256

Table = tuple[tuple[Group, ...], tuple[Group, ...]]  # (the pattern's groups, the group of each rank)


class DSSyncSettings(PolicySettings):
    group_size: Union[Literal["auto"], Annotated[int, Field(ge=1, le=2**20)]] = Field(
        "auto",
        description="ranks per group; auto = one island (a rack when uplinks are oversubscribed, else the "
        "whole cluster); larger values are clipped to the island",
    )
    schedule: Union[Literal["auto", "shuffle"], list[list[list[int]]]] = Field(
        "auto",
        description="auto: rack-local groups with periodic cross-rack pairs; shuffle: random groups each step; "
        "or a list of partitions (each a list of groups of ranks) cycled step by step",
    )
    mixing_period: int = Field(
        2,
        ge=1,
        le=1_000_000,
        description="auto schedule: one cross-rack mixing pattern every this many steps (2 = alternate)",
    )
    seed: int = Field(0, ge=0, lt=2**63, description="shuffle schedule: seeds the random groups")


# settings each schedule ignores: setting them is an error rather than a silent no-op
_UNUSED = {"auto": ("seed",), "shuffle": ("mixing_period",), "list": ("group_size", "mixing_period", "seed")}


class DSSync(Policy):
    """Divide and shuffle: each step disjoint groups average their parameters (all-reduce per bucket,
    optimizer-in-backward); the grouping changes from step to step so that information spreads to
    every rank. `schedule: auto` keeps groups inside racks when uplinks are oversubscribed and mixes
    racks through one rank pair per rack every `mixing_period` steps.
    """

    name = "ds_sync"
    Settings = DSSyncSettings

    def __init__(self, settings: BaseModel | None = None, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        schedule = self.settings.schedule
        kind = "list" if isinstance(schedule, list) else schedule
        for field in _UNUSED[kind]:
            if field in self.settings.model_fields_set:
                shown = "an explicit list" if kind == "list" else schedule
                raise SettingError(field, f"has no effect with schedule: {shown}; remove it")
        if kind == "list" and not schedule:
            raise SettingError("schedule", "an explicit schedule needs at least one partition")

    # -- plan -------------------------------------------------------------------------------------

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        s = self.settings
        self.world_size = view.world_size
        self.parameter_ratio = model.parameter_ratio  # bytes of parameters per byte of gradient, per bucket
        self.islands: tuple[tuple[int, ...], ...] = tuple(ds.islands(view))
        wanted = [len(i) for i in self.islands] if s.group_size == "auto" else [s.group_size] * len(self.islands)
        # a group never outgrows its island: a bigger one would cross an oversubscribed uplink
        self.group_sizes = tuple(min(g, len(i)) for g, i in zip(wanted, self.islands))
        self._cache: dict[int, Table] = {}
        self._known: dict[tuple[int, ...], Group] = {}  # groups shared by many patterns: one object each
        self.cycle_length: Optional[int]
        if isinstance(s.schedule, list):
            self._bind_explicit(s.schedule)
        elif s.schedule == "shuffle":
            self._bind_shuffle()
        else:
            self._bind_auto()

    def _bind_explicit(self, schedule: list[list[list[int]]]) -> None:
        world = self.world_size
        for i, partition in enumerate(schedule):
            problem = ds.partition_problem(partition, world)
            if problem:
                raise SettingError("schedule", f"partition {i} does not cover ranks 0..{world - 1} once: {problem}")
        parts = ds.components(schedule, world)
        if len(parts) > 1:
            raise SettingError(
                "schedule",
                f"the {len(schedule)} partitions together leave {ds.disconnection(parts)}; "
                "their replicas can never agree (add a group joining them)",
            )
        tables = [self._compile(p, keep=True) for p in schedule]
        self.cycle_length = len(tables)
        self._build = tables.__getitem__

    def _bind_shuffle(self) -> None:
        s, world = self.settings, self.world_size
        size = min(max(self.group_sizes) if s.group_size == "auto" else s.group_size, world)
        if size == 1 and world > 1:
            raise SettingError("group_size", "1 with schedule: shuffle never averages anything; use 2 or more")
        self.group_sizes = (size,)
        self.cycle_length = None  # a fresh random pattern every step: no cycle

        def build(step: int) -> Table:
            return self._compile(ds.shuffle_pattern(world, size, s.seed, step))

        self._build = build

    def _bind_auto(self) -> None:
        s, isl, sizes = self.settings, self.islands, self.group_sizes
        local = [self._compile(ds.local_pattern(isl, sizes, 0), keep=True)]
        shifted = any(g < len(i) for g, i in zip(sizes, isl))
        local.append(self._compile(ds.local_pattern(isl, sizes, 1), keep=True) if shifted else local[0])
        period = s.mixing_period
        if len(isl) < 2:
            self.cycle_length = len(local) if shifted else 1
            self._build = lambda c: local[c % 2]
        else:
            # ambassadors rotate over the largest island's ranks; the matchings alternate M_0, M_1
            mixings = lcm(2, max(len(i) for i in isl))
            self.cycle_length = period * mixings

            def build(c: int) -> Table:
                if (c + 1) % period == 0:
                    return self._compile(ds.mixing_pattern(isl, sizes, c // period))
                return local[(c - c // period) % 2]  # parity of the local patterns seen so far

            self._build = build
        self._check_auto_connected(self.cycle_length, local)

    def _check_auto_connected(self, cycle: int, local: list[Table]) -> None:
        """Union-find over the cycle's patterns; stops as soon as every rank is connected."""
        union, joined = ds.Components(self.world_size), []
        for c in range(cycle):
            table = self._table(c)
            if any(table is t for t in joined):  # a local pattern recurring: nothing new
                continue
            if any(table is t for t in local):
                joined.append(table)
            for group in table[0]:
                union.join(group.ranks)
            if union.count == 1:
                return
        s = self.settings
        field = "mixing_period" if s.mixing_period == 1 and min(self.group_sizes) > 1 else "group_size"
        raise SettingError(
            field,
            f"with group_size={s.group_size} and mixing_period={s.mixing_period} the auto schedule leaves "
            f"{ds.disconnection(union.parts())}; use a larger group_size or mixing_period >= 2",
        )

    def _compile(self, pattern: ds.Pattern, keep: bool = False) -> Table:
        """Groups and the rank -> Group table of one pattern; `keep` remembers its groups for reuse."""
        problem = ds.partition_problem(pattern, self.world_size)
        if problem:  # the built-in schedules partition by construction
            raise RuntimeError(f"ds_sync built a pattern that is not a partition ({problem}); this is a bug")
        by_rank: list[Group] = [None] * self.world_size  # type: ignore[list-item]
        groups = []
        for members in pattern:
            ranks = tuple(members)
            group = self._known.get(ranks) or Group(ranks)
            if keep:
                self._known[ranks] = group
            groups.append(group)
            for rank in ranks:
                by_rank[rank] = group
        return tuple(groups), tuple(by_rank)

    def _table(self, step: int) -> Table:
        key = step % self.cycle_length if self.cycle_length else step
        table = self._cache.get(key)
        if table is None:
            table = self._cache[key] = self._build(key)
            if len(self._cache) > CACHED_PATTERNS:  # first in, first out
                del self._cache[next(iter(self._cache))]
        return table

    def pinned_settings(self) -> dict[str, Any]:
        """`schedule: auto` becomes the explicit cycle of patterns it planned (its islands follow the
        uplinks' oversubscription, a measured figure); `shuffle` keeps its draw with `group_size`
        resolved. An explicit schedule is pinned already."""
        given = super().pinned_settings()
        if self.settings.schedule == "auto":
            assert self.cycle_length is not None  # the auto schedule is cyclic
            kept = {k: v for k, v in given.items() if k not in _UNUSED["list"]}
            cycle = [[list(group.ranks) for group in self.pattern(step)] for step in range(self.cycle_length)]
            return kept | {"schedule": cycle}
        if self.settings.schedule == "shuffle":
            return given | {"group_size": self.group_sizes[0]}
        return given

    def decisions(self) -> list[tuple[str, str, str]]:
        """The automatic schedule's islands and why (the uplinks' oversubscription decides them), and
        `group_size: auto` as resolved."""
        s, view, rows = self.settings, self.bound_view, []
        if s.schedule == "auto":
            worst = max((rack.oversubscription(view.hosts) for rack in view.racks.values()), default=0.0)
            sizes = sorted({len(i) for i in self.islands})
            shown = "/".join(map(str, sizes))
            if len(self.islands) > 1:
                value = f"{len(self.islands)} rack islands of {shown} ranks, racks mixed every {s.mixing_period} steps"
                why = f"uplinks oversubscribed (the most: {worst:.3g}:1 NIC bandwidth over uplink)"
            else:
                value = f"one island of {self.world_size} ranks"
                why = (
                    f"no uplink oversubscribed (the most: {worst:.3g}:1 NIC bandwidth over uplink)"
                    if view.racks
                    else "no racks"
                )
            rows.append(("schedule", value, f"auto: {why}"))
        if s.group_size == "auto" and not isinstance(s.schedule, list):
            sizes = sorted(set(self.group_sizes))
            why = "each island's ranks" if s.schedule == "auto" else "the largest island's ranks"
            rows.append(("group_size", "/".join(map(str, sizes)), f"auto: {why}"))
        return rows

    # -- what tests and docs inspect --------------------------------------------------------------

    def pattern(self, step: int) -> list[Group]:
        """The groups of `step`, ordered by their first rank (explicit schedules: as given)."""
        if self.view is None:
            raise RuntimeError(f"policy {self.name!r} used before bind(view, model)")
        return list(self._table(step)[0])

    def group_of(self, rank: int, step: int) -> Group:
        return self._table(step)[1][rank]

    # -- hooks ------------------------------------------------------------------------------------

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        # the local optimizer has just stepped this bucket's parameters; the group averages them
        group = self._table(step)[1][rank]
        if group.size > 1:  # the bucket's parameters: fp32 master weights, whatever type gradients travel in
            yield AllReduce(group, bucket.nbytes * self.parameter_ratio, payload=Payload.PARAMETERS)
