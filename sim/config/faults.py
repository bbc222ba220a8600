"""Config sections for heterogeneity and faults: slow workers, transient stragglers, background traffic, and
workers that leave the run and come back (departures).

Everything here is seeded by the config's `seed` and described in units in the key names.
Targets are workers (`ranks`, whose host NIC carries network effects) or rack uplinks (`uplinks`:
rack names, or `all`).
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, Field, model_validator

from sim.config.types import MAX_COUNT, Factor, Fraction, Gbps, PosSeconds, Rank, Seconds, Strict


def _each_once(ranks: list[int]) -> list[int]:
    """A rank listed twice in one entry would have the entry's factor applied twice: refuse it."""
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        shown = f"rank {twice[0]}" if len(twice) == 1 else f"ranks {twice}"
        raise ValueError(f"{shown} listed more than once; list each rank once")
    return ranks


Uplinks = Union[Literal["all"], Annotated[list[str], Field(min_length=1)]]
Ranks = Annotated[list[Rank], Field(min_length=1), AfterValidator(_each_once)]
Interval = Annotated[float, Field(ge=1e-3, le=1e9)]  # seconds; shorter on/off or Poisson gaps flood the event queue


def _exactly_one(model: BaseModel, names: tuple[str, ...], what: str, problems: list[str]) -> str | None:
    """The one field of `names` that is set; otherwise a problem is added and None returned."""
    given = [n for n in names if getattr(model, n) is not None]
    if len(given) != 1:
        shown = ", ".join(given) if given else "none"
        problems.append(f"{names[0]}: give exactly one {what} of {', '.join(names)} (got {shown})")
        return None
    return given[0]


def _report(problems: list[str]) -> None:
    """Every problem of one entry at once, one line each (sim.config.messages splits them)."""
    if problems:
        raise ValueError("\n".join(problems))


class SlowWorker(Strict):
    """A worker that is always slower (a weaker or shared GPU)."""

    ranks: Ranks = Field(description="the slow workers, each listed once (the factor applies once)")
    compute_factor: Factor = Field(description="compute time multiplier (2 = twice as slow)")


class Straggler(Strict):
    """A transient slowdown: at fixed times (`start_s`) or as a seeded random process (`every_s`)."""

    ranks: Optional[Ranks] = Field(None, description="workers hit; network effects act on their host's NIC")
    uplinks: Optional[Uplinks] = Field(None, description="rack uplinks hit (rack names or all)")
    compute_factor: Optional[Factor] = Field(None, description="compute time multiplier while it lasts")
    delay_ms: Optional[Annotated[float, Field(ge=0, le=1e3)]] = Field(
        None, description="extra latency on the targets' outgoing links (like netem delay)"
    )
    delay_mode: Literal["one_way", "rpc"] = Field(
        "one_way",
        description=(
            "how delay_ms is charged. one_way: a transfer pays it when it leaves a target (the packets "
            "netem holds); rpc: every transfer is one half of a request/response RPC (TensorFlow's "
            "RecvTensor and RunGraph over gRPC) whose other half crosses the target's outgoing link too, "
            "so a transfer to or from a target pays it once and one between two targets twice"
        ),
    )
    bandwidth_factor: Optional[Annotated[float, Field(ge=1e-4, le=1)]] = Field(
        None, description="capacity multiplier on the targets' links"
    )
    start_s: Optional[Seconds] = Field(None, description="simulated time it starts (one occurrence)")
    every_s: Optional[Interval] = Field(
        None, description="mean time between occurrences of a random (Poisson) straggler process"
    )
    count: Optional[Annotated[int, Field(ge=1, le=MAX_COUNT)]] = Field(
        None, description="random process: how many of the listed targets each occurrence hits (default all)"
    )
    duration_s: PosSeconds = Field(description="how long each occurrence lasts")

    @model_validator(mode="after")
    def _shape(self) -> Straggler:
        problems: list[str] = []
        target = _exactly_one(self, ("ranks", "uplinks"), "target", problems)
        effect = _exactly_one(self, ("compute_factor", "delay_ms", "bandwidth_factor"), "effect", problems)
        _exactly_one(self, ("start_s", "every_s"), "timing", problems)
        if effect == "compute_factor" and target == "uplinks":
            problems.append("compute_factor: applies to ranks, not uplinks")
        if self.delay_mode != "one_way" and effect != "delay_ms":
            problems.append("delay_mode: applies only with delay_ms")
        if self.count is not None and self.every_s is None:
            problems.append("count: applies only to a random process (every_s)")
        listed = self.ranks if self.ranks is not None else self.uplinks  # "all" racks: checked on the cluster
        if self.count is not None and isinstance(listed, list) and self.count > len(listed):
            problems.append(count_problem(self.count, len(listed), "ranks" if self.ranks is not None else "uplinks"))
        _report(problems)
        return self


