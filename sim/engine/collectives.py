"""Collectives as network flows, at two fidelities behind one interface.

`stepwise`: a ring collective is S steps; in step s rank i sends one n/p chunk to rank i+1, and may
do so once it has received step s-1's chunk from rank i-1 and delivered its own step s-1 chunk
(2(p-1) steps of p flows for all-reduce, p-1 for reduce-scatter and all-gather).

`pipelined`: the same collective as one transfer of p coupled sub-flows (rank i -> i+1), each
carrying S*n/p bytes at a common rate, delivered S path-latencies after its data: one event pair
per collective instead of S*p flows. Uncontended, both give S*alpha + S*(n/p)/B exactly; under
contention they agree closely (tests compare them), because the stepwise ring also advances at the
pace of its slowest flow.

All-to-all sends n/p from every member to every other member at once. A butterfly all-reduce
(`AllReduce(algorithm="butterfly")`, sim/engine/butterfly.py) is two such phases: members to owners, then
owners back to members. NCCL has no butterfly: under the NCCL model it is refused. Broadcast is a pipelined
chain from the root: (p - 1) alpha + n/B uncontended, under every model.

Under the NCCL model (`simulation.network_model: nccl`, sim/engine/nccl_plans.py) a dense collective
is one pipelined transfer of the algorithm and protocol NCCL's tuner would pick, with NCCL's latency.

Sparse ops (`op.coding` set) resolve their sizes from the run's index sets (`sim.compute.sparse_traffic`;
in blocks of values for a coding with a `block`, capped at the owner's dense share under `dense_switch`):
a sparse all-to-all is one flow per ordered pair of members with that pair's bytes, a sparse
all-gather one flow from every member to every other carrying the member's rows (all-gather-v by
direct sends, which reaches the receive-bandwidth bound however unequal the members are). In the
pipelined model a member's copies to the others are one coupled transfer (the fine model, one flow
each, is compared with it in tests). Under the NCCL model the flows are delivered after the NCCL
latency of the dense all-to-all or all-gather that moves their largest member's bytes. A coding with a
`topk` declares its members' pairs (`sparse_traffic.declared_bytes`), on any bucket, sparse layers or not.

An op with a `wire` moves its declared `nbytes` like any other; the casts around it are priced by
`cast_s` (sim/engine/wire_costs.py) and charged by the communicator before and after the flows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np
import simpy
from simpy.events import Event

from policies.ops import AllGather, AllReduce, AllToAll, Barrier, Broadcast, Collective, Group, ReduceScatter
from policies.wire import wire_type
from sim.cluster.routing import Path, Router
from sim.compute.sparse_traffic import (
    SparseTraffic,
    declared_bytes,
    exchange_matrix,
    gather_sizes,
    received_imbalance,
)
from sim.engine.butterfly import Mesh, butterfly
from sim.engine.nccl_plans import NcclPlanner, Plan
from sim.engine.wire_costs import cast_seconds
from sim.errors import PolicyError
from sim.nccl.tuner import Choice
from sim.network.flows import Network

MODELS = ("pipelined", "stepwise")
RING_CACHE_LIMIT = 20_000  # groups whose ring paths are kept
NAN = float("nan")


def ring_steps(op: Collective, p: int) -> int:
    """Steps of the ring algorithm for `op` over p ranks."""
    if isinstance(op, (AllReduce, Barrier)):
        return 2 * (p - 1)
    if isinstance(op, (ReduceScatter, AllGather)):
        return p - 1
    raise TypeError(f"{type(op).__name__} is not a ring collective")


class Launched(NamedTuple):
    """A collective under way: its completion event, the bytes it puts on the wire in all, for a
    sparse collective max / mean of the bytes its members receive (NaN for dense ones), and how it runs
    (ops.csv's last columns, README "What you get"): `algorithm` (NCCL's pick under the NCCL model; else ring,
    butterfly, chain or pairwise), and the NCCL `protocol` and `channels` it was priced with (empty and 0
    where NCCL's tuner did not price it)."""

    done: simpy.Event
    nbytes: float
    imbalance: float = float("nan")
    algorithm: str = ""
    protocol: str = ""
    channels: int = 0


class CollectiveRunner:
    """Turns a launched collective into flows; `run` returns it under way.

    `traffic` resolves the sizes of sparse collectives (None: a run without sparse gradients);
    `planner` runs dense collectives as NCCL would (None: the ideal alpha-beta ring of `model`)."""

    def __init__(
        self,
        env: simpy.Environment,
        net: Network,
        router: Router,
        rank_nodes: Sequence[str],
        model: str,
        traffic: Optional[SparseTraffic] = None,
        planner: Optional[NcclPlanner] = None,
        *,
        gradient_type: str = "fp32",
        memory_bytes_per_s: float = 0.0,
    ):
        """`gradient_type` (the workload's resolved `gradient_precision`) and `memory_bytes_per_s` (the
        GPU's memory bandwidth; 0: casts are free) price the casts of ops with a `wire`."""
        if model not in MODELS:
            raise ValueError(f"collective model {model!r}; allowed: {', '.join(MODELS)}")
        self.env, self.net, self.router, self.model = env, net, router, model
        self.rank_nodes, self.traffic, self.planner = rank_nodes, traffic, planner
        self.gradient_type, self.memory_bytes_per_s = gradient_type, memory_bytes_per_s
        # per rank, when the collectives launched so far should end (the tuner's uncontended time)
        self.busy_until = [0.0] * len(rank_nodes)
        self.busy_since = [0.0] * len(rank_nodes)  # per rank, when `busy_until` last grew (a launch)
        self._rings: dict[Group, tuple[tuple[Path, ...], float]] = {}
        self._rings_version = -1
        self._meshes: dict[Group, Mesh] = {}  # butterfly all-reduces' paths
        self._steps: dict[tuple[type, int], int] = {}  # (op type, members) -> ring steps

    def run(
        self,
        op: Collective,
        step: int = 0,
        buckets: Optional[Mapping[int, Any]] = None,
        done: Optional[simpy.Event] = None,
    ) -> Launched:
        """Launch `op`; `step` and `buckets` (each member's gradient bucket) place a sparse op's data.
        `done`: an event the launch may fire on completion as its own (one event fewer); check
        `Launched.done is done` to know whether it did."""
        ranks = op.group.ranks
        p = len(ranks)
        if p == 1:
            done = Event(self.env)
            done.succeed()
            return Launched(done, 0.0)
        if op.coding is not None:
            return self._sparse(op, step, buckets or {})
        if isinstance(op, Broadcast):
            return self._broadcast(op, done)
        if self.planner is not None:
            if isinstance(op, AllReduce) and op.algorithm != "ring":
                raise PolicyError(
                    f"{op!r}: algorithm {op.algorithm!r} has no NCCL form; under simulation.network_model nccl "
                    "allowed: ring (or run it under network_model: ideal)"
                )
            plan = self._plan(op, self.planner)
            choice, paths, net_paths = plan.choice, plan.paths, plan.net_paths
            now = self.env._now
            ends, busy_until, busy_since = now + choice.seconds, self.busy_until, self.busy_since
            for rank in op.group.ranks:
                if busy_until[rank] < ends:
                    busy_until[rank], busy_since[rank] = ends, now
            lat, ways, net_ways = choice.latency_s, plan.ways, plan.net_ways  # channels share a path's bytes
            each, cap = choice.wire_per_path / ways, choice.cap / ways
            net_each, net_cap = choice.net_wire_per_path / net_ways, choice.net_cap / net_ways
            wire = each * len(paths) + net_each * len(net_paths)
            how = (choice.algorithm, choice.protocol, self.planner.fabric.channels)
            if not net_paths:
                return Launched(self.net.transfer(paths, each, latency=lat, cap=cap, done=done), wire, NAN, *how)
            parts = [self.net.transfer(net_paths, net_each, latency=lat, cap=net_cap)]
            if paths:
                parts.append(self.net.transfer(paths, each, latency=lat, cap=cap))
            return Launched(self.env.all_of(parts), wire, NAN, *how)
        if isinstance(op, AllToAll):
            return Launched(self._all_to_all(ranks, op.nbytes / p), (p - 1) * op.nbytes, NAN, "pairwise")
        if isinstance(op, AllReduce) and op.algorithm == "butterfly":  # two all-to-alls of n/p: the ring's bytes
            event = butterfly(self.env, self.net, self._mesh(op.group), op.nbytes / p, self.model, done)
            return Launched(event, 2 * (p - 1) * op.nbytes, NAN, "butterfly")
        steps = self._steps.get((type(op), p))
        if steps is None:
            steps = self._steps[(type(op), p)] = ring_steps(op, p)
        wire = steps * op.nbytes if not isinstance(op, Barrier) else 0.0  # bytes on the wire, all members
        paths, hop_latency, ways = self._ring(op.group)
        chunk = op.nbytes / p / ways  # each channel ring carries its share
        if self.model == "pipelined":
            event = self.net.transfer(paths, steps * chunk, latency=steps * hop_latency, done=done)
            return Launched(event, wire, NAN, "ring")
        if ways == 1:
            return Launched(_StepwiseRing(self.env, self.net, paths, steps, chunk).done, wire, NAN, "ring")
        rings = [_StepwiseRing(self.env, self.net, paths[c * p : (c + 1) * p], steps, chunk) for c in range(ways)]
        return Launched(self.env.all_of([ring.done for ring in rings]), wire, NAN, "ring")

    def _broadcast(self, op: Broadcast, done: Optional[simpy.Event]) -> Launched:
        """A pipelined chain from the root through the other members in group order: every hop carries the
        whole tensor, in chunks small enough that the last member has it (p - 1) hop latencies after one
        transfer time. The same under every network model (NCCL's broadcast is a ring of this shape)."""
        ranks = op.group.ranks
        start = ranks.index(op.root)
        chain = ranks[start:] + ranks[:start]
        paths = [self._path(chain[i], chain[i + 1]) for i in range(len(chain) - 1)]
        latency = len(paths) * max(self.net.path_latency(path) for path in paths)
        event = self.net.transfer(paths, op.nbytes, latency=latency, done=done)
        return Launched(event, len(paths) * op.nbytes, NAN, "chain")

    def cast_s(self, op: Collective) -> tuple[float, float]:
        """Seconds of `op`'s cast to its `wire` before its transfers and back after them."""
        if op.wire is None:
            return 0.0, 0.0
        return cast_seconds(op, self.gradient_type, self.memory_bytes_per_s)

    def nccl_choice(self, op: Collective) -> Optional[Choice]:
        """The algorithm and protocol NCCL would run dense `op` with (None under the ideal model)."""
        if self.planner is None or len(op.group.ranks) < 2:
            return None
        return self._plan(op, self.planner).choice

    def _plan(self, op: Collective, planner: NcclPlanner) -> Plan:
        plan = planner.known(op)  # the ring's paths only when the plan is new (hashing a group costs)
        if plan is not None:
            return plan
        paths, _, ways = self._ring(op.group)
        return planner.plan(op, paths, ways)  # all-to-all too

    def _sparse(self, op: Collective, step: int, buckets: Mapping[int, Any]) -> Launched:
        ranks = op.group.ranks
        coding = op.coding
        assert coding is not None
        p = len(ranks)
        if coding.topk is not None:  # pairs the policy declares (an Encode's top-k), not the index sets
            if not isinstance(op, AllGather):
                raise PolicyError(f"{op!r}: a coding with topk declares an AllGather's pairs")
            bits = wire_type(self.gradient_type, "gradient_type").bits
            sent = np.full(p, declared_bytes(coding, round(op.nbytes * 8 / bits), bits / 8))
            return self._gather(op, sent)
        bucket = buckets.get(ranks[0])
        if self.traffic is None or bucket is None:
            raise PolicyError(
                f"{op!r}: a sparse collective acts on a gradient bucket (yield it from on_gradients) "
                "of a workload with sparse layers"
            )
        owners = 1 if coding.partition == "none" else p
        dense = (
            self.traffic.share_values(bucket, coding.partition, owners, coding.block) if coding.dense_switch else None
        )
        if isinstance(op, AllToAll):
            census = self.traffic.census(step, bucket, ranks, coding.partition, p, coding.block)
            sizes = exchange_matrix(census, coding, dense)
        elif isinstance(op, AllGather):
            census = self.traffic.census(step, bucket, ranks, coding.partition, owners, coding.block)
            return self._gather(op, gather_sizes(census, coding, dense))
        else:
            raise PolicyError(f"{op!r}: only AllToAll and AllGather have a sparse form")
        return self._flows(op, sizes)

    def _gather(self, op: Collective, sent: np.ndarray) -> Launched:
        """A sparse all-gather: member i sends `sent[i]` bytes to every other member."""
        ranks, p = op.group.ranks, len(op.group.ranks)
        sizes = np.repeat(sent[:, None], p, axis=1)
        np.fill_diagonal(sizes, 0.0)
        if self.model != "pipelined":
            return self._flows(op, sizes)
        lat = self._sparse_latency(op, sizes)  # a member's copies to everyone as one coupled transfer
        return self._sparse_launch(
            [
                self.net.transfer(
                    [self._path(ranks[i], ranks[j]) for j in range(p) if j != i], float(sent[i]), latency=lat
                )
                for i in range(p)
                if sent[i] > 0
            ],
            sizes,
        )

    def _flows(self, op: Collective, sizes: np.ndarray) -> Launched:
        """One flow per ordered pair of members: member i sends `sizes[i, j]` bytes to member j."""
        ranks, p = op.group.ranks, len(op.group.ranks)
        lat = self._sparse_latency(op, sizes)
        events = [
            self.net.transfer([self._path(ranks[i], ranks[j])], float(sizes[i, j]), latency=lat)
            for i in range(p)
            for j in range(p)
            if sizes[i, j] > 0
        ]
        return self._sparse_launch(events, sizes)

    def _sparse_latency(self, op: Collective, sizes: np.ndarray) -> Optional[float]:
        """Under the NCCL model, a sparse exchange's flows are delivered after the latency of the
        dense collective it runs as, at the size of its largest member (NCCL moves equal counts: an
        all-gather pads to the largest, an all-to-all's sends wait for the largest). None when ideal:
        the paths' own latency."""
        if self.planner is None:
            return None
        p = len(op.group.ranks)
        largest = float(sizes.sum(axis=1).max()) * p / (p - 1)  # the dense op moving its largest member's bytes
        dense = AllToAll(op.group, largest) if isinstance(op, AllToAll) else AllGather(op.group, largest)
        return self._plan(dense, self.planner).choice.latency_s

    def _sparse_launch(self, events: list[simpy.Event], sizes: np.ndarray) -> Launched:
        """`sizes[i, j]`: bytes member i sends member j, in flows whose deliveries are `events`."""
        done = self.env.all_of(events) if events else self.env.event()
        if not events:
            done.succeed()
        return Launched(done, float(sizes.sum()), received_imbalance(sizes.sum(axis=0)), "pairwise")

    def _ring(self, group: Group) -> tuple[tuple[Path, ...], float, int]:
        """The ring's paths (member i to i+1), the longest one's latency and its channels, once per group:
        routes are fixed, and link latencies change only by faults (the network's `latency_version` says
        when). On a rail-optimized fabric a hop between hosts has a route per rail (`Router.ring_hops`):
        the ring is then that many channel rings, channel c's hops between hosts on its rail c, one after
        another in `paths`, each carrying an equal share (one channel everywhere else)."""
        if self.net.latency_version != self._rings_version:
            self._rings.clear()
            self._rings_version = self.net.latency_version
        found = self._rings.get(group)
        if found is None:
            if len(self._rings) >= RING_CACHE_LIMIT:  # groups that change every step (DS-Sync's shuffles)
                self._rings.clear()
            hops = self.router.ring_hops([self.rank_nodes[r] for r in group.ranks])
            ways = math.lcm(*map(len, hops))
            paths = tuple(hop[c % len(hop)] for c in range(ways) for hop in hops)
            found = self._rings[group] = (paths, max(self.net.path_latency(path) for path in paths), ways)
        return found

    def _mesh(self, group: Group) -> Mesh:
        """The paths between every two members of `group`, once per group (routes are fixed)."""
        found = self._meshes.get(group)
        if found is None:
            if len(self._meshes) >= RING_CACHE_LIMIT:
                self._meshes.clear()
            ranks = group.ranks
            found = self._meshes[group] = Mesh.of([[self._path(a, b) for b in ranks] for a in ranks])
        return found

    def _path(self, a: int, b: int) -> Path:
        return self.router.path(self.rank_nodes[a], self.rank_nodes[b])

    def _all_to_all(self, ranks: Sequence[int], share: float) -> simpy.Event:
        pairs = [(a, b) for a in ranks for b in ranks if a != b]
        paths = [self._path(a, b) for a, b in pairs]
        if self.model == "pipelined":
            return self.net.transfer(paths, share)
        return self.env.all_of([self.net.transfer([path], share) for path in paths])


class _StepwiseRing:
    """Flow-by-flow ring: flow (i, s) waits for (i-1, s-1) and (i, s-1) to be delivered."""

    def __init__(self, env: simpy.Environment, net: Network, paths: Sequence[Path], steps: int, chunk: float):
        self.net, self.paths, self.steps, self.chunk = net, paths, steps, chunk
        self.p = len(paths)
        self.delivered = [[False] * steps for _ in range(self.p)]
        self.last_step_left = self.p
        self.done = env.event()
        for i in range(self.p):
            self._start(i, 0)

    def _start(self, i: int, s: int) -> None:
        event = self.net.transfer([self.paths[i]], self.chunk)
        event.callbacks.append(self._on_delivered(i, s))

    def _on_delivered(self, i: int, s: int) -> Callable[[simpy.Event], None]:
        def callback(_event: simpy.Event) -> None:
            self.delivered[i][s] = True
            if s + 1 == self.steps:
                self.last_step_left -= 1
                if self.last_step_left == 0:
                    self.done.succeed()
                return
            # (i, s) is the last prerequisite of (i, s+1) and of (i+1, s+1) to be delivered, if the
            # other prerequisite of each is already in; so each flow is started exactly once.
            if self.delivered[(i - 1) % self.p][s]:
                self._start(i, s + 1)
            nxt = (i + 1) % self.p
            if self.delivered[nxt][s]:
                self._start(nxt, s + 1)

        return callback
