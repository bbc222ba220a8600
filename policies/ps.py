"""Parameter-server BSP: push gradient shards to k servers, which aggregate a round and apply it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

from policies.base import Bucket, Policy, SettingError
from policies.ops import Program, Pull, Push, ServerSpec
from policies.view import ClusterView, ModelInfo


class PSSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    shards: Union[Literal["auto"], Annotated[int, Field(ge=1)]] = Field(
        "auto", description="number of server shards; auto = one per candidate host"
    )
    placement: Literal["colocated", "dedicated"] = Field(
        "colocated", description="colocated: on the worker hosts; dedicated: on cluster.server_hosts"
    )
    hosts: Optional[list[str]] = Field(None, description="explicit server hosts; overrides placement")
    apply_ms_per_mb: float = Field(0.0, ge=0, description="server time to apply one MB of update")


class ParameterServer(Policy):
    """Every bucket is split evenly across the k shards (byte-partitioned, as BytePS does). A rank
    pushes its k slices concurrently, then pulls them back; a shard answers a pull once it has
    received that bucket from every worker for this round and applied the sum (BSP).

    Placement: `colocated` puts shards on the worker hosts (one per host by default, as in
    Sync-Switch's setup), `dedicated` on the cluster's server-only hosts, `hosts` on named hosts.
    """

    name = "ps"
    Settings = PSSettings

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
        shards = len(candidates) if s.shards == "auto" else s.shards
        self.shard_hosts = tuple(candidates[i % len(candidates)] for i in range(shards))

    def servers(self) -> Sequence[ServerSpec]:
        return tuple(
            ServerSpec(shard=i, host=h, sync=True, apply_s_per_mb=self.settings.apply_ms_per_mb / 1e3)
            for i, h in enumerate(self.shard_hosts)
        )

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        k = len(self.shard_hosts)
        yield tuple(Push(s, bucket.nbytes / k, key=bucket.index) for s in range(k))
        yield tuple(Pull(s, bucket.nbytes / k, key=bucket.index) for s in range(k))
