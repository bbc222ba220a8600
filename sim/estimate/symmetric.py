"""Host symmetry in the cost estimate: which runs simulate one host (`sim.engine.symmetry`), and what
those runs still put on the simulator.

Where every host runs the same program, the engine runs host 0's ranks only: their compute slices,
arrivals and local ops, host 0's local collectives (hierarchical's reduce-scatter and all-gather, FSDP's
by host), and every collective that holds host 0's ranks (ring's, PowerSGD's and FSDP's of the world,
the cross all-reduces) with all of its sub-flows. The cluster is still built in full, and the result rows are
still every rank's: host 0's are copied to the others (vectorised), then written as CSV like any row.
The decision is the engine's own `config_reason` on the policy as `bind` would set it, plus what the
built cluster would show: at least two GPU hosts, all alike (the topologies it accepts give every host
the same GPUs and NICs; server hosts hold no ranks).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from policies.base import Policy
from policies.hierarchical import Hierarchical
from sim.config import Config
from sim.config.host_symmetry import config_reason
from sim.estimate.shape import Shape
from sim.estimate.traffic import Traffic, local_level, ring_traffic

COUNTED = ("ring", "hierarchical", "fsdp", "powersgd")  # the built-ins whose one-host program the estimate counts
# Routes: a one-host run still routes every member of its collectives of many hosts, and with few events
# they are most of its time. Counted by wrapping `Router.path` and `Router._fabric_options` on two_tier
# runs of 64 to 1,024 racks of 32 hosts x 8 (ring and hierarchical): under the NCCL model a member's routes
# are its ring hop in NCCL's plan, its trees' edges both ways and the transfer's ring hop, 3.44 a member
# (ring) to 3.75 (hierarchical's cross groups), and 3.7 rack-to-rack searches a rack; the ideal model
# routes the ring hops alone, one a member and one search a rack.
ROUTES_PER_MEMBER = {"nccl": 3.5, "ideal": 1.0}
FABRIC_SEARCHES_PER_RACK = {"nccl": 3.7, "ideal": 1.0}
# Seconds of CPU, fitted on two runs of `ring_one_bucket` (benchmarks/check_scale.py) at 512 and 1,024 racks
# (131,072 and 262,144 GPUs, 2 iterations; 2-core machine): the engine's time less its rack-to-rack searches
# and its sub-flows, over its routes: 15.9 and 13.7 us a route, the NCCL plan's work per member included.
# A search walks the switch graph (a rack's ToR each): 0.72 and 0.70 us a rack.
S_PER_ROUTE = 15e-6
S_PER_SEARCH_RACK = 0.7e-6
# A sub-flow of a transfer of every member: `frontier_ring_131072` (27 buckets) took 1.8 s of CPU more than
# `ring_one_bucket_131072` on the same cluster for 6.8M more sub-flows (check_scale.py, 2026-11-28).
S_PER_SUBFLOW = 0.3e-6


def one_host_ranks(config: Config, policy: Policy, name: str, shape: Shape) -> Optional[int]:
    """The ranks a run of `policy` (counted as built-in `name`) simulates when host symmetry applies (one
    host's); None when it runs every rank."""
    if name not in COUNTED or shape.hosts < 2:
        return None
    if isinstance(policy, Hierarchical) and not hasattr(policy, "level"):
        # `host_symmetric` reads the level `bind` settles; the estimate never binds (no cluster is built),
        # so settle it here as bind would
        policy.level = local_level(policy.settings.level, shape)
    try:
        reason = config_reason(config, policy, config.numerics_on)
    except AttributeError:  # a plug-in whose answer needs state only `bind` sets: count every rank
        return None
    return shape.gpus_per_host if reason is None else None


def one_host_traffic(name: str, t: Traffic, shape: Shape, network_model: str, settings: Any = None) -> Traffic:
    """One bucket's traffic `t` (the general path's: every rank) as a one-host run moves it. Collectives of
    every rank (ring's, PowerSGD's, FSDP's unless hybrid) as they were; hierarchical's host 0 reduce-scatter
    and all-gather and its g cross all-reduces (each over one rank of every host); FSDP hybrid by host, host
    0's gathers and reduce-scatter and the g all-reduces across. The other hosts' local groups are not run.
    Op rows stay every group's: the tables are expanded. Routes as counted above (`S_PER_ROUTE` each; FSDP's
    gathers plan no trees, so fewer: not counted apart)."""
    routes = replace(
        t,
        node_routes=ROUTES_PER_MEMBER[network_model] * shape.workers,
        fabric_routes=FABRIC_SEARCHES_PER_RACK[network_model] * shape.racks,
    )
    g = float(shape.gpus_per_host)
    n = shape.workers / g
    if name == "hierarchical":
        locals_run = 2.0  # host 0's reduce-scatter and all-gather
    elif name == "fsdp" and settings.strategy == "hybrid":
        locals_run = (2.0 if settings.reshard_after_forward else 1.0) + 1.0  # host 0's gathers, reduce-scatter
    else:
        return routes
    local, across = ring_traffic(g, 1, False, shape, 0.0), ring_traffic(n, 2, False, shape, 0.0)
    return replace(
        routes,
        collectives=locals_run * local.collectives + g * across.collectives,
        flows=locals_run * local.flows + g * across.flows,
        subflows=locals_run * local.subflows + g * across.subflows,
    )


def one_host_route_s(t: Traffic, shape: Shape) -> float:
    """Seconds to work out `t`'s routes (`one_host_traffic`'s counts)."""
    return t.node_routes * S_PER_ROUTE + t.fabric_routes * S_PER_SEARCH_RACK * shape.racks
