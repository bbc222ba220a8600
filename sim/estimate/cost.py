"""What a run will cost, worked out from the validated config alone, before anything is built.

`estimate(config)` counts what each policy will ask of the simulator: collectives, flows (network
transfers), SimPy events, max-min recomputes and the result rows it keeps. It turns those counts into
wall seconds and peak memory with constants measured on the 2-core development machine
(benchmarks/check_scale.py prints estimate against measurement). It never builds the cluster, so
it answers in milliseconds for a million-GPU cluster or a billion iterations.

A run the engine simulates on one host (host symmetry, `sim.estimate.symmetric`) is counted as it runs: one
host's workers, every collective across hosts with all its sub-flows and routes, the whole cluster, every
rank's rows.

It is rough: expect the truth within a factor of ~3. Counts follow each policy's program closely;
recomputes depend on timing (jitter spreads launches apart, lockstep workers coalesce them) and are
the least certain part. `check_limits` refuses a run estimated over `simulation.max_estimated_wall_s`
or `simulation.max_estimated_memory_mb`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

from policies.base import Policy
from policies.registry import create
from sim.catalog.gpus import get_gpu
from sim.catalog.zoo import MODEL_NAMES, get_model
from sim.catalog.zoo.recsys import CRITEO_HASHED_FEATURES, DEEPFM_EMBEDDING_DIM
from sim.compute.workload import compute_plan
from sim.config import Config
from sim.errors import ConfigError
from sim.estimate.counts import (
    Extra,
    Load,
    Shape,
    builtin,
    counted_as,
    fault_load,
    index_set_mb,
    policy_load,
    shape_of,
    shard_count,
    sparse_buckets,
)
from sim.estimate.symmetric import S_PER_SUBFLOW as ONE_HOST_S_PER_SUBFLOW
from sim.estimate.symmetric import one_host_ranks

# Wall seconds (2-core machine, Python 3.11, the engine of commit 6c9dc2b), fitted on measured runs.
S_PER_EVENT = 7.4e-6  # per event as if no worker shared one (`Load.work`)
S_PER_SUBFLOW = 2.5e-6  # building a transfer: its paths' links
S_PER_RECOMPUTE = 5e-6
S_PER_ENTRY = 10e-9  # one live link-class incidence entry swept by one max-min recompute
S_PER_SPARSE_ROW = 70e-9  # drawing and counting one non-zero row of a sparse gradient
S_PER_LINK_BUILT = 10e-6  # build_cluster
# an iteration or op row: its tables, CSV written once since ab5df40 (131,072-GPU hierarchical: 2.3M rows, to_csv 17 s)
S_PER_ROW = 12e-6
S_PER_STALENESS_ROW = 2e-6  # staleness rows become a histogram
S_PER_TRACE_EVENT = 11e-6  # trace.json
S_PER_POLICY = 0.1  # a policy's setup: processes, shards, routes of its first transfers
S_PER_NUMERICS_STEP = 1e-3  # numerics mode: one small model's training step on one worker
# numerics mode with a zoo model: a worker's step passes over every parameter (gradient, averaging,
# optimizer), measured on DeepFM with 1.6M to 11M parameters (2-core machine, CPU time)
S_PER_NUMERICS_PARAM = 1e-8
CPU_FLOPS = 1e10  # numerics mode with a zoo model: torch on the CPU
S_FIXED = 2.0  # imports, plots
# Memory (MB unless named): the process after imports, and what grows with the run.
MB_BASE = 200.0  # imports, matplotlib for the plots
MB_NUMBA = 66.0  # the compiled max-min kernel, loaded after 2,000 recomputes
NUMBA_AFTER = 2_000
B_PER_LINK = 900.0  # built cluster: graph, link table, view
B_PER_ITERATION_ROW = 430.0
B_PER_OP_ROW = 690.0
B_PER_STALENESS_ROW = 92.0
B_PER_RANK_BUCKET = 1_160.0  # in-flight calls, arrivals and events of one rank's bucket
B_PER_ENTRY = 1_800.0  # a class's links, paths and routes in the network's tables
B_PER_TRACE_EVENT = 700.0  # trace.json's events as dicts, then as text
MB_SPARSE = 150.0  # sparse census chunks (4M rows at a time); more for a large segment (`index_set_mb`)
MB_TORCH = 300.0  # numerics mode: torch and scikit-learn
# Fault processes, background cycles and server shards (each shard: a process, its state and its slice
# of every bucket's push and pull ops, built when the policy starts).
B_PER_FAULT_ROW = 600.0
S_PER_SHARD = 30e-6
B_PER_SHARD = 4_000.0
B_PER_SHARD_BUCKET = 1_000.0
# Numerics mode with a zoo model: fp32 values; each worker's replica holds parameters, a gradient and
# its optimizer's slots (momentum: 1, adam: 2); the servers or the consensus one more set.
BYTES_PER_VALUE = 4
MEMORY_SHARE = 0.8  # default memory limit: this share of the machine's physical memory


@dataclass(frozen=True)
class PolicyCost:
    """One policy's row of the estimate."""

    label: str
    collectives: float
    flows: float
    events: float
    wall_s: float
    memory_mb: float  # the rows it keeps
    note: str = ""


