"""Checks on every op a policy yields, shared by both backends: a bad op fails with a message naming
the policy, the rank, the step and the op, before anything is sent."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

from policies.ops import (
    ALLREDUCE_ALGORITHMS,
    AllGather,
    AllReduce,
    AllToAll,
    Barrier,
    Collective,
    Density,
    Group,
    LocalOp,
    Op,
    Pull,
    Push,
    SparseCoding,
    Wait,
    WaitForClock,
)
from policies.tensors import BUILT_IN, Fragment
from policies.wire import mismatch, wire_nbytes
from sim.errors import PolicyError

MEMO_LIMIT = 100_000  # ops remembered as valid; policies that make new ones per call stop here


class OpValidator:
    def __init__(
        self, policy: str, world: int, shards: int, buffers: Sequence[str] = (), buckets: Optional[int] = None
    ) -> None:
        """`buffers`: the names of the buffers the policy declared; `buckets`: the model's gradient
        buckets (fragments must lie within them; None: not checked)."""
        self.policy, self.world, self.shards = policy, world, shards
        self.buffers = frozenset(BUILT_IN) | frozenset(buffers)
        self.buckets = buckets
        self._members: dict[Group, frozenset[int]] = {}  # validated groups -> member sets
        # id -> (op, the ranks it is valid for; None: any rank) for ops that passed; the op is kept
        # alive here, so its id cannot be reused by another op
        self._valid: dict[int, tuple[Op, frozenset[int] | None]] = {}

    def fail(self, rank: int, step: int, op: object, why: str) -> PolicyError:
        return PolicyError(f"policy {self.policy!r} yielded {op!r} on rank {rank} at step {step}: {why}")

    def check(self, rank: int, step: int, op: object) -> None:
        known = self._valid.get(id(op))
        if known is not None and known[0] is op and (known[1] is None or rank in known[1]):
            return  # checked before (policies that reuse their op objects skip the checks)
        self._check(rank, step, op)
        if len(self._valid) < MEMO_LIMIT:
            members = self._members[op.group] if isinstance(op, Collective) else None
            self._valid[id(op)] = (op, members)  # type: ignore[assignment]

    def _check(self, rank: int, step: int, op: object) -> None:
        if not isinstance(op, Op):
            raise self.fail(rank, step, op, "not an op from policies.ops")
        nbytes = getattr(op, "nbytes", 0.0)
        if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
            raise self.fail(rank, step, op, "nbytes must be a finite number >= 0")
        if isinstance(op, Collective):
            members = self._members.get(op.group)
            if members is None:  # check each distinct group once: every rank issues the same ones
                bad = [r for r in op.group.ranks if not (isinstance(r, int) and 0 <= r < self.world)]
                if bad:
                    raise self.fail(rank, step, op, f"ranks {bad} do not exist (world size {self.world})")
                members = self._members[op.group] = frozenset(op.group.ranks)
            if rank not in members:
                raise self.fail(rank, step, op, f"rank {rank} is not a member of the group")
            if isinstance(op, AllReduce) and op.algorithm not in ALLREDUCE_ALGORITHMS:
                raise self.fail(rank, step, op, f"unknown algorithm; allowed: {', '.join(ALLREDUCE_ALGORITHMS)}")
            self._check_sparse(rank, step, op, (op.density is Density.SPARSE), (AllToAll, AllGather))
            if isinstance(op, AllToAll) and op.coding is not None and op.coding.partition == "none":
                raise self.fail(rank, step, op, "a sparse AllToAll needs partition hash or contiguous")
            if op.wire is not None:
                self._check_wire(rank, step, op)
            self._check_tensors(rank, step, op, (op.buffer,), op.fragment)
            if op.handle is not None and isinstance(op, Barrier):
                raise self.fail(rank, step, op, "a Barrier cannot be launched with a handle; it carries nothing")
        elif isinstance(op, LocalOp):
            self._check_tensors(rank, step, op, op.reads + op.writes, getattr(op, "fragment", None))
        elif isinstance(op, Wait):
            pass  # whether the handle was launched is the executor's to check: it knows this rank's launches
        elif isinstance(op, (Push, Pull)):
            if not 0 <= op.shard < self.shards:
                raise self.fail(rank, step, op, f"no shard {op.shard}; the policy declared {self.shards} shards")
            self._check_sparse(rank, step, op, op.coding is not None, (Push, Pull))
            if op.coding is not None and op.coding.partition == "none":
                raise self.fail(rank, step, op, "a sparse push or pull needs partition hash or contiguous")
            if op.coding is not None and (op.coding.block is not None or op.coding.dense_switch):
                raise self.fail(rank, step, op, "block and dense_switch codings are for AllToAll and AllGather")
        elif isinstance(op, WaitForClock):
            if not isinstance(op.min_clock, int):
                raise self.fail(rank, step, op, "min_clock must be an int")
        else:
            raise self.fail(rank, step, op, "the backend has no rule for this op type")

    def _check_tensors(self, rank: int, step: int, op: Op, names: Sequence[str], fragment: Optional[Fragment]) -> None:
        unknown = [name for name in names if name not in self.buffers]
        if unknown:
            raise self.fail(
                rank,
                step,
                op,
                f"no buffer {unknown[0]!r}; buffers: {', '.join(sorted(self.buffers))} "
                "(declare a policy's own in Policy.buffers)",
            )
        if fragment is not None and self.buckets is not None and fragment.count > self.buckets:
            raise self.fail(
                rank, step, op, f"fragment count {fragment.count} exceeds the model's {self.buckets} gradient buckets"
            )

    def _check_wire(self, rank: int, step: int, op: Collective) -> None:
        """An op with a `wire` moves what it declares: its bytes are its elements in that type."""
        if isinstance(op, Barrier) or op.coding is not None:
            raise self.fail(rank, step, op, "wire applies to dense collectives with a payload")
        elements = op.elements
        if not (isinstance(elements, (int, float)) and math.isfinite(elements) and elements >= 0):
            raise self.fail(rank, step, op, "elements must be a finite number >= 0")
        if mismatch(elements, op.nbytes, op.wire, op.block) > 0:  # type: ignore[arg-type]
            expected = wire_nbytes(elements, op.wire, op.block)  # type: ignore[arg-type]
            raise self.fail(
                rank,
                step,
                op,
                f"nbytes {op.nbytes:g} does not match {elements:g} elements of {op.wire} (block {op.block}): "
                f"{expected:g} bytes; give elements or nbytes alone and the other is derived",
            )

    def _check_sparse(self, rank: int, step: int, op: Op, sparse: bool, allowed: tuple[type, ...]) -> None:
        coding = getattr(op, "coding", None)
        if not sparse and coding is None:
            return
        if not isinstance(op, allowed):
            names = "AllToAll, AllGather, Push, Pull"
            raise self.fail(rank, step, op, f"{type(op).__name__} has no sparse form; sparse ops: {names}")
        if not isinstance(coding, SparseCoding):
            raise self.fail(rank, step, op, "a sparse op needs coding=SparseCoding(...)")
        if isinstance(op, Collective) and op.density is not Density.SPARSE:
            raise self.fail(rank, step, op, "coding is set but density is not SPARSE")
