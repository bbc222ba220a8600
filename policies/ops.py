"""The communication vocabulary that policies speak and backends execute.

A policy never touches a network or a tensor: it yields these small, immutable values and a backend
(the simulator in `sim/`, torch.distributed in `real/`) carries them out. Sizes are bytes of the
*whole* tensor a rank contributes (an all-reduce of an n-byte gradient has `nbytes=n` whatever
the group size); each backend derives per-step chunk sizes itself.

Sparse tensors: an op with `density=SPARSE` carries a `SparseCoding` (`policies.row_coding`): the rows that are non-zero
are data (a worker's embedding rows touched by its batch, its top-k positions), so the bytes each
member sends are resolved by the backend from the real index sets when the op runs; `nbytes` stays
the dense size of the tensor. See docs/sparse.md for the rules and their closed forms.

Precision on the wire (`policies.wire`, docs/policies.md): a collective's `wire` names the element type
its values travel in. Left None, the op moves the backend's default type (gradients: the workload's
`gradient_precision`; parameters: fp32) and `nbytes` is the tensor's size in it, as before. Set, the op
states its tensor's `elements` and `nbytes` is what travels (values and per-block scales); give either
and the other is derived, or both, which must agree (the engine refuses a mismatch).

Tensors (`policies.tensors`, docs/policies.md "Tensor-side primitives"): a collective acts on `tensor`, a
buffer by name (None: `parameters` for a PARAMETERS payload, else `gradients`), over its hook's region
(the bucket's elements, or the whole model), narrowed to a `fragment` of buckets in a whole-model hook.
Local ops (`Combine`, `OptimizerStep`, `Encode`) act on one rank's buffers and move nothing.

Ops that span steps: a collective given a `handle` is launched and not waited for: its program item
ends at once, and a later `Wait(handle)` of the same rank (at this step or any later one) blocks until it
has completed. A policy must not touch a launched op's tensor until its Wait; a handle is used again
only after its Wait. Collectives on one group still run one at a time, in issue order.

Programs: a policy hook returns an iterable whose items are either one op or a tuple/list of ops.
Items run one after another; the ops inside one item run concurrently and the item ends when all
of them have. Collectives on the same group execute in issue order (as on one NCCL communicator);
point-to-point ops to servers are independent of each other.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Optional, Union

from policies.row_coding import INDEX_BYTES as INDEX_BYTES  # re-exported: where callers import them
from policies.row_coding import INDEX_FORMATS as INDEX_FORMATS
from policies.row_coding import PARTITIONS as PARTITIONS
from policies.row_coding import SparseCoding
from policies.tensors import GRADIENTS, PARAMETERS, Codec, Fragment, Optimizer, check_name
from policies.wire import DEFAULT_BLOCK, check_block, wire_elements, wire_nbytes, wire_type


class Payload(str, Enum):
    """What the bytes of an op mean; timing ignores it, real tensors need it."""

    GRADIENTS = "gradients"
    PARAMETERS = "parameters"
    CONTROL = "control"


class Density(str, Enum):
    DENSE = "dense"
    SPARSE = "sparse"


@dataclass(frozen=True)
class Group:
    """An ordered set of ranks taking part in a collective; the order is the ring order."""

    ranks: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.ranks) == 0:
            raise ValueError("a group needs at least one rank")
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError(f"group {self.ranks} lists a rank twice")
        # tuples do not cache their hash, and backends key dicts on groups of thousands of ranks
        object.__setattr__(self, "_hash", hash(self.ranks))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined, no-any-return]

    @classmethod
    def of(cls, ranks: Iterable[int]) -> Group:
        return cls(tuple(int(r) for r in ranks))

    @property
    def size(self) -> int:
        return len(self.ranks)

    def __contains__(self, rank: object) -> bool:
        return rank in self.ranks

    def __repr__(self) -> str:
        shown = self.ranks if len(self.ranks) <= 8 else (*self.ranks[:4], "...", *self.ranks[-2:])
        return f"Group{tuple(shown)}"


def groups_by_rank(groups: Sequence[Sequence[int]]) -> tuple[dict[int, Group], dict[int, Group]]:
    """Equal-sized `groups` of ranks as two maps: each rank to its own group, and each rank to the group of
    the ranks at its position in every group (a 2-D layout's rows and columns). Each `Group` is made once
    and shared by its members: one per rank validated a world-sized group once per rank."""
    within = [Group(tuple(g)) for g in groups]
    across = [Group(tuple(g[i] for g in groups)) for i in range(len(groups[0]))]
    return {r: g for g in within for r in g.ranks}, {r: g for g in across for r in g.ranks}


@dataclass(frozen=True)
class Op:
    """Base class of every operation; `nbytes` is validated by the engine."""


@dataclass(frozen=True)
class Collective(Op):
    """An operation every member of `group` must issue, in the same order on every member."""

    group: Group
    nbytes: float = None  # type: ignore[assignment]  # always a number after construction (see below)
    payload: Payload = Payload.GRADIENTS
    density: Density = Density.DENSE
    coding: Optional[SparseCoding] = None  # set exactly when density is SPARSE
    wire: Optional[str] = None  # element type on the wire (policies.wire.WIRE_NAMES); None: the default
    elements: Optional[float] = None  # values in the tensor (with `wire`); derived from nbytes if left out
    block: int = DEFAULT_BLOCK  # values per scale of a scaled wire type (int8, fp4, fp8)
    tensor: Optional[str] = None  # the buffer it acts on (policies.tensors); None: by payload
    fragment: Optional[Fragment] = None  # whole-model hooks: only these buckets' elements
    handle: Optional[str] = None  # launch without waiting; `Wait(handle)` waits (see the module's text)

    @property
    def buffer(self) -> str:
        """The buffer this op acts on: `tensor`, else parameters or gradients by payload."""
        if self.tensor is not None:
            return self.tensor
        return PARAMETERS if self.payload is Payload.PARAMETERS else GRADIENTS

    def __post_init__(self) -> None:
        if self.tensor is not None:
            check_name(self.tensor, "tensor")
        if self.fragment is not None and not isinstance(self.fragment, Fragment):
            raise ValueError(f"fragment {self.fragment!r}; allowed: None or a policies.tensors.Fragment")
        if self.handle is not None:
            check_name(self.handle, "handle")
        if self.wire is None:
            if self.nbytes is None:
                raise ValueError(f"{type(self).__name__}: nbytes is required unless wire and elements are given")
            return
        wire_type(self.wire)
        check_block(self.block)
        if self.nbytes is None and self.elements is None:
            raise ValueError(f"{type(self).__name__}: give elements (or nbytes) with wire {self.wire!r}")
        if self.nbytes is None:
            object.__setattr__(self, "nbytes", wire_nbytes(self.elements, self.wire, self.block))  # type: ignore[arg-type]
        elif self.elements is None:
            object.__setattr__(self, "elements", wire_elements(self.nbytes, self.wire, self.block))


@dataclass(frozen=True)
class AllReduce(Collective):
    """Sum (or average) an `nbytes` tensor across the group; everyone gets the result.

    `algorithm` (ALLREDUCE_ALGORITHMS) says how the bytes travel, never what the members end with: `ring`
    (the backend's own; under the simulator's NCCL model, what NCCL's tuner picks), or `butterfly`, as
    hivemind's `AllReduceRunner` averages: member i owns the i-th 1/p of the tensor, every member sends each
    owner its part at once, and each owner sends the reduced part back to every member at once. Per member
    the bytes equal the ring's, over p - 1 connections at a time and in 2 latency rounds instead of 2(p - 1)."""

    algorithm: str = "ring"


@dataclass(frozen=True)
class ReduceScatter(Collective):
    """Reduce an `nbytes` tensor; member i keeps the i-th 1/p of the result."""


@dataclass(frozen=True)
class AllGather(Collective):
    """Each member holds 1/p of an `nbytes` tensor; afterwards everyone holds all of it.

    Sparse, `partition` hash or contiguous: each member holds the rows it owns (as a sparse AllToAll
    left them) and sends them to everyone. Sparse, `partition: none`: each member sends its whole
    sparse tensor to everyone, and everyone reduces what it received (an all-gather of index/value
    pairs)."""


@dataclass(frozen=True)
class AllToAll(Collective):
    """Each member sends `nbytes / p` to every member (its own share stays local).

    Sparse: each member sends every other member the non-zero rows that member owns (`coding`);
    owners reduce what they receive. Per-pair sizes follow the real index sets, so they differ."""


@dataclass(frozen=True)
class Broadcast(Collective):
    """Member `root`'s tensor (`tensor`, or the parameters) copied to every member; with `state`, the
    state of its policy-owned optimizer of that key (`OptimizerStep.state`: momentum, moments, step
    counts, all of them) instead. `nbytes` is what travels: the tensor, or all of the state.
    What a worker that joins a run is handed (policies.membership)."""

    root: int = 0
    state: Optional[str] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.root not in self.group:
            raise ValueError(f"Broadcast: root {self.root} is not a member of {self.group!r}")
        if self.state is not None:
            check_name(self.state, "state")
        if self.wire is not None or self.coding is not None or self.fragment is not None:
            raise ValueError("Broadcast: copies a whole tensor as it is (no wire, coding or fragment)")


@dataclass(frozen=True)
class Barrier(Collective):
    """Wait until every member has arrived; carries no payload."""

    nbytes: float = 0.0
    payload: Payload = Payload.CONTROL


@dataclass(frozen=True)
class Push(Op):
    """Send `nbytes` of this rank's update to parameter-server shard `shard` under `key`.

    The shard's `ServerSpec` decides what happens on arrival (aggregate a round, or apply at once).
    """

    shard: int
    nbytes: float
    key: int = 0
    payload: Payload = Payload.GRADIENTS
    coding: Optional[SparseCoding] = None  # sparse: only this rank's non-zero rows the shard owns


@dataclass(frozen=True)
class Pull(Op):
    """Fetch `nbytes` of parameters under `key` from shard `shard`.

    On a synchronous shard the reply waits until this rank's current round of `key` is applied;
    on an asynchronous shard it is sent at once.
    """

    shard: int
    nbytes: float
    key: int = 0
    payload: Payload = Payload.PARAMETERS
    coding: Optional[SparseCoding] = None  # sparse: only the rows the shard updated in the last round


@dataclass(frozen=True)
class WaitForClock(Op):
    """Block until every worker has finished at least `min_clock` iterations (SSP's bound)."""

    min_clock: int


@dataclass(frozen=True)
class ServerSpec:
    """A parameter-server shard a policy asks the backend to run.

    `host` names a host of the cluster view. A synchronous shard (`sync=True`) aggregates one
    push per worker for each (key, round) before applying; an asynchronous one applies every push
    on arrival. `apply_s_per_mb` is the server's cost to apply one MB of update.
    """

    shard: int
    host: str
    sync: bool = True
    apply_s_per_mb: float = 0.0
    workers: tuple[int, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Wait(Op):
    """Block until this rank's collective launched with `handle` has completed."""

    handle: str

    def __post_init__(self) -> None:
        check_name(self.handle, "handle")


@dataclass(frozen=True)
class LocalOp(Op):
    """An op on this rank's own buffers (`policies.tensors`); it moves nothing. It acts on its hook's
    region (a bucket's elements, or the whole model), narrowed to `fragment` in a whole-model hook."""

    @property
    def reads(self) -> tuple[str, ...]:
        raise NotImplementedError

    @property
    def writes(self) -> tuple[str, ...]:
        raise NotImplementedError

    def _check(self) -> None:
        fragment = getattr(self, "fragment", None)
        if fragment is not None and not isinstance(fragment, Fragment):
            raise ValueError(f"fragment {fragment!r}; allowed: None or a policies.tensors.Fragment")
        for name in self.reads + self.writes:
            check_name(name, "buffer")


@dataclass(frozen=True)
class Combine(LocalOp):
    """`out` = sum of coefficient * buffer over `terms` (all read before `out` is written): a copy
    (`((1.0, "anchor"),)`), a difference, a mixing of two buffers."""

    out: str
    terms: tuple[tuple[float, str], ...]
    fragment: Optional[Fragment] = None

    def __post_init__(self) -> None:
        if not self.terms:
            raise ValueError("Combine: terms must name at least one (coefficient, buffer)")
        for term in self.terms:
            coef = term[0] if isinstance(term, tuple) and len(term) == 2 else None
            if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef):
                raise ValueError(f"Combine: term {term!r}; allowed: (finite coefficient, buffer name)")
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.terms)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.out,)


