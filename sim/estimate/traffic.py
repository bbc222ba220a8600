"""What one gradient bucket of a policy's program puts on the network in one iteration (`Traffic`), per
builtin policy: ring: one collective of all ranks; hierarchical: local reduce-scatter and all-gather, cross
all-reduce; fsdp: its gathers and reduce-scatter (and hybrid's all-reduce across); ps/asp/ssp: a push and a
pull per worker; ds_sync: its groups' all-reduces; sparse policies: all-gathers and pairwise exchanges;
local_sgd's family: `periodic_traffic`. `sim.estimate.counts` turns it into events and recomputes over a run.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, fields, replace
from typing import Any

from sim.config import Config
from sim.estimate.shape import Shape


@dataclass(frozen=True)
class Traffic:
    """A policy's program per bucket and iteration, before it becomes events (see `_load`)."""

    collectives: float = 0.0
    flows: float = 0.0
    subflows: float = 0.0
    entries: float = 0.0
    node_routes: float = 0.0
    fabric_routes: float = 0.0
    op_rows: float = 0.0
    staleness_rows: float = 0.0  # per worker-iteration
    sparse_rows: float = 0.0  # per worker-iteration


PEAK = ("entries", "node_routes", "fabric_routes")  # the same groups and routes serve every bucket


def add_traffic(a: Traffic, b: Traffic) -> Traffic:
    return Traffic(**{f.name: (max if f.name in PEAK else _sum)(getattr(a, f.name), getattr(b, f.name))
                      for f in fields(a)})  # fmt: skip


def _sum(a: float, b: float) -> float:
    return a + b


def scale_traffic(t: Traffic, k: float) -> Traffic:
    """`k` buckets (or groups) of traffic `t`: counts scale, what they share does not."""
    return Traffic(**{f.name: getattr(t, f.name) * (1.0 if f.name in PEAK else k) for f in fields(t)})


def ring_traffic(p: float, steps_per_rank: float, stepwise: bool, shape: Shape, entries: float) -> Traffic:
    """One ring collective over `p` ranks (steps_per_rank: 2 for all-reduce, 1 for reduce-scatter)."""
    if p <= 1:
        return Traffic(collectives=1.0, op_rows=1.0)
    flows = steps_per_rank * (p - 1) * p if stepwise else 1.0  # stepwise: p flows a step; else one transfer
    return Traffic(1.0, flows, subflows=flows if stepwise else p, entries=entries, node_routes=p,
                   fabric_routes=shape.racks, op_rows=1.0)  # fmt: skip


def butterfly_traffic(p: float, stepwise: bool, shape: Shape) -> Traffic:
    """One butterfly all-reduce over `p` ranks (sim/engine/butterfly.py): two phases of a flow per ordered pair
    (pipelined: one coupled transfer a phase), every pair's path held at once."""
    if p <= 1:
        return Traffic(collectives=1.0, op_rows=1.0)
    pairs = p * (p - 1)
    return Traffic(1.0, 2 * pairs if stepwise else 2.0, 2 * pairs, entries=pairs * shape.path_links,
                   node_routes=pairs, fabric_routes=shape.racks**2, op_rows=1.0)  # fmt: skip


def all_reduce_traffic(p: float, algorithm: str, stepwise: bool, shape: Shape, entries: float) -> Traffic:
    """One all-reduce over `p` ranks run as `algorithm` (policies.ops.ALLREDUCE_ALGORITHMS)."""
    if algorithm == "butterfly":
        return butterfly_traffic(p, stepwise, shape)
    return ring_traffic(p, 2, stepwise, shape, entries)


