"""The Python entry point: `simulate(config) -> Result`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Optional, Union

from sim.cluster.topology import Cluster, build_cluster
from sim.compute.workload import ComputePlan, compute_plan
from sim.config import Config, load_config, parse_config
from sim.engine.faults import absences_of, fault_problems
from sim.engine.run import PolicyRun, bind_policy, run_policy
from sim.errors import ConfigError, RunInterrupted, signal_name
from sim.estimate.cost import check_limits
from sim.memory import memory_problems
from sim.results import Result
from sim.results.memory_table import memory_frame
from sim.results.tables import (
    accuracy_frame,
    decisions_frame,
    faults_frame,
    iterations_frame,
    links_frame,
    ops_frame,
    phases_frame,
    staleness_frame,
    summary_frame,
    utilization_frame,
    with_unfinished,
)

ConfigLike = Union[Config, Mapping[str, Any], str, "os.PathLike[str]"]


def as_config(config: ConfigLike) -> Config:
    if isinstance(config, Config):
        return config
    if isinstance(config, (str, os.PathLike)):
        return load_config(Path(config))
    return parse_config(dict(config))


def prepare(config: Config) -> tuple[Cluster, ComputePlan]:
    """Build the cluster and compute plan and bind every policy once: everything `check` validates."""
    cluster, plan, _ = _prepare(config)
    return cluster, plan


def _prepare(config: Config) -> tuple[Cluster, ComputePlan, Any]:
    cluster = build_cluster(config.cluster, config.seed)
    plan = compute_plan(config.workload, cluster.gpu)
    lines = fault_problems(config, cluster) + stall_problems(config, plan)
    absences = absences_of(config, cluster)
    bound = []
    for i in range(len(config.policies)):
        try:
            policy = bind_policy(config.policies[i], i, cluster, plan, config.workload.wire_precision, absences)
        except ConfigError as exc:
            lines += str(exc).splitlines()
            continue
        bound.append(policy)
        if config.numerics_on and not all(p.trains_replicas for p in policy.phase_policies()):
            lines.append(
                f"policies[{i}]: {policy.name} is timed by the simulator, but numerics mode has no tensor rules for "
                "it yet; set numerics.enabled: false (or leave numerics out) to time it"
            )
    if len(bound) == len(config.policies):  # memory of the policies that bound (their indices are then the config's)
        lines += memory_problems(config, cluster.gpu, plan, bound)
    if lines:  # every problem at once
        raise ConfigError("\n".join(lines))
    task = None
    if config.numerics_on:
        _require_numerics_packages()
        from sim.numerics.session import check  # torch only when numerics is on

        task = check(config, cluster.world_size)
    return cluster, plan, task


def stall_problems(config: Config, plan: ComputePlan) -> list[str]:
    """The deadlock detector must not mistake one long compute step for a deadlock."""
    slowest = max([1.0, *(s.compute_factor for s in config.faults.slow_workers)])
    longest = plan.compute_s * slowest * max([1.0, *(s.compute_factor or 1.0 for s in config.faults.stragglers)])
    timeout = config.simulation.stall_timeout_s
    if longest >= timeout:
        return [
            f"simulation.stall_timeout_s: {timeout:g} s is shorter than one iteration's compute on the slowest "
            f"worker ({longest:g} s); raise it above that, or the run would count as deadlocked"
        ]
    return []


def simulate(
    config: ConfigLike,
    *,
    progress: bool = False,
    on_policy_done: Optional[Callable[[Result], None]] = None,
) -> Result:
    """Run every policy of `config` on the same cluster, workload and seed.

    `on_policy_done` receives the partial result after each policy (to save what is done so far).
    A policy that fails keeps the rows it produced; its summary row says why it stopped. Ctrl-C (or
    SIGTERM, where the command line turns it into `Terminated`) raises `RunInterrupted` carrying the
    finished policies' result, with an `interrupted` summary row for each of the others. A config whose
    cost estimate (`sim.estimate.cost`) exceeds `simulation.max_estimated_wall_s` or `max_estimated_memory_mb`
    is refused with a ConfigError before anything is built.
    """
    cfg = as_config(config)
    check_limits(cfg)
    cluster, plan, task = _prepare(cfg)
    runs: list[PolicyRun] = []
    result = result_of(cfg, cluster, plan, runs)
    with _numerics_threads(cfg):
        for i, entry in enumerate(cfg.policies):
            bar = _progress_bar(entry.display, cfg.iterations * cluster.world_size) if progress else None
            try:
                try:
                    run = run_policy(cfg, i, cluster, plan, on_progress=bar.update if bar else None, task=task)
                finally:
                    if bar is not None:
                        bar.close()
                runs.append(run)
                result = result_of(cfg, cluster, plan, runs)
                if on_policy_done is not None:
                    on_policy_done(result)
            except KeyboardInterrupt as stop:  # while policy i ran, or while its results were handed over
                so_far = result_of(cfg, cluster, plan, runs)
                raise _interrupted(so_far, cfg, running=len(runs) == i, stop=stop) from None
    return result


def _interrupted(result: Result, cfg: Config, running: bool, stop: KeyboardInterrupt) -> RunInterrupted:
    """`result` with a summary row for every policy the stop left unfinished (`running`: the first of
    them was running when it came)."""
    how = signal_name(stop)
    unfinished = [(entry.display, entry.name) for entry in cfg.policies[len(result.runs) :]]
    first = 1 if running else 0
    result.summary = with_unfinished(result.summary, unfinished[:first], f"interrupted: stopped by {how} while it ran")
    result.summary = with_unfinished(result.summary, unfinished[first:], f"interrupted: not started, stopped by {how}")
    return RunInterrupted(result, how)


def _require_numerics_packages() -> None:
    for module in ("torch", "sklearn"):
        try:
            __import__(module)
        except ImportError:
            raise ConfigError(
                f"numerics: needs torch and scikit-learn ({module} is missing); install them with: "
                "pip install --no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu && "
                "pip install -c constraints.txt -e '.[numerics]' (PyTorch's CPU build; README.md, "
                "'Which PyTorch you get', has the CUDA build for GPUs)"
            ) from None


def _numerics_threads(cfg: Config) -> Any:
    if not cfg.numerics_on:
        return nullcontext()
    from sim.numerics.session import torch_threads

    assert cfg.numerics is not None
    return torch_threads(cfg.numerics.threads)


def result_of(
    cfg: Config, cluster: Cluster, plan: ComputePlan, runs: list[PolicyRun], measured: bool = False
) -> Result:
    """The tables of the runs so far (the real backend builds its results with it too, `measured`:
    its summary leaves out the real warm-up, `Config.summary_warmup`)."""
    iterations = iterations_frame(runs, cluster, plan.batch_size)
    target = cfg.numerics.target_accuracy if cfg.numerics else None
    return Result(
        cfg,
        summary_frame(runs, iterations, cluster, plan, target, cfg.numerics_on, cfg.summary_warmup(real=measured)),
        iterations,
        ops_frame(runs),
        links_frame(runs, cluster),
        utilization_frame(runs, cluster),
        staleness_frame(runs),
        faults_frame(runs),
        phases_frame(runs),
        list(runs),
        accuracy_frame(runs) if cfg.numerics_on else None,
        memory=memory_frame(runs, cluster.gpu, plan.batch_size),
        decisions=decisions_frame(runs),
    )


def _progress_bar(label: str, total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=label, unit=" updates", leave=False, dynamic_ncols=True)
