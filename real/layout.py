"""The processes a real run of a config needs: a worker per GPU of its cluster (ranks 0..W-1), then
a process per parameter-server shard (as many as the policy that declares the most), each on the
cluster host its policy places it on."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import Config
from sim.engine.faults import absences_of
from sim.engine.run import bind_policy
from sim.errors import ConfigError


@dataclass(frozen=True)
class Placement:
    """The processes a config needs and the cluster host of each: a worker per GPU, then the shards."""

    hosts: tuple[str, ...]  # per global rank
    workers: int

    @property
    def servers(self) -> int:
        return len(self.hosts) - self.workers

    @property
    def world(self) -> int:
        return len(self.hosts)

    def role(self, rank: int) -> str:
        """What `rank` runs, in the words failure messages use."""
        return "worker" if rank < self.workers else f"parameter-server shard {rank - self.workers}"

    def roles(self) -> dict[int, str]:
        return {rank: self.role(rank) for rank in range(self.world)}


def placement(config: Config) -> Placement:
    """Shard s runs on the host the first policy declaring a shard s places it on. A policy that needs
    one client for every worker (in-graph replication) is refused: real workers are processes."""
    from sim.api import prepare

    _refuse_timing_only(config)
    cluster, plan = prepare(config)
    shard_hosts: list[str] = []
    absences = absences_of(config, cluster)  # a departure a policy cannot follow is refused here
    for i, entry in enumerate(config.policies):
        policy = bind_policy(entry, i, cluster, plan, config.workload.wire_precision, absences)
        if not all(phase.trains_replicas for phase in policy.phase_policies()):
            raise ConfigError(
                f"policies[{i}]: {policy.name} is timed by the simulator only; the real backend has no tensor rules "
                "for it yet (syncsim run times it)"
            )
        if any(phase.one_input_pipeline for phase in policy.phase_policies()):
            raise ConfigError(
                f"policies[{i}]: 'replication: in_graph' is the simulator's model of one client feeding every "
                "worker; the real backend runs a process per worker with its own input; allowed here: between_graph"
            )
        for spec in policy.all_servers():
            if spec.shard >= len(shard_hosts):
                shard_hosts.append(spec.host)
    return Placement(tuple(cluster.view.rank_hosts) + tuple(shard_hosts), cluster.world_size)


def _refuse_timing_only(config: Config) -> None:
    """Keys that change when the simulator's workers communicate have no real counterpart yet: a real
    worker's backward hands every bucket on as it is ready and steps its optimizer every iteration."""
    workload = config.workload
    if workload.accumulation_steps != 1:
        raise ConfigError(
            f"workload.accumulation_steps: {workload.accumulation_steps} is the simulator's timing model; "
            "the real backend steps its optimizer every iteration; allowed here: 1"
        )
    if not workload.overlap_backward:
        raise ConfigError(
            "workload.overlap_backward: false is the simulator's timing model; the real backend hands "
            "each bucket on as backward produces it; allowed here: true"
        )
    if workload.activation_checkpointing:
        raise ConfigError(
            f"workload.activation_checkpointing: {str(workload.activation_checkpointing).lower()} is the simulator's "
            "timing model; the real backend keeps its activations; allowed here: false"
        )
