"""The simulator's prediction of a real worker's peak memory (`sim.memory`), for the model the worker trains.

A real run trains `numerics.model` (real/session.py), not the workload's model the simulator times, so the
prediction beside the measured peak in `ranks.csv` is made for that model: the workload's compute plan with
the trained model's parameter count, its gradient buckets scaled in proportion (the real backend maps the
trained model's elements onto the workload's buckets the same way, `sim.numerics.replica.bucket_ranges`),
the numerics batch, and no activation figure (the numerics models give none, so activations count 0). The
policy is bound again to that plan, so its shares and gathered units are the trained model's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.engine.faults import absences_of
from sim.engine.run import bind_policy
from sim.errors import ConfigError
from sim.memory import policy_memory
from sim.numerics.batches import per_worker_batch

FP32_BYTES = 4  # a real worker keeps its flat parameters and gradient in fp32 (real/session.py)


def trained_plan(config: Config, plan: ComputePlan, cluster: Any, elements: int) -> ComputePlan:
    """`plan` resized to a model of `elements` fp32 parameters, at the numerics batch, without activations."""
    assert config.numerics is not None
    scale = elements * FP32_BYTES / plan.gradient_bytes
    return replace(
        plan,
        params=elements,
        gradient_bytes=elements * FP32_BYTES,
        parameter_bytes=elements * FP32_BYTES,
        buckets=tuple(replace(b, nbytes=b.nbytes * scale) for b in plan.buckets),
        batch_size=per_worker_batch(config.numerics.global_batch, cluster.world_size),
        activation_bytes_per_sample=None,
    )  # the buckets' tensor shapes stay the workload's: a policy that factors them (PowerSGD) binds to them


def predicted_peak_bytes(config: Config, index: int, cluster: Any, plan: ComputePlan, elements: int) -> float:
    """`sim.memory`'s peak per worker of policy `index` for the trained model (every worker's is the same); NaN
    where the policy does not bind to the resized plan (a run that trained is not failed for a prediction)."""
    trained = trained_plan(config, plan, cluster, elements)
    absences = absences_of(config, cluster)
    try:
        policy = bind_policy(config.policies[index], index, cluster, trained, config.workload.wire_precision, absences)
    except ConfigError:
        return float("nan")
    return policy_memory(policy, trained, config).total
