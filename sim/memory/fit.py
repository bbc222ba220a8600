"""Whether a run fits its GPUs' memory, and the largest micro-batch that would."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Optional

from policies.base import Policy
from sim.catalog.gpus import GpuSpec
from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.memory.peak import GIB, MemoryTerms, policy_memory


def capacity_bytes(gpu: GpuSpec) -> float:
    """What a GPU's allocator can hand out: its memory in GiB (an "80 GB" H100 holds 80 GiB of HBM; the
    driver's few hundred MiB are not taken off)."""
    return gpu.memory_gb * GIB


def largest_micro_batch(terms: MemoryTerms, batch_size: int, capacity: float) -> Optional[int]:
    """The most samples per micro-batch whose peak fits `capacity`, activations growing in proportion to the
    micro-batch and nothing else (0: not even one); None where the activations are not known or none are
    saved (the micro-batch then changes nothing)."""
    if terms.activations <= 0 or batch_size <= 0:
        return None
    fixed = terms.total - terms.activations
    return max(0, math.floor((capacity - fixed) / (terms.activations / batch_size)))


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
        largest = largest_micro_batch(terms, config.workload.batch_size, capacity)
        if largest:
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
