"""Whether a run fits its GPUs' memory, and the largest micro-batch that would."""

from __future__ import annotations

import math
from collections.abc import Sequence

from policies.base import Policy
from sim.catalog.gpus import GpuSpec
from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.memory.peak import GIB, MemoryTerms, policy_memory


def capacity_bytes(gpu: GpuSpec) -> float:
    """What a GPU's allocator can hand out: its memory in GiB (an "80 GB" H100 holds 80 GiB of HBM; the
    driver's few hundred MiB are not taken off)."""
    return gpu.memory_gb * GIB


def largest_micro_batch(policy: Policy, plan: ComputePlan, config: Config, capacity: float) -> int:
    """The largest samples per micro-batch whose peak fits `capacity` (0: not even one; activations grow
    in proportion to the micro-batch, everything else does not)."""
    fixed = policy_memory(policy, plan, config, batch_size=0).total
    per_sample = policy_memory(policy, plan, config, batch_size=1).total - fixed
    if fixed > capacity:
        return 0
    if per_sample <= 0:
        return config.workload.batch_size
    return int(math.floor((capacity - fixed) / per_sample))


def memory_problems(config: Config, gpu: GpuSpec, plan: ComputePlan, policies: Sequence[Policy]) -> list[str]:
    """A line per policy whose peak exceeds `gpu`'s memory, naming the GPU, the terms and the largest
    micro-batch that fits (empty under `simulation.check_memory: false`)."""
    if not config.simulation.check_memory:
        return []
    capacity = capacity_bytes(gpu)
    lines = []
    for index, policy in enumerate(policies):
        terms: MemoryTerms = policy_memory(policy, plan, config)
        # an estimate of the activations (a zoo model no builder counted) informs memory.csv but refuses nothing:
        # only the model's state, which is certain, can make such a run not fit
        estimated = terms.activations_source == "estimated"
        if (terms.total - terms.activations if estimated else terms.total) <= capacity:
            continue
        largest = largest_micro_batch(policy, plan, config, capacity)
        if largest >= 1:
            advice = f"the largest micro-batch that fits is workload.batch_size: {largest}"
        else:
            sharded = policy.optimizer_share < 1
            remedy = "shard it over more GPUs" if sharded else "shard it (policy fsdp) over more GPUs"
            advice = f"no micro-batch fits: the model's state alone exceeds it; {remedy}"
        lines.append(
            f"policies[{index}]: {policy.name} needs {terms.total / GIB:.1f} GiB per GPU at its peak, more than "
            f"cluster.gpu {gpu.name}'s {capacity / GIB:.0f} GiB ({terms.describe()}); {advice} "
            "(docs/memory.md; simulation.check_memory: false runs it anyway)"
        )
    return lines
