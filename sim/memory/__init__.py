"""Peak memory per GPU: what a run's policy, model, batch and precision hold at the start of backward
(docs/memory.md), and whether it fits the GPU."""

from sim.memory.fit import capacity_bytes, largest_micro_batch, memory_problems
from sim.memory.peak import MemoryTerms, optimizer_states, policy_memory

__all__ = [
    "MemoryTerms",
    "capacity_bytes",
    "largest_micro_batch",
    "memory_problems",
    "optimizer_states",
    "policy_memory",
]