@dataclass(frozen=True)
class Estimate:
    """A run's estimated cost: per policy, and for the whole `syncsim run` (fixed costs included)."""

    workers: int
    hosts: int
    links: int
    buckets: int
    iterations: int
    policies: tuple[PolicyCost, ...]
    wall_s: float
    memory_mb: float
    result_rows: float
    wall_terms: tuple[tuple[str, float], ...] = field(default=())  # what the wall time is made of (seconds)
    memory_terms: tuple[tuple[str, float], ...] = field(default=())  # what the peak memory is made of (MB)

    def dominant(self, kind: str) -> tuple[str, float]:
        """The largest term of `kind` ('wall' or 'memory'): what a limit's message names."""
        terms = self.wall_terms if kind == "wall" else self.memory_terms
        return max(terms, key=lambda term: term[1], default=("", 0.0))

    @property
    def collectives(self) -> float:
        return sum(p.collectives for p in self.policies)

    @property
    def flows(self) -> float:
        return sum(p.flows for p in self.policies)

    @property
    def events(self) -> float:
        return sum(p.events for p in self.policies)

    def lines(self) -> list[str]:
        out = [
            f"estimate (rough, within a factor of ~3): {self.workers:,} workers (GPUs) on {self.hosts:,} hosts, "
            f"{self.links:,} links; {self.buckets} buckets x {self.iterations:,} iterations",
            f"  {'policy':<20} {'collectives':>11} {'flows':>9} {'events':>9} {'wall':>10} {'memory':>9}",
        ]
        for p in self.policies:
            out.append(
                f"  {p.label[:20]:<20} {count(p.collectives):>11} {count(p.flows):>9} {count(p.events):>9} "
                f"{duration(p.wall_s):>10} {megabytes(p.memory_mb):>9}"
            )
        out.append(
            f"  {'total':<20} {count(self.collectives):>11} {count(self.flows):>9} {count(self.events):>9} "
            f"{duration(self.wall_s):>10} {megabytes(self.memory_mb):>9} peak"
        )
        out += [f"  note: {p.label}: {p.note}" for p in self.policies if p.note]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _plugin_note(policy: Policy) -> str:
    """How the estimate counted a plug-in policy ('' for a built-in)."""
    if builtin(policy):
        return ""
    name = counted_as(policy)
    if name != "ring":
        return f"a plug-in: counted as {name}"
    return "a plug-in: counted as one all-reduce of all ranks per bucket"