@dataclass(frozen=True)
class OptimizerStep(LocalOp):
    """Step buffer `params` by `optimizer` with the gradient held in buffer `grad`; the backend keeps
    the optimizer's state (momentum, moments, step count) per rank under the key `state`."""

    params: str
    grad: str
    optimizer: Optimizer
    state: str = "outer"
    fragment: Optional[Fragment] = None

    def __post_init__(self) -> None:
        if not isinstance(self.optimizer, Optimizer):
            raise ValueError(f"optimizer {self.optimizer!r}; allowed: a policies.tensors.Optimizer")
        check_name(self.state, "state")
        self._check()

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.params, self.grad)

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.params,)


@dataclass(frozen=True)
class Encode(LocalOp):
    """Compress buffer `source` by `codec` as it would arrive after decoding, into `out` (None: in
    place). With `residual` (error feedback): the codec takes `source + residual`, and `residual`
    keeps what it lost (`source + residual - out`)."""

    source: str
    codec: Codec
    out: Optional[str] = None
    residual: Optional[str] = None
    fragment: Optional[Fragment] = None

    def __post_init__(self) -> None:
        if not isinstance(self.codec, Codec):
            raise ValueError(f"codec {self.codec!r}; allowed: a policies.tensors.Codec")
        self._check()

    @property
    def target(self) -> str:
        return self.source if self.out is None else self.out

    @property
    def reads(self) -> tuple[str, ...]:
        return (self.source,) + ((self.residual,) if self.residual else ())

    @property
    def writes(self) -> tuple[str, ...]:
        return (self.target,) + ((self.residual,) if self.residual else ())


Step = Union[Op, "tuple[Op, ...]", "list[Op]"]
Program = Iterable[Step]


def step_ops(step: Step) -> tuple[Op, ...]:
    """The ops of one program item (one op, or a tuple/list of concurrent ops)."""
    return tuple(step) if isinstance(step, (tuple, list)) else (step,)


COLLECTIVES: tuple[type[Collective], ...] = (AllReduce, ReduceScatter, AllGather, AllToAll, Broadcast, Barrier)
ALLREDUCE_ALGORITHMS: tuple[str, ...] = ("ring", "butterfly")
