"""Parameter servers: k shards holding the model, placed on hosts; BSP through synchronous shards.

`ShardedPolicy` is what every parameter-server scheme shares (settings, placement, the push-then-
pull program of a bucket); `ParameterServer` is BSP, and `policies.asp` / `policies.ssp` build the
asynchronous schemes on the same base.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, ClassVar, Literal, Optional, Union

from pydantic import BaseModel, Field

from policies.base import Bucket, Policy, PolicySettings, SettingError
from policies.held import HeldState
from policies.ops import Program, Pull, Push, ServerSpec
from policies.view import ClusterView, ModelInfo


class PSSettings(PolicySettings):
    shards: Union[Literal["auto"], Annotated[int, Field(ge=1, le=2**20)]] = Field(
        "auto", description="number of server shards; auto = one per candidate host"
    )
    placement: Literal["colocated", "dedicated"] = Field(
        "colocated", description="colocated: on the worker hosts; dedicated: on cluster.server_hosts"
    )
    hosts: Optional[list[str]] = Field(None, description="explicit server hosts; overrides placement")
    apply_ms_per_mb: float = Field(0.0, ge=0, le=1e4, description="server time to apply one MB of update")
    replication: Literal["between_graph", "in_graph"] = Field(
        "between_graph",
        description="between_graph: every worker runs its own training client and input pipeline; in_graph "
        "(BSP only): one client drives every worker as a tower and prepares all their batches with one "
        "host's input pipeline (TensorFlow 1.x, Tensor2Tensor --sync)",
    )


class ShardedPolicy(Policy):
    """Every bucket is split evenly across the k shards (byte-partitioned, as BytePS does); a rank
    pushes its k slices concurrently, then pulls them back. `sync` says what the shards do with a
    push: aggregate a round from every worker (BSP) or apply it at once (asynchronous).

    Placement: `colocated` puts shards on the worker hosts (one per host by default, as in
    Sync-Switch's setup), `dedicated` on the cluster's server-only hosts, `hosts` on named hosts.

    Replication: `between_graph` (default) runs a client per worker; `in_graph` runs one client
    whose graph holds every worker's tower, so one host's input pipeline prepares every batch (how
    Sync-Switch's BSP ran: Tensor2Tensor's `--sync` places the towers on the parameter-server
    tasks' GPUs, fed by the master process). Only a synchronous scheme can run in one graph.
    """

    Settings: ClassVar[type[BaseModel]] = PSSettings
    sync: ClassVar[bool] = True

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        s = self.settings
        if s.hosts is not None:
            unknown = [h for h in s.hosts if h not in view.hosts]
            if unknown or not s.hosts:
                raise SettingError("hosts", f"unknown hosts {unknown}; allowed: {', '.join(view.hosts)}")
            candidates: Sequence[str] = list(s.hosts)
        elif s.placement == "dedicated":
            if not view.server_hosts:
                raise SettingError(
                    "placement",
                    "'dedicated' needs server-only hosts (set cluster.server_hosts); allowed here: colocated",
                )
            candidates = view.server_hosts
        else:
            candidates = view.worker_hosts
        if s.replication == "in_graph" and not self.sync:
            raise SettingError(
                "replication",
                f"'in_graph' runs every worker in one synchronous step; {self.name!r} is "
                "asynchronous; allowed here: between_graph",
            )
        shards = len(candidates) if s.shards == "auto" else s.shards
        self.shard_hosts = tuple(candidates[i % len(candidates)] for i in range(shards))
        self._ops: dict[tuple, tuple] = {}

    def decisions(self) -> list[tuple[str, str, str]]:
        s = self.settings
        if s.shards != "auto":
            return []
        where = "the hosts named" if s.hosts is not None else f"{s.placement} hosts"
        hosts = len(set(self.shard_hosts))
        return [("shards", str(len(self.shard_hosts)), f"auto: one per candidate host ({hosts} {where})")]

    @property
    def one_input_pipeline(self) -> bool:
        return bool(self.settings.replication == "in_graph")

    def held_state(self) -> HeldState:
        """A worker keeps its replica and gradient; the optimizer runs on the servers (not a GPU's memory)."""
        return HeldState(optimizer=0.0, buffer_bytes=self.bound_model.gradient_bytes)

    def servers(self) -> Sequence[ServerSpec]:
        return tuple(
            ServerSpec(shard=i, host=h, sync=self.sync, apply_s_per_mb=self.settings.apply_ms_per_mb / 1e3)
            for i, h in enumerate(self.shard_hosts)
        )

    def pushes(self, bucket: Bucket) -> tuple[Push, ...]:
        """The bucket's slices to every shard (ops are immutable: built once per bucket, then reused)."""
        ops = self._ops.get(("push", bucket.index, bucket.nbytes))
        if ops is None:
            k = len(self.shard_hosts)
            ops = self._ops[("push", bucket.index, bucket.nbytes)] = tuple(
                Push(s, bucket.nbytes / k, key=bucket.index) for s in range(k)
            )
        return ops  # type: ignore[return-value]

    def pulls(self, key: int, nbytes: float) -> tuple[Pull, ...]:
        ops = self._ops.get(("pull", key, nbytes))
        if ops is None:
            k = len(self.shard_hosts)
            ops = self._ops[("pull", key, nbytes)] = tuple(Pull(s, nbytes / k, key=key) for s in range(k))
        return ops  # type: ignore[return-value]


class ParameterServer(ShardedPolicy):
    """BSP through k synchronous shards: each bucket's gradient slices are pushed as backward
    produces them; the next step reads each bucket's parameters as forward needs them, and a shard
    answers once it has received that bucket from every worker for the round and applied the sum."""

    name = "ps"

    def on_forward(self, rank: int, step: int, bucket: Bucket) -> Program:
        if step == 0:  # step 0 starts from the initial parameters every worker already holds
            return ()
        return self._one_item(self.pulls(bucket.index, bucket.nbytes))

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        return self._one_item(self.pushes(bucket))

    def _one_item(self, ops: tuple[Push, ...] | tuple[Pull, ...]) -> Program:
        """The program of one item `ops`, the same tuple every time (backends skip checking a program
        they have run before)."""
        program = self._ops.get(("program", id(ops)))
        if program is None:
            program = self._ops[("program", id(ops))] = (ops,)  # `ops` is kept in `_ops`: its id stays unique
        return program


class AsyncShardedPolicy(ParameterServer):
    """The asynchronous pattern (ASP, SSP): the same reads and pushes as BSP, but the shards apply
    each push on arrival and answer reads at once with whatever they hold. Workers share the
    config's iterations x workers updates. `begin_step` yields the scheme's bound (none for ASP)."""

    sync = False
    shared_budget = True