def _one_host_note(one_host: Optional[int], shape: Shape) -> str:
    """Says that a host-symmetric run simulates one host ('' where every rank runs)."""
    if one_host is None:
        return ""
    return f"host symmetry: 1 of {shape.hosts:,} hosts ({one_host} ranks) simulated, its rows copied to the others"


def estimate(config: Config) -> Estimate:
    """The cost of running every policy of `config` (`syncsim run`: simulate, tables, files)."""
    shape = shape_of(config)
    plan = compute_plan(config.workload, get_gpu(config.cluster.gpu))
    sparse = sparse_buckets(plan)
    rows: list[PolicyCost] = []
    loads: list[Load] = []
    # faults and background flows act over the run's simulated time: at least its compute
    faults = fault_load(config, shape, config.iterations * plan.compute_s)
    wall_terms = dict.fromkeys(("SimPy events and flows", "routes", "result rows (tables, CSV)",
                                "fault and background events", "server shards"), 0.0)  # fmt: skip
    shard_mb = fault_mb = 0.0
    ranks: list[int] = []  # ranks whose workers run, per policy
    for entry in config.policies:
        policy = create(entry.name, entry.settings)
        one_host = one_host_ranks(config, policy, counted_as(policy), shape)
        load = policy_load(policy, shape, plan, sparse, config, float(config.iterations), one_host)
        loads.append(load)
        ranks.append(shape.workers if one_host is None else one_host)
        extra = Extra(faults.events, faults.recomputes, faults.fault_rows, shard_count(policy, shape))
        note = "; ".join(filter(None, (_plugin_note(policy), _one_host_note(one_host, shape))))
        program = _wall(load, config, shape, one_host is not None)
        fault_s, shard_s = _fault_wall(extra, load), extra.shards * S_PER_SHARD
        for term, seconds in program.items():
            wall_terms[term] += seconds
        wall_terms["fault and background events"] += fault_s
        wall_terms["server shards"] += shard_s
        shard_mb = max(shard_mb, extra.shards * (B_PER_SHARD + len(plan.buckets) * B_PER_SHARD_BUCKET) / 1e6)
        fault_mb += extra.fault_rows * B_PER_FAULT_ROW / 1e6
        wall = sum(program.values()) + fault_s + shard_s
        rows.append(PolicyCost(entry.display, load.collectives, load.flows, load.events + extra.events, wall,
                               _rows_mb(load) + extra.fault_rows * B_PER_FAULT_ROW / 1e6, note))  # fmt: skip
    total = sum(loads, Load())
    inflight = max(
        (r * len(plan.buckets) * B_PER_RANK_BUCKET + load.entries * B_PER_ENTRY for r, load in zip(ranks, loads)),
        default=0.0,
    )
    memory_terms = {
        "the process (imports)": MB_BASE,
        "the cluster's links": shape.links * B_PER_LINK / 1e6,
        "in-flight calls and flows": inflight / 1e6,
        "result rows": sum(_rows_mb(load) for load in loads),
        "fault rows": fault_mb,
        "server shards": shard_mb,
        "numerics model, optimizer state and batches": _numerics_mb(config, shape),
        "compiled kernel and sparse index sets": MB_NUMBA * any(load.recomputes > NUMBA_AFTER for load in loads)
        + max(MB_SPARSE, index_set_mb(plan)) * any(load.sparse_rows > 0 for load in loads),
    }
    wall_terms["building the cluster"] = shape.links * S_PER_LINK_BUILT
    wall_terms["imports and plots"] = S_FIXED
    if config.simulation.trace:
        events = min(config.simulation.trace_max_events, 3 * total.iteration_rows + total.op_rows)
        wall_terms["trace.json"] = events * S_PER_TRACE_EVENT
        memory_terms["trace.json"] = events * B_PER_TRACE_EVENT / 1e6
    result_rows = total.iteration_rows + total.op_rows + total.staleness_rows + faults.fault_rows * len(loads)
    return Estimate(shape.workers, shape.hosts, shape.links, len(plan.buckets), config.iterations, tuple(rows),
                    sum(wall_terms.values()), sum(memory_terms.values()), result_rows,
                    tuple(wall_terms.items()), tuple(memory_terms.items()))  # fmt: skip


