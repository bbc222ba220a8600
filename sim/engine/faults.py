"""Transient stragglers and background traffic as SimPy processes acting on workers and links.

A straggler multiplies a worker's compute time, adds latency to outgoing links (`delay_mode: rpc`:
to incoming ones too, for the request or response of each RPC that leaves the host), or scales link
capacity, for `duration_s`, once (`start_s`) or as a seeded Poisson process (`every_s`). Overlapping
occurrences combine (factors multiply, delays add) and everything returns exactly to nominal when
they end. Background flows are rate-capped open flows competing max-min fairly with training.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from policies.membership import Absence
from sim.cluster.routing import Router
from sim.cluster.topology import GBPS, Cluster
from sim.compute.durations import ComputeModel
from sim.config import Config
from sim.config.faults import BackgroundFlow, Straggler, count_problem
from sim.network.flows import Network


def fault_problems(config: Config, cluster: Cluster) -> list[str]:
    """Targets that do not exist in the cluster, one line each (found before running)."""
    world, racks, hosts = cluster.world_size, cluster.view.racks, cluster.view.hosts
    groups: list[tuple[str, Any]] = [(f"faults.slow_workers[{i}]", s) for i, s in enumerate(config.faults.slow_workers)]
    groups += [(f"faults.stragglers[{i}]", s) for i, s in enumerate(config.faults.stragglers)]
    groups += [(f"background[{i}]", b) for i, b in enumerate(config.background)]
    groups += [(f"faults.departures[{i}]", d) for i, d in enumerate(config.faults.departures)]
    lines = []
    for i, departure in enumerate(config.faults.departures):
        named = departure.datacenter
        if named is not None and named not in cluster.view.datacenters:
            known = ", ".join(cluster.view.datacenters) or "none (topology multi_datacenter has datacenters)"
            lines.append(f"faults.departures[{i}].datacenter: unknown datacenter {named!r}; allowed: {known}")
    for where, spec in groups:
        bad = [r for r in getattr(spec, "ranks", None) or () if r >= world]
        if bad:
            lines.append(f"{where}.ranks: ranks {bad} do not exist (world size {world})")
        uplinks = getattr(spec, "uplinks", None)
        if uplinks is not None and not racks:
            lines.append(f"{where}.uplinks: this cluster has no racks; allowed here: ranks or hosts")
        elif isinstance(uplinks, list) and (unknown := [r for r in uplinks if r not in racks]):
            lines.append(f"{where}.uplinks: unknown racks {unknown}; allowed: all, {', '.join(racks)}")
        elif uplinks == "all" and racks and (getattr(spec, "count", None) or 0) > len(racks):
            lines.append(f"{where}.{count_problem(spec.count, len(racks), 'racks')}")  # listed ones: at validation
        named = getattr(spec, "hosts", None) or ()
        if unknown := [h for h in named if h not in hosts]:
            lines.append(f"{where}.hosts: unknown hosts {unknown}; allowed: {', '.join(hosts)}")
    return lines


def absences_of(config: Config, cluster: Cluster) -> tuple[Absence, ...]:
    """`faults.departures` as the ranks each takes away (policies.membership); an entry naming nothing that
    exists takes nobody (`fault_problems` reports it)."""
    view, found = cluster.view, []
    for i, departure in enumerate(config.faults.departures):
        if departure.ranks is not None:
            ranks = [r for r in departure.ranks if r < view.world_size]
        else:
            hosts = set(departure.hosts or view.datacenters.get(departure.datacenter or "", ()))
            ranks = [r for r in range(view.world_size) if view.host_of(r) in hosts]
        if ranks:
            found.append(Absence(tuple(ranks), departure.leave_step, departure.join_step, index=i))
    return tuple(found)


def late_faults(config: Config, ends: dict[str, float]) -> list[str]:
    """Faults set to start after a policy's run had ended (`ends`: simulated end per policy label), and
    departures after its last step: they never acted there, which the results alone would not tell. The run's
    length is known only once it ran (and `--set iterations=2` must not break a config), so this is a notice
    after the run, not a config error."""
    lines = [
        f"faults.departures[{i}].leave_step: {d.leave_step} is past the run's last step ({config.iterations - 1}); "
        "it never acted"
        for i, d in enumerate(config.faults.departures)
        if d.leave_step >= config.iterations
    ]
    timed = [(f"faults.stragglers[{i}].start_s", s.start_s) for i, s in enumerate(config.faults.stragglers)]
    timed += [(f"background[{i}].start_s", b.start_s) for i, b in enumerate(config.background)]
    for where, start in timed:
        missed = [label for label, end in ends.items() if start is not None and start >= end]
        if missed:
            lines.append(
                f"{where}: {start:g} s is after the end of the run of {', '.join(missed)} "
                f"(at {min(ends[m] for m in missed):.3g} s of simulated time); it never acted there"
            )
    return lines


# (what, targets, effect, value, start_s, end_s): one straggler occurrence or background window
FaultRow = tuple[str, str, str, float, float, float]


@dataclass
class FaultContext:
    env: simpy.Environment
    net: Network
    cluster: Cluster
    router: Router
    compute: ComputeModel
    seed: int
    done: simpy.Event
    check_stall: Callable[[], None]
    log: list[FaultRow]


class LinkEffects:
    """Active capacity factors and added delays per link; links always derive from their nominal."""

    def __init__(self, net: Network) -> None:
        self.net = net
        self.capacity, self.latency = net.capacity.copy(), net.latency.copy()
        self.factors: dict[int, list[float]] = defaultdict(list)
        self.delays: dict[int, list[float]] = defaultdict(list)

    def scale(self, links: Sequence[int], factor: float, on: bool) -> None:
        for link in links:
            _toggle(self.factors[link], factor, on)
        self.net.set_capacity(links, [self.capacity[link] * float(np.prod(self.factors[link])) for link in links])

    def delay(self, links: Sequence[int], seconds: float, on: bool) -> None:
        for link in links:
            _toggle(self.delays[link], seconds, on)
        self.net.set_latency(links, [self.latency[link] + sum(self.delays[link]) for link in links])


def _toggle(active: list[float], value: float, on: bool) -> None:
    if on:
        active.append(value)
    else:
        active.remove(value)


def _open_entry(ctx: FaultContext, row: tuple[str, str, str, float, float]) -> int:
    """Log an occurrence as it starts (its end stays inf until it ends, or the run does)."""
    ctx.log.append((*row, np.inf))
    return len(ctx.log) - 1


def _close_entry(ctx: FaultContext, entry: int) -> None:
    ctx.log[entry] = (*ctx.log[entry][:5], ctx.env.now)


def uplink_links(cluster: Cluster, racks: Any) -> list[tuple[int, ...]]:
    """Per rack (or all racks): its links to the rest of the fabric, up and down."""
    names = list(cluster.view.racks) if racks == "all" else racks
    return [cluster.rack_links[name] for name in names]


def nic_links(cluster: Cluster, ranks: Sequence[int], egress_only: bool) -> list[int]:
    hosts = {cluster.view.host_of(r) for r in ranks}
    return [
        i
        for i, link in enumerate(cluster.links)
        if link.kind == "nic" and (link.src in hosts or (not egress_only and link.dst in hosts))
    ]


def straggler(ctx: FaultContext, index: int, spec: Straggler, effects: LinkEffects) -> Generator[Any, Any, None]:
    env = ctx.env
    rng = np.random.default_rng(np.random.SeedSequence([ctx.seed, 1_000 + index]))
    targets: list[Any] = list(spec.ranks) if spec.ranks is not None else list(_rack_names(ctx.cluster, spec.uplinks))
    if spec.start_s is not None:
        yield env.timeout(spec.start_s)
        yield from _occurrence(ctx, spec, targets, effects)
        return
    while not ctx.done.triggered:
        yield env.timeout(rng.exponential(spec.every_s))
        ctx.check_stall()
        hit = (
            targets
            if spec.count is None
            else list(rng.choice(targets, size=spec.count, replace=False))  # count <= targets: validated
        )
        env.process(_occurrence(ctx, spec, hit, effects))


def _rack_names(cluster: Cluster, uplinks: Any) -> list[str]:
    return list(cluster.view.racks) if uplinks == "all" else list(uplinks)


def _occurrence(
    ctx: FaultContext, spec: Straggler, targets: list[Any], effects: LinkEffects
) -> Generator[Any, Any, None]:
    ranks = [int(t) for t in targets] if spec.ranks is not None else []
    if spec.compute_factor is not None:
        ctx.compute.straggle(ranks, spec.compute_factor, on=True)
    links: list[int] = []
    # netem delays what leaves a target; under rpc each transfer into a target also waits for the
    # request or response that leaves it, which the same delay on its incoming links charges
    one_way = spec.delay_ms is not None and spec.delay_mode == "one_way"
    if spec.ranks is not None:
        links = nic_links(ctx.cluster, ranks, egress_only=one_way)
    else:
        for up, down in uplink_links(ctx.cluster, targets):
            links += list(up) + ([] if one_way else list(down))
    if spec.delay_ms is not None:
        effects.delay(links, spec.delay_ms * 1e-3, on=True)
    if spec.bandwidth_factor is not None:
        effects.scale(links, spec.bandwidth_factor, on=True)
    effect = next(
        name for name in ("compute_factor", "delay_ms", "bandwidth_factor") if getattr(spec, name) is not None
    )
    kind = "ranks" if spec.ranks is not None else "uplinks"
    entry = _open_entry(
        ctx, ("straggler", f"{kind} {' '.join(map(str, targets))}", effect, float(getattr(spec, effect)), ctx.env.now)
    )
    yield ctx.env.timeout(spec.duration_s)
    _close_entry(ctx, entry)
    if spec.compute_factor is not None:
        ctx.compute.straggle(ranks, spec.compute_factor, on=False)
    if spec.delay_ms is not None:
        effects.delay(links, spec.delay_ms * 1e-3, on=False)
    if spec.bandwidth_factor is not None:
        effects.scale(links, spec.bandwidth_factor, on=False)


def background(ctx: FaultContext, index: int, spec: BackgroundFlow) -> Generator[Any, Any, None]:
    env, net = ctx.env, ctx.net
    flows: list[tuple[list[int], float]] = []  # (path, cap)
    if spec.hosts is not None:
        path = list(ctx.router.path(spec.hosts[0], spec.hosts[1], channel=("background", index)))
        flows.append((path, spec.gbps * GBPS))  # type: ignore[operator]
    else:
        for up, down in uplink_links(ctx.cluster, spec.uplinks):
            for direction in (up, down):
                for link in direction:  # parallel links to several core switches share the rate
                    cap = spec.fraction * net.capacity[link] if spec.fraction else spec.gbps * GBPS / len(direction)
                    flows.append(([link], float(cap)))
    yield env.timeout(spec.start_s)
    end = spec.start_s + spec.duration_s if spec.duration_s is not None else np.inf
    where = (
        f"hosts {' '.join(spec.hosts)}"
        if spec.hosts is not None
        else f"uplinks {' '.join(_rack_names(ctx.cluster, spec.uplinks))}"
    )
    rate = ("gbps", float(spec.gbps)) if spec.gbps is not None else ("fraction", float(spec.fraction or 0.0))
    while not ctx.done.triggered and env.now < end:
        opened = [net.open_flow([path], cap) for path, cap in flows]
        entry = _open_entry(ctx, ("background", where, *rate, env.now))
        on = spec.on_s if spec.on_s is not None else end - env.now
        if on == np.inf:
            return  # on for good: an open flow needs no events, and its row ends with the run
        yield env.timeout(min(on, end - env.now))
        for flow in opened:
            net.close_flow(flow)
        _close_entry(ctx, entry)
        if spec.off_s is None:
            return
        yield env.timeout(spec.off_s)
        ctx.check_stall()
