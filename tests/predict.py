"""Closed-form step times for the DS-Sync scenarios (docs/scenarios.md), written apart from the engine.

Communication-bound regime: each bucket's collective takes longer than the backward slice that
produces the next bucket, so a step costs forward + the first backward slice + the chain of every
bucket's collective, back to back on the group's communicator.
"""

from __future__ import annotations

from sim.compute.workload import ComputePlan

GBPS = 1e9 / 8
US = 1e-6
ALPHA_RACK = (2 * 1 + 2 * 5) * US  # GPU-host-ToR-host-GPU
ALPHA_CROSS = (2 * 1 + 4 * 5) * US  # ... through the core


def ring(p: int, nbytes: float, alpha: float, rate: float) -> float:
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / rate


def phase(p: int, nbytes: float, alpha: float, rate: float) -> float:
    return (p - 1) * alpha + (p - 1) / p * nbytes / rate


def step(plan: ComputePlan, per_bucket) -> float:  # type: ignore[no-untyped-def]
    return plan.forward_s + plan.buckets[0].backward_s + sum(per_bucket(b.nbytes) for b in plan.buckets)


def ring_step(plan: ComputePlan, p: int, cross_rate: float) -> float:
    """One ring of all p ranks whose slowest flow (a cross-rack one) gets `cross_rate`."""
    return step(plan, lambda n: ring(p, n, ALPHA_CROSS, cross_rate))


def hierarchical_step(plan: ComputePlan, g: int, m: int, nic: float, cross_rate: float) -> float:
    """Rack-level 2-D all-reduce: local phases over NICs, g cross-rack rings each getting `cross_rate`."""
    return step(plan, lambda n: 2 * phase(g, n, ALPHA_RACK, nic) + ring(m, n / g, ALPHA_CROSS, cross_rate))


def ds_sync_cycle(plan: ComputePlan, g: int, nic: float, cross_rate: float) -> tuple[float, float]:
    """(local step, mixing step) of DS-Sync's auto schedule on racks of g ranks: a local step
    averages each rack over its NICs; a mixing step pairs one ambassador per rack across the core
    (one flow per uplink direction) while the other g-1 ranks of each rack average locally."""
    local = step(plan, lambda n: ring(g, n, ALPHA_RACK, nic))
    pair = sum(ring(2, b.nbytes, ALPHA_CROSS, cross_rate) for b in plan.buckets)
    rest = sum(ring(g - 1, b.nbytes, ALPHA_RACK, nic) for b in plan.buckets)
    mixing = plan.forward_s + plan.buckets[0].backward_s + max(pair, rest)
    return local, mixing