def count_problem(count: int, targets: int, kind: str) -> str:
    """An occurrence picks `count` different targets from those listed: more than there are is refused
    (the engine once hit them all silently)."""
    return f"count: {count} exceeds the {targets} {kind} it picks from; allowed: 1 to {targets} (leave it out for all)"


class BackgroundFlow(Strict):
    """Traffic of other jobs: a rate-capped flow that competes max-min fairly with training traffic."""

    hosts: Optional[Annotated[list[str], Field(min_length=2, max_length=2)]] = Field(
        None, description="[source, destination]: two different hosts of a one-way flow"
    )
    uplinks: Optional[Uplinks] = Field(None, description="rack uplinks crossed, both directions (rack names or all)")
    gbps: Optional[Gbps] = Field(None, description="the flow's rate cap")
    fraction: Optional[Fraction] = Field(None, description="uplinks only: rate cap as a fraction of each uplink")
    start_s: Seconds = Field(0.0, description="when it starts")
    duration_s: Optional[PosSeconds] = Field(None, description="how long it runs; default: the whole run")
    on_s: Optional[Interval] = Field(None, description="on/off pattern: seconds on (with off_s)")
    off_s: Optional[Interval] = Field(None, description="on/off pattern: seconds off (with on_s)")

    @model_validator(mode="after")
    def _shape(self) -> BackgroundFlow:
        problems: list[str] = []
        target = _exactly_one(self, ("hosts", "uplinks"), "target", problems)
        rate = _exactly_one(self, ("gbps", "fraction"), "rate", problems)
        if self.hosts is not None and self.hosts[0] == self.hosts[1]:
            problems.append(f"hosts: a flow from {self.hosts[0]!r} to itself crosses no link; name two different hosts")
        if rate == "fraction" and target == "hosts":
            problems.append("fraction: applies only to uplinks; give hosts a rate in gbps")
        if (self.on_s is None) != (self.off_s is None):
            problems.append("on_s: on_s and off_s go together")
        _report(problems)
        return self


Step = Annotated[int, Field(ge=0, le=10**9)]


class Departure(Strict):
    """Workers that leave the run at one step and come back at a later one (or never): a preempted node,
    a datacenter that drops out. Under local_sgd and diloco only, at the first step of an outer round
    (policies.membership, docs/wan.md)."""

    ranks: Optional[Ranks] = Field(None, description="the workers that leave")
    hosts: Optional[Annotated[list[str], Field(min_length=1)]] = Field(None, description="every worker of these hosts")
    datacenter: Optional[str] = Field(None, description="every worker of this datacenter (multi_datacenter)")
    leave_step: Step = Field(description="the first step they miss")
    join_step: Optional[Step] = Field(None, description="the step they train again at (default: they never come back)")

    @model_validator(mode="after")
    def _shape(self) -> Departure:
        problems: list[str] = []
        _exactly_one(self, ("ranks", "hosts", "datacenter"), "target", problems)
        if self.join_step is not None and self.join_step <= self.leave_step:
            problems.append(f"join_step: {self.join_step}; allowed: a step after leave_step ({self.leave_step})")
        _report(problems)
        return self


class FaultsConfig(Strict):
    """Static heterogeneity, transient stragglers, and workers leaving and joining."""

    slow_workers: list[SlowWorker] = Field(default_factory=list, description="permanently slower workers")
    stragglers: list[Straggler] = Field(default_factory=list, description="transient slowdowns")
    departures: list[Departure] = Field(
        default_factory=list, description="workers that leave between outer steps and may come back"
    )