def memory_limit_mb(config: Config) -> Optional[float]:
    """`simulation.max_estimated_memory_mb`, or 80% of this machine's memory (None: unknown)."""
    if config.simulation.max_estimated_memory_mb is not None:
        return config.simulation.max_estimated_memory_mb
    try:
        return MEMORY_SHARE * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e6
    except (AttributeError, ValueError, OSError):  # not POSIX
        return None


def limit_problems(est: Estimate, config: Config) -> list[str]:
    """One line per limit the estimate exceeds, naming the setting that raises it."""
    lines = []
    wall = config.simulation.max_estimated_wall_s
    if est.wall_s > wall:
        lines.append(
            f"simulation.max_estimated_wall_s: this run is estimated at ~{duration(est.wall_s)} of wall time "
            f"({sci(est.events)} SimPy events; mostly {_term(est, 'wall')}), over the limit of "
            f"{sci(wall) if wall >= 1e5 else f'{wall:g}'} s; "
            "raise simulation.max_estimated_wall_s to run it anyway"
        )
    memory = memory_limit_mb(config)
    if memory is not None and est.memory_mb > memory:
        whose = "" if config.simulation.max_estimated_memory_mb is not None else " (80% of this machine's memory)"
        lines.append(
            f"simulation.max_estimated_memory_mb: this run is estimated to need ~{megabytes(est.memory_mb)} of "
            f"memory at its peak ({sci(est.result_rows)} result rows; mostly {_term(est, 'memory')}), over the "
            f"limit of {memory:,.0f} MB{whose}; "
            "raise simulation.max_estimated_memory_mb to run it anyway"
        )
    return lines


def check_limits(config: Config) -> Estimate:
    """The estimate of `config`; ConfigError when it exceeds a `simulation.max_estimated_*` limit."""
    est = estimate(config)
    if lines := limit_problems(est, config):
        raise ConfigError("\n".join(lines))
    return est


def _term(est: Estimate, kind: str) -> str:
    name, value = est.dominant(kind)
    return f"{name}: ~{duration(value) if kind == 'wall' else megabytes(value)}"


def _fault_wall(extra: Extra, load: Load) -> float:
    """Fault and background events, and the re-solves their network changes cause (each sweeping the
    classes live at the time, as the policy's own recomputes do)."""
    per_solve = load.solved / load.recomputes if load.recomputes else load.entries
    return extra.events * S_PER_EVENT + extra.recomputes * (S_PER_RECOMPUTE + S_PER_ENTRY * per_solve)


def _wall(load: Load, config: Config, shape: Shape, one_host: bool) -> dict[str, float]:
    """A policy's wall seconds by what they go to: its program on the simulator, the routes it works out,
    its result rows (tables, and the CSV `run` writes twice). `one_host`: a host-symmetric run, whose
    transfers of every member build their sub-flows at `sim.estimate.symmetric`'s price."""
    program = (
        S_PER_POLICY
        + S_PER_EVENT * load.work
        + (ONE_HOST_S_PER_SUBFLOW if one_host else S_PER_SUBFLOW) * load.subflows
        + S_PER_RECOMPUTE * load.recomputes
        + S_PER_ENTRY * load.solved
        + S_PER_SPARSE_ROW * load.sparse_rows
        + S_PER_STALENESS_ROW * load.staleness_rows
    )
    if config.numerics_on:
        program += load.iteration_rows * _numerics_step_s(config, shape)
    return {
        "SimPy events and flows": program,
        "routes": load.route_s,
        "result rows (tables, CSV)": S_PER_ROW * (load.iteration_rows + load.op_rows),
    }


