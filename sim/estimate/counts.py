"""The counts behind the cost estimate (`sim.estimate.cost`), from the validated config alone: per policy what
its program puts on the simulator over a run (`Load`): collectives, flows, subflows, SimPy events, max-min
recomputes and the incidence entries they sweep, routes, rows; and what a run carries beside its program
(fault and background events, server shards, sparse index sets).

The cluster as counts is `sim.estimate.shape`; each builtin policy's closed form of what it issues per
bucket is `sim.estimate.traffic`. Here the phased and stepwise-changing programs are put together (local_sgd
and diloco: ring's in warm-up, then one all-reduce of the model every `period` steps; topk and powersgd:
ring's in warm-up, then their compressed programs with their local ops) and turned into events. Event and
recompute constants are fitted on measured runs (benchmarks/check_scale.py prints estimate against
measurement); a plug-in policy counts as the nearest built-in it derives from (a variant whose program is that
built-in's with other collectives: its settings' `algorithm`, if any, names how its averages' all-reduces run),
else as one all-reduce of all ranks per bucket.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, fields, replace
from typing import Any, Optional

from policies.base import Policy
from policies.registry import BUILTIN
from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.estimate.powersgd import compressed_step
from sim.estimate.shape import Shape, shape_of  # shape_of re-exported: callers import it from here
from sim.estimate.symmetric import one_host_route_s, one_host_traffic
from sim.estimate.traffic import (
    Traffic,
    add_traffic,
    bucket_traffic,
    gather_traffic,
    ideal_network,
    periodic_traffic,
    scale_traffic,
)

__all__ = ["EVENTS", "Extra", "Load", "Shape", "builtin", "counted_as", "fault_load", "index_set_mb", "outer_steps",
           "policy_load", "shape_of", "shard_count", "sparse_buckets"]  # fmt: skip


# Events per worker-iteration, per worker-iteration and bucket, per flow and per recompute (a zero-delay
# timeout and a timer each), fitted on measured runs of each policy with jittered workers (8 to 128
# GPUs, 1 to 12 buckets; the engine of commit 1400657). Plug-ins use `ring`'s.
EVENTS: dict[str, tuple[float, float, float, float]] = {
    "ring": (4.5, 1.0, 1.2, 2.0),
    "hierarchical": (4.3, 1.0, 1.0, 2.0),
    "no_sync": (4.5, 2.0, 0.0, 2.0),
    "ps": (5.3, 0.4, 3.6, 2.0),
    "asp": (5.3, 1.7, 1.6, 2.0),
    "ssp": (5.8, 0.0, 2.6, 2.0),
    "ds_sync": (4.5, 1.0, 0.3, 2.0),
    "sparse": (4.5, 1.0, 0.1, 2.0),
    "topk": (4.5, 1.0, 0.1, 2.0),  # assumed as the sparse gather's, not fitted
}
READS_BEFORE_FORWARD = ("ps", "asp", "ssp", "sparse_ps")  # their forward waits on reads, slice by slice
# Synchronous shards: one event per shard, bucket and round (the apply that pulls wait on); asynchronous
# ones (asp, ssp) apply each push on arrival, without one.
SYNC_SHARDED = ("ps", "sparse_ps")
# Recomputes per flow when workers drift apart (jitter, faults): a start and an end each re-solve,
# unless they coincide with another's. Lockstep workers launch together: about this many per bucket.
RECOMPUTES_PER_FLOW = {"ring": 1.0, "hierarchical": 0.3, "ps": 1.1, "asp": 2.0, "ssp": 2.0, "ds_sync": 1.9}
LOCKSTEP_RECOMPUTES_PER_BUCKET = 3.0
# A recompute sweeps the live classes only: a parameter server's workers push and pull a few at a
# time, so a small share of its classes is live; collectives' groups all run at once.
LIVE_SHARE = {"ps": 0.02, "asp": 0.02, "ssp": 0.02}
# Routes are worked out when first used (seconds on the 2-core machine; `Load.route_s`).
S_PER_NODE_ROUTE = 5e-6  # a (source, destination) route, worked out once
S_PER_FABRIC_HOST = 0.2e-6  # a rack-to-rack shortest-path search, per host of the cluster ...
S_PER_FABRIC_RACK = 4e-6  # ... and per rack


@dataclass(frozen=True)
class Load:
    """What one policy asks of the simulator over the whole run (counts; `route_s` in seconds)."""

    collectives: float = 0.0
    flows: float = 0.0
    subflows: float = 0.0
    events: float = 0.0  # as the engine counts them
    work: float = 0.0  # events as if no two workers shared one: what the wall time follows
    recomputes: float = 0.0
    solved: float = 0.0  # incidence entries of live classes swept by all recomputes
    entries: float = 0.0  # incidence entries the network holds at once
    route_s: float = 0.0
    sparse_rows: float = 0.0
    iteration_rows: float = 0.0
    op_rows: float = 0.0
    staleness_rows: float = 0.0

    def __add__(self, other: Load) -> Load:
        peak = ("entries",)
        return Load(**{f.name: (max if f.name in peak else operator.add)(getattr(self, f.name), getattr(other, f.name))
                       for f in fields(self)})  # fmt: skip


def policy_load(
    policy: Policy,
    shape: Shape,
    plan: ComputePlan,
    sparse: tuple[int, float],
    config: Config,
    iterations: float,
    one_host: Optional[int] = None,
) -> Load:
    """`policy`'s load over `iterations` (a phased policy: the sum of its phases); `sparse`: the plan's
    sparse buckets and their rows (`sparse_buckets`); `one_host`: the ranks a host-symmetric run simulates
    (`sim.estimate.symmetric`), None where every rank runs."""
    name = counted_as(policy)
    if name == "sync_switch":
        s = policy.settings
        first, then = policy.first, policy.then  # type: ignore[attr-defined]
        if s.switching == "online":  # phases follow stragglers as they come: the costlier throughout
            return max((policy_load(p, shape, plan, sparse, config, iterations) for p in (first, then)),
                       key=lambda load: load.work)  # fmt: skip
        ends = (0.0, *s.boundaries)
        share = sum(b - a for a, b, letter in zip(ends, ends[1:], s.pattern) if letter == "1")
        return policy_load(first, shape, plan, sparse, config, iterations * share) + policy_load(
            then, shape, plan, sparse, config, iterations * (1 - share)
        )
    if name in PERIODIC:  # warm-up steps are ring's; then all-reduces of the model (or of fragments)
        s = policy.settings
        warm = min(float(s.warmup_steps), iterations)
        averages = outer_steps(name, s, iterations - warm)
        run = periodic_traffic(
            s, shape, config, warm * len(plan.buckets), (iterations - warm) * len(plan.buckets), averages
        )
        load = _load(name, scale_traffic(run, 1.0 / max(iterations, 1.0)), shape, config, iterations, plan)
        timeouts = shape.workers * averages * PERIODIC[name] + (shape.workers * warm if name != "local_sgd" else 0.0)
        return replace(load, events=load.events + timeouts, work=load.work + timeouts)
    if name == "topk":  # warm-up steps are ring's; then per bucket an Encode (a timeout per worker) and a gather
        warm = min(float(policy.settings.warmup_steps), iterations)
        per = len(plan.buckets) / max(iterations, 1.0)
        ring, gather = bucket_traffic("ring", None, shape, config, False, 0.0), gather_traffic(shape, config, 0.0)
        run = add_traffic(scale_traffic(ring, warm * per), scale_traffic(gather, (iterations - warm) * per))
        load = _load(name, run, shape, config, iterations, plan)
        timeouts = shape.workers * (iterations - warm) * len(plan.buckets)
        return replace(load, events=load.events + timeouts, work=load.work + timeouts)
    if name == "powersgd":
        return _powersgd(policy, shape, plan, config, iterations, one_host)
    n_sparse, rows = sparse
    dense = bucket_traffic(name, policy.settings, shape, config, False, 0.0)
    if one_host is not None:
        dense = one_host_traffic(name, dense, shape, config.simulation.network_model, policy.settings)
    traffic = scale_traffic(dense, len(plan.buckets) - n_sparse)
    if n_sparse:  # sparse buckets differ only in their rows, which count linearly
        one = bucket_traffic(name, policy.settings, shape, config, True, rows / n_sparse)
        if one_host is not None:  # the one-host policies send a sparse bucket whole, as a dense one
            one = one_host_traffic(name, one, shape, config.simulation.network_model, policy.settings)
        traffic = add_traffic(traffic, scale_traffic(one, n_sparse))
    load = _load(name, traffic, shape, config, iterations, plan, one_host)
    if name in SYNC_SHARDED:  # every shard holds a slice of every bucket and applies each round's sum once
        applies = shard_count(policy, shape) * len(plan.buckets) * iterations
        load = replace(load, events=load.events + applies, work=load.work + applies)
    return load


# A program with local ops runs as a SimPy process per worker (sim/engine/executor.py): its start and its end.
EVENTS_PER_PROCESS = 2


def _powersgd(
    policy: Policy, shape: Shape, plan: ComputePlan, config: Config, iterations: float, one_host: Optional[int]
) -> Load:
    """Warm-up steps are ring's; each later step issues per bucket three ring all-reduces and its local ops
    (`sim.estimate.powersgd`), as one process per worker and bucket (`one_host`: those of one host's workers).
    An all-reduce of nothing starts and ends its flows at the same instant: they count as flows (events and
    rows) that re-solve no rates."""
    s = policy.settings
    buckets = len(plan.buckets)
    warm = min(float(s.warmup_steps), iterations)
    later = iterations - warm
    step = compressed_step(s, plan.bucket_shapes, buckets)
    ring = bucket_traffic("ring", None, shape, config, False, 0.0)
    if one_host is not None:
        ring = one_host_traffic("ring", ring, shape, config.simulation.network_model)
    live = warm * buckets + later * (step.all_reduces - step.empty)
    load = _load("ring", scale_traffic(ring, live / max(iterations, 1.0)), shape, config, iterations, plan, one_host)
    empty = scale_traffic(ring, later * step.empty)
    draws = step.draws * (min(later, 1.0) if s.warm_start else later)
    own = (shape.workers if one_host is None else one_host) * (
        later * (step.local_ops + EVENTS_PER_PROCESS * buckets) + draws
    )  # timeouts, processes
    extra = own + EVENTS["ring"][2] * empty.flows
    return replace(
        load, collectives=load.collectives + empty.collectives, flows=load.flows + empty.flows,
        subflows=load.subflows + empty.subflows, op_rows=load.op_rows + empty.op_rows,
        events=load.events + extra, work=load.work + extra,
    )  # fmt: skip


# Policies that average the model every `period` steps after a ring warm-up, with the local ops (each a
# timeout per worker, sim/engine/launches.py) of one averaging; diloco's warm-up steps end with one more.
PERIODIC = {"local_sgd": 0, "diloco": 3, "streaming_diloco": 3, "eager_diloco": 4}  # eager_diloco: 3 delayed, 5 eager


def outer_steps(name: str, s: Any, local_steps: float) -> float:
    """Averagings in `local_steps` steps after warm-up: every `period`-th step, or for streaming_diloco
    one per fragment p at each local step L with L + 1 = o_p + k * period, o_p = floor(p * period / P)
    (o_0 = period), k >= 0 (policies/streaming_diloco.py)."""
    if name != "streaming_diloco":
        return float(math.floor(local_steps / s.period))
    offsets = [(p * s.period) // s.fragments or s.period for p in range(s.fragments)]
    return float(sum(math.floor((local_steps - o) / s.period) + 1 for o in offsets if local_steps >= o))


def builtin(policy: Policy) -> bool:
    return f"{type(policy).__module__}:{type(policy).__qualname__}" in BUILTIN.values()


def counted_as(policy: Policy) -> str:
    """The built-in whose program the estimate counts for `policy`: its own; for a plug-in, the nearest
    built-in class it derives from (a variant of diloco runs diloco's program with other collectives); else
    `ring`'s."""
    names = {path: name for name, path in BUILTIN.items()}
    for cls in type(policy).__mro__:
        name = names.get(f"{cls.__module__}:{cls.__qualname__}")
        if name is not None:
            return name
    return "ring"


def sparse_buckets(plan: ComputePlan) -> tuple[int, float]:
    """Sparse buckets, and the non-zero rows one worker draws in all of them per iteration."""
    sparse = [layout for layout in plan.layouts if layout.sparse]
    rows = sum(seg.k if seg.kind == "topk" else min(seg.lookups, seg.space)
               for layout in sparse for seg in layout.segments if seg.kind != "dense")  # fmt: skip
    return len(sparse), float(rows)


# One sparse segment's index sets at a time (`sim.compute.sparse_traffic`): a mask over its rows for the
# union and one for distinct ids, and per drawn row the draw's floats, its id, its owner and their hashing.
B_PER_SEGMENT_ROW = 2.0
B_PER_DRAWN_ROW = 40.0


def index_set_mb(plan: ComputePlan) -> float:
    """Peak memory of drawing and counting the largest sparse segment's index sets (one worker's draw at
    a time beside the union's mask), in MB; 0 without sparse gradients."""
    segments = [seg for layout in plan.layouts for seg in layout.segments if seg.kind != "dense"]
    drawn = [seg.k if seg.kind == "topk" else seg.lookups for seg in segments]
    return (
        max((B_PER_SEGMENT_ROW * s.rows + B_PER_DRAWN_ROW * d) / 1e6 for s, d in zip(segments, drawn))
        if segments
        else 0.0
    )


def _lockstep(config: Config) -> bool:
    """Workers computing alike (no jitter, no slow or straggling GPU) stay in step: their compute slices
    end together and their transfers start together, sharing timeouts and recomputes."""
    f = config.faults
    return config.workload.compute_jitter == 0 and not (f.slow_workers or any(s.compute_factor for s in f.stragglers))


def _load(
    name: str,
    t: Traffic,
    shape: Shape,
    config: Config,
    iterations: float,
    plan: ComputePlan,
    one_host: Optional[int] = None,
) -> Load:
    """A policy's traffic per iteration (all buckets) over the run, as events and recomputes; `one_host`: the
    ranks whose workers run (host symmetry), while every rank's rows are kept."""
    kind = "sparse" if t.sparse_rows else "ps" if name == "sparse_ps" else name if name in EVENTS else "ring"
    buckets = len(plan.buckets)
    w = float(shape.workers)
    updates = w * iterations  # iteration rows
    simulated = (w if one_host is None else float(one_host)) * iterations  # worker-iterations that run
    flows = t.flows * iterations
    subflows = t.subflows * iterations
    if name in ("ps", "asp", "ssp", "sparse_ps"):  # no pull before the first step
        flows -= t.flows / 2
        subflows -= t.subflows / 2
    recomputes = RECOMPUTES_PER_FLOW.get(name, 1.0) * flows
    stepwise = config.simulation.collective_model == "stepwise" and (ideal_network(config) or bool(t.sparse_rows))
    if stepwise and name not in ("ps", "asp", "ssp"):
        recomputes = 0.25 * flows  # a ring's steps finish over a spread of instants
    elif _lockstep(config) and not t.sparse_rows:  # sparse transfers differ in size: they end apart
        recomputes = min(recomputes, LOCKSTEP_RECOMPUTES_PER_BUCKET * buckets * iterations)
    a, b, per_flow, per_recompute = EVENTS[kind]
    work = simulated * (a + b * buckets) + per_flow * flows + per_recompute * recomputes
    work += _sampler_events(config, shape, iterations * plan.compute_s)
    # workers in step end their compute slices (forward, then one per bucket) at the same instants and
    # share one timeout for each; the work of resuming every worker remains. Reads before forward end
    # at slightly different instants (paths differ), and the workers drift apart.
    shared = 0.0 if name in READS_BEFORE_FORWARD else 1.0 + buckets
    events = work - (simulated - iterations) * shared if _lockstep(config) else work
    ops = t.op_rows * iterations + (updates if name == "ssp" else 0.0)
    route_s = t.node_routes * S_PER_NODE_ROUTE + t.fabric_routes * (
        S_PER_FABRIC_HOST * shape.hosts + S_PER_FABRIC_RACK * shape.racks
    )
    if one_host is not None:  # counted and priced as measured on one-host runs, where routes are most of the time
        route_s = one_host_route_s(t, shape)
    solved = recomputes * t.entries * (1.0 if t.sparse_rows else LIVE_SHARE.get(name, 1.0))
    return Load(t.collectives * iterations, flows, subflows, events, work, recomputes, solved, t.entries, route_s,
                t.sparse_rows * updates, updates, ops, t.staleness_rows * updates)  # fmt: skip


def _sampler_events(config: Config, shape: Shape, compute_s: float) -> float:
    """Link-utilisation samples over at least the run's compute time: fine at first, the interval
    doubling whenever they run out."""
    sim = config.simulation
    links = max(1, shape.links - 2 * shape.workers)
    kept = max(4, min(sim.utilization_samples, 2_000_000 // links))
    samples = max(compute_s, 1e-3) / (sim.utilization_interval_ms * 1e-3)
    return samples if samples <= kept else kept + kept / 2 * math.log2(samples / kept)


@dataclass(frozen=True)
class Extra:
    """What a policy's run carries beside its program: fault and background processes, server shards."""

    events: float = 0.0  # SimPy events of fault occurrences and background on/off cycles
    recomputes: float = 0.0  # max-min re-solves when a fault or background flow changes the network
    fault_rows: float = 0.0  # rows of faults.csv (one per occurrence or window)
    shards: float = 0.0  # parameter-server shards the policy starts (each a process, its state, its slices)


def fault_load(config: Config, shape: Shape, sim_s: float) -> Extra:
    """Fault and background events over `sim_s` simulated seconds (a lower bound of the run's length:
    its compute alone). A random straggler fires about `sim_s / every_s` times, each occurrence a wait, a
    process, its end and a change per target rank; a network effect re-solves the rates at start and end.
    An on/off background flow opens and closes its flows every `on_s + off_s`."""
    events = recomputes = rows = 0.0
    for s in config.faults.stragglers:
        occurrences = 1.0 if s.every_s is None else max(sim_s / s.every_s, 1.0)
        targets = len(s.ranks) if s.ranks is not None else (shape.racks if s.uplinks == "all" else len(s.uplinks or ()))
        hit = min(s.count, targets) if s.count is not None else targets
        events += occurrences * (4.0 + hit)
        recomputes += occurrences * (2.0 if s.compute_factor is None else 0.0)
        rows += occurrences
    for b in config.background:
        cycles = 1.0 if b.on_s is None or b.off_s is None else max(sim_s / (b.on_s + b.off_s), 1.0)
        flows = 1.0 if b.hosts is not None else 2.0 * (shape.racks if b.uplinks == "all" else len(b.uplinks or ()))
        events += cycles * (3.0 + flows)
        recomputes += cycles * 2.0
        rows += cycles
    return Extra(events, recomputes, rows)


def shard_count(policy: Policy, shape: Shape) -> float:
    """The server shards `policy` starts (the largest of its phases'), without binding it."""
    phases = [policy.first, policy.then] if policy.name == "sync_switch" and builtin(policy) else [policy]  # type: ignore[attr-defined]
    most = 0.0
    for p in phases:
        s = p.settings
        if not builtin(p) or p.name not in ("ps", "asp", "ssp", "sparse_ps"):
            continue
        if s.shards != "auto":
            most = max(most, float(s.shards))
        elif s.hosts is not None:
            most = max(most, float(len(set(s.hosts))))
        else:
            most = max(most, float(shape.server_hosts if s.placement == "dedicated" else shape.hosts))
    return most
