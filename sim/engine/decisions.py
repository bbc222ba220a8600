"""What a run decided where the config left it to the simulator, and why: the rows of decisions.csv
(README, "What you get").

One row per choice, (setting, value, why): the policy's own `auto` settings as it bound them
(`Policy.decisions`, every phase policy's), the type gradients travel in, the bucket plan, and, under
the NCCL model, per kind of collective and group shape the algorithm and protocol NCCL's tuner picked,
the sizes it picked them for, and its own estimate beside the next best option's. Built once per run
from what the planner remembered when it made each choice (`NcclPlanner.picks`), not per collective.
"""

from __future__ import annotations

from typing import Optional

from policies.base import Policy
from sim.compute.workload import ComputePlan
from sim.config import Config
from sim.engine.nccl_plans import NcclPlanner, Pick

Decision = tuple[str, str, str]  # (setting, value chosen, why)
DECISION_FIELDS = ("setting", "value", "why")


def size_text(nbytes: float) -> str:
    """Bytes in decimal units, as `workload.bucket_mb` counts them, three significant figures ("25 MB")."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.3g} B"


def run_decisions(config: Config, policy: Policy, plan: ComputePlan, planner: Optional[NcclPlanner]) -> list[Decision]:
    """Every decision of one policy's run (after it ran: the NCCL rows cover the collectives it launched)."""
    rows: list[Decision] = []
    for phase in (policy, *(p for p in policy.phase_policies() if p is not policy)):
        prefix = "" if phase is policy else f"{phase.name}."  # a phase's policy (Sync-Switch's BSP, ASP)
        rows += [(prefix + setting, value, why) for setting, value, why in phase.decisions()]
    workload = config.workload
    if workload.gradient_precision == "auto":
        why = f"auto: workload.precision {workload.precision}" + (
            "" if workload.wire_precision != "fp32" else " keeps fp32 gradients (16-bit only under fp16 or bf16)"
        )
        rows.append(("workload.gradient_precision", workload.wire_precision, why))
    rows.append(bucket_plan(plan, workload.bucket_mb))
    if planner is not None:
        rows += nccl_rows(planner)
    return rows


def bucket_plan(plan: ComputePlan, bucket_mb: float) -> Decision:
    """The gradient buckets backward closes: how many, and their sizes (largest, smallest, the last)."""
    sizes = [b.nbytes for b in plan.buckets]
    if not sizes:
        return ("buckets", "0", "no gradients")
    value = f"{len(sizes)} buckets: {size_text(max(sizes))} largest, {size_text(min(sizes))} smallest"
    why = (
        f"workload.bucket_mb {bucket_mb:g}: layers join a bucket in backward order until it holds "
        f"{bucket_mb:g} MB (DDP's bucket_cap_mb); the last closes when backward ends"
    )
    return ("buckets", value, why)


def nccl_rows(planner: NcclPlanner) -> list[Decision]:
    """NCCL's pick per kind of collective, group shape and range of sizes, in order of kind, shape, size."""
    forced = [
        f"simulation.nccl.{name} {value}"
        for name, value in (("algorithm", planner.algorithm), ("protocol", planner.protocol))
        if value != "auto"
    ]
    channels = planner.fabric.channels
    rows = []
    for (kind, ranks, hosts, algorithm, protocol), pick in sorted(planner.picks.items(), key=_order):
        sizes = size_text(pick.low) if pick.low == pick.high else f"{size_text(pick.low)} to {size_text(pick.high)}"
        setting = f"nccl.{kind} ({ranks} ranks on {hosts} host{'s' if hosts > 1 else ''}, {sizes})"
        value = f"{algorithm}/{protocol}, {channels} channels"
        rows.append((setting, value, _why(pick, forced)))
    return rows


def time_text(seconds: float) -> str:
    """Seconds as ms or us, three significant figures."""
    return f"{seconds * 1e3:.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.3g} us"


def _order(item: tuple[tuple[str, int, int, str, str], Pick]) -> tuple:
    (kind, ranks, hosts, _, _), pick = item
    return kind, ranks, hosts, pick.low


def _why(pick: Pick, forced: list[str]) -> str:
    ours = f"NCCL's estimate {time_text(pick.estimate_s)} at {size_text(pick.high)}"
    if forced:
        return f"forced by {' and '.join(forced)}; {ours}"
    if not pick.runner_up:
        return f"the only option NCCL can run; {ours}"
    return f"fastest by NCCL's tuner: {ours}, next best {pick.runner_up} {time_text(pick.runner_up_s)}"