def bucket_traffic(name: str, s: Any, shape: Shape, config: Config, sparse: bool, rows: float) -> Traffic:
    """The traffic of one bucket in one iteration."""
    w, stepwise = float(shape.workers), config.simulation.collective_model == "stepwise"
    dense_stepwise = stepwise and ideal_network(config)  # the NCCL model runs every dense collective as its plan
    if name == "no_sync":
        return Traffic()
    if name in ("ps", "asp", "ssp", "sparse_ps"):
        return _sharded(name, s, shape, stepwise or (sparse and name == "sparse_ps"), sparse, rows)
    if name == "hierarchical":
        g = _local_size(s.level, shape)
        n = w / g
        local, cross = ring_traffic(g, 1, dense_stepwise, shape, 0.0), ring_traffic(n, 2, dense_stepwise, shape, 0.0)
        groups = 2 * n + g  # n local groups reduce-scatter then all-gather; g cross groups all-reduce
        flows, subflows = 2 * n * local.flows + g * cross.flows, 2 * n * local.subflows + g * cross.subflows
        return Traffic(groups, flows, subflows, entries=2.3 * shape.links, node_routes=3 * w,
                       fabric_routes=shape.racks, op_rows=groups)  # fmt: skip
    if name == "ds_sync":
        return _ds_sync(s, shape, dense_stepwise)
    if name == "fsdp":
        return _fsdp(s, shape, dense_stepwise)
    if sparse and name in ("zen", "sparse_allgather", "sparcml", "omnireduce"):  # the last two: zen's program
        pairs = w * (w - 1)
        gather = gather_traffic(shape, config, rows)
        if name == "sparse_allgather":
            return gather
        exchange = Traffic(1.0, pairs, pairs, entries=pairs * shape.path_links, op_rows=1.0)  # a flow per pair
        return add_traffic(gather, exchange)
    return ring_traffic(
        w, 2, dense_stepwise, shape, float(shape.links)
    )  # ring, a plug-in, a sparse policy's dense bucket


def gather_traffic(shape: Shape, config: Config, rows: float) -> Traffic:
    """A sparse all-gather of all ranks: each member's rows to every other (pipelined: one transfer each)."""
    w, stepwise = float(shape.workers), config.simulation.collective_model == "stepwise"
    pairs = w * (w - 1)
    return Traffic(1.0, pairs if stepwise else w, pairs, entries=2 * w * w, node_routes=w * w,
                   fabric_routes=shape.racks**2, op_rows=1.0, sparse_rows=rows)  # fmt: skip


def _sharded(name: str, s: Any, shape: Shape, per_shard: bool, sparse: bool, rows: float) -> Traffic:
    """A push and a pull (none before the first step: `_load` takes it off) per worker and bucket."""
    if s.hosts is not None:
        candidates = len(set(s.hosts))
    elif s.placement == "dedicated":
        candidates = shape.server_hosts
    else:
        candidates = shape.hosts
    k = float(candidates if s.shards == "auto" else s.shards)
    hosts = float(min(k, candidates))
    racks = min(shape.racks, hosts if s.placement == "dedicated" else math.ceil(hosts / shape.hosts_per_rack))
    w = float(shape.workers)
    transfers = 2 * w * (k if per_shard else 1.0)  # push + pull
    per_class = hosts + racks + 3 if not per_shard else shape.path_links
    classes = 2 * w * (k if per_shard else 1.0) if name in ("asp", "ssp") or per_shard else w
    stale = k if name in ("asp", "ssp") else 0.0
    return Traffic(0.0, transfers, 2 * w * k, entries=classes * per_class, node_routes=w * hosts * 2,
                   fabric_routes=shape.racks * racks, op_rows=transfers, staleness_rows=stale,
                   sparse_rows=rows if sparse else 0.0)  # fmt: skip


def ideal_network(config: Config) -> bool:
    """The ideal network model: dense collectives follow `collective_model` (under NCCL's, only sparse
    collectives and point-to-point transfers do)."""
    return config.simulation.network_model == "ideal"


def local_level(level: str, shape: Shape) -> str:
    """A hierarchical policy's level as `Hierarchical.bind` settles `auto`: host when hosts hold several GPUs
    (or there are no racks), else rack."""
    if level == "auto":
        return "host" if shape.gpus_per_host > 1 or not shape.racks else "rack"
    return level


def _local_size(level: str, shape: Shape) -> float:
    """Ranks in a hierarchical policy's local group."""
    if local_level(level, shape) == "host":
        return float(shape.gpus_per_host)
    return max(shape.workers / max(shape.racks, 1), 1.0)