def _rows_mb(load: Load) -> float:
    return (
        load.iteration_rows * B_PER_ITERATION_ROW
        + load.op_rows * B_PER_OP_ROW
        + load.staleness_rows * B_PER_STALENESS_ROW
    ) / 1e6


def _numerics_step_s(config: Config, shape: Shape) -> float:
    """One worker's training step in numerics mode: a small model's, or a zoo model's FLOPs on the CPU."""
    n = config.numerics
    assert n is not None
    if n.model not in MODEL_NAMES:
        return S_PER_NUMERICS_STEP
    spec = get_model(n.model)
    batch = n.global_batch / max(shape.workers, 1)
    scale = 1.0
    if n.zoo.image_size is not None:
        native = 32 if "32x32" in spec.sample else 224
        scale = (n.zoo.image_size / native) ** 2
    elif tokens := re.search(r"(\d+)-token", spec.sample):
        scale = n.zoo.sequence / int(tokens.group(1))
    flops_s = 3 * spec.forward_flops * batch * scale / CPU_FLOPS
    return S_PER_NUMERICS_STEP + flops_s + S_PER_NUMERICS_PARAM * _numerics_params(config)


def _numerics_params(config: Config) -> float:
    """The zoo model's parameters as numerics mode builds it (DeepFM's hashed table with `zoo.features` rows)."""
    n = config.numerics
    assert n is not None
    params = float(get_model(n.model).params)
    if n.model == "deepfm" and n.zoo.features is not None:  # the hashed table: a weight and an embedding per row
        params += (n.zoo.features - CRITEO_HASHED_FEATURES) * (1 + DEEPFM_EMBEDDING_DIM)
    return params


def _numerics_mb(config: Config, shape: Shape) -> float:
    """Numerics mode: torch, and with a zoo model every worker's parameters, gradient and optimizer slots,
    the servers' (or consensus) copy, and the synthetic samples."""
    n = config.numerics
    if not config.numerics_on or n is None:
        return 0.0
    if n.model not in MODEL_NAMES:
        return MB_TORCH
    params = _numerics_params(config)
    slots = 2 if n.optimizer.name in ("adam", "adamw") else 1 if n.optimizer.momentum > 0 else 0
    copies = shape.workers * (2 + slots) + 1 + slots
    return MB_TORCH + (params * copies * BYTES_PER_VALUE + n.zoo.samples * _sample_bytes(config)) / 1e6


def _sample_bytes(config: Config) -> float:
    """One synthetic sample of a zoo model: an fp32 image, int64 token ids, or DeepFM's field ids."""
    n = config.numerics
    assert n is not None
    spec = get_model(n.model)
    if "token" in spec.sample:
        return 8.0 * n.zoo.sequence
    if "Criteo" in spec.sample:
        return 8.0 * 39
    side = n.zoo.image_size or (32 if "32x32" in spec.sample else 224)
    return 4.0 * 3 * side * side


# ------------------------------------------------------------------------------------- printing
def count(value: float) -> str:
    """1234 -> 1.2k, 3.3e6 -> 3.3M."""
    for size, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.0f}"


def sci(value: float) -> str:
    """2.1e10, as a person writes it."""
    if value < 1e5:
        return f"{value:,.0f}"
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def duration(seconds: float) -> str:
    for size, unit in ((365 * 86400, "years"), (2 * 86400, "days"), (3600, "h"), (60, "min")):
        if seconds >= 1.5 * size:
            return f"{seconds / size:.3g} {unit}" if seconds < 1e3 * size else f"{sci(seconds / size)} {unit}"
    return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"


def megabytes(mb: float) -> str:
    for size, unit in ((1e6, "TB"), (1e3, "GB")):
        if mb >= size:
            return f"{mb / size:.3g} {unit}" if mb < 1e3 * size else f"{sci(mb / size)} {unit}"
    return f"{mb:.0f} MB"
