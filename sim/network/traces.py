"""Link capacities that follow a trace: at each of its times a link's capacity becomes its capacity at
the start times that row's factor, and the network re-solves every rate then (`Network.set_capacity`).

A factor is relative, so a trace composes with whatever the run made of the link's nominal bandwidth
(the NCCL model's protocol efficiency, for one). Before the first time the capacity is the nominal one;
after the last, the last row's holds.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import simpy

from sim.network.flows import Network


def follow_trace(
    env: simpy.Environment, net: Network, links: Sequence[int], times: Sequence[float], factors: Sequence[float]
) -> simpy.Process:
    """Start the process that sets `links`' capacities to their current ones times `factors[i]` at `times[i]` (s)."""
    if len(times) != len(factors) or not len(times):
        raise ValueError("a trace needs as many factors as times, and at least one")
    if any(b <= a for a, b in zip(times, times[1:])) or times[0] < 0 or min(factors) <= 0:
        raise ValueError("a trace's times must increase from >= 0, its factors be > 0")
    ids = list(links)
    nominal = net.capacity[ids].copy()

    def play() -> Generator[simpy.Event, None, None]:
        for t, factor in zip(times, factors):
            if t > env.now:
                yield env.timeout(t - env.now)
            net.set_capacity(ids, nominal * factor)

    return env.process(play())


def follow_traces(
    env: simpy.Environment,
    net: Network,
    traces: Sequence[tuple[Sequence[int], Sequence[float], Sequence[float]]],
) -> list[simpy.Process]:
    """`follow_trace` for each (links, times, factors), as `Cluster.capacity_traces` lists them."""
    return [follow_trace(env, net, links, times, factors) for links, times, factors in traces]