def _ds_sync(s: Any, shape: Shape, stepwise: bool) -> Traffic:
    """Groups per step (averaged over the schedule), each all-reducing the bucket."""
    w = float(shape.workers)
    if isinstance(s.schedule, list):
        sizes = Counter(len(g) for partition in s.schedule for g in partition)
        steps = len(s.schedule)
    else:  # islands are racks behind oversubscribed uplinks; mixing steps pair one rank of two racks
        island = w / shape.racks if shape.oversubscribed and shape.racks > 1 else w
        size = min(island if s.group_size == "auto" else s.group_size, island)
        sizes = Counter({size: w / size})
        if s.schedule != "shuffle" and island < w:
            sizes[2.0] += shape.racks / 2 / s.mixing_period
        steps = 1
    traffic = Traffic()
    for size, groups in sizes.items():
        if size > 1:
            traffic = add_traffic(
                traffic, scale_traffic(ring_traffic(size, 2, stepwise, shape, 0.0), groups / max(steps, 1))
            )
    return replace(traffic, entries=2.0 * shape.links, node_routes=2 * w, fabric_routes=shape.racks)


def _fsdp(s: Any, shape: Shape, stepwise: bool) -> Traffic:
    """policies/fsdp.py per unit: an all-gather before forward (and before backward under full and hybrid
    sharding) and a reduce-scatter in the shard group; hybrid adds an all-reduce of the shard across replicas."""
    w = float(shape.workers)
    g = replica_size(s.shard_group, shape) if s.strategy == "hybrid" else w
    gathers = 2.0 if s.strategy in ("full", "hybrid") and s.reshard_after_forward else 1.0
    inside = scale_traffic(ring_traffic(g, 1, stepwise, shape, 0.0), (gathers + 1.0) * w / g)
    if s.strategy != "hybrid" or g >= w:
        return replace(inside, entries=float(shape.links), node_routes=w, fabric_routes=shape.racks)
    across = scale_traffic(ring_traffic(w / g, 2, stepwise, shape, 0.0), g)
    return replace(add_traffic(inside, across), entries=2.0 * shape.links, node_routes=2 * w, fabric_routes=shape.racks)


def replica_size(level: str, shape: Shape) -> float:
    """Ranks in one replica of local_sgd's family (`replica`: rank, host, rack or datacenter)."""
    per = {"rank": 1.0, "host": float(shape.gpus_per_host), "rack": shape.workers / max(shape.racks, 1),
           "datacenter": shape.workers / max(shape.datacenters, 1)}  # fmt: skip
    return per[level]


def periodic_traffic(
    s: Any, shape: Shape, config: Config, warm_buckets: float, local_buckets: float, averages: float
) -> Traffic:
    """local_sgd's family over a run: a ring of all ranks per warm-up bucket; with replicas of g > 1 ranks an
    all-reduce inside each replica per later bucket, and each average as the 2-D all-reduce (reduce-scatter
    and all-gather inside the w/g replicas, all-reduce across in g groups); else one all-reduce of all ranks per
    average. The averages' all-reduces run as the settings' `algorithm` where they have one (a plug-in's;
    default the ring)."""
    ring = bucket_traffic("ring", s, shape, config, False, 0.0)
    g, w = replica_size(getattr(s, "replica", "rank"), shape), float(shape.workers)
    algorithm = getattr(s, "algorithm", "ring")
    stepwise = config.simulation.collective_model == "stepwise" and ideal_network(config)
    if g <= 1:
        average = all_reduce_traffic(w, algorithm, stepwise, shape, float(shape.links))
        return add_traffic(scale_traffic(ring, warm_buckets), scale_traffic(average, averages))
    inside = scale_traffic(ring_traffic(g, 2, stepwise, shape, float(shape.links)), w / g)
    average = add_traffic(
        scale_traffic(ring_traffic(g, 1, stepwise, shape, 0.0), 2 * w / g),
        scale_traffic(all_reduce_traffic(w / g, algorithm, stepwise, shape, 0.0), g),
    )
    return add_traffic(
        add_traffic(scale_traffic(ring, warm_buckets), scale_traffic(inside, local_buckets)),
        scale_traffic(average, averages),
    )
