"""Asynchronous policies with their workers out of step: a seeded ensemble of simulations.

Asynchronous workers (ASP, SSP: policies with a shared budget) never wait for each other, so how
their transfers overlap depends on the phases they run at. A simulation without noise starts every
worker at t = 0 and, with symmetric placement, keeps them in exact lockstep; with noise, the phases
settle into one of several steady states, one per seed. On the emulated clusters of
docs/validation.md, lockstep was the best case on one cluster and the worst on the other, and real
workers drift: their iteration times varied with a coefficient of variation of 0.20-0.25.

So the prediction for an asynchronous policy is the median over `seeds` simulations, each with
compute jitter of at least `jitter` to take the workers out of step. The jitter is only a source
of noise: it keeps the mean compute time, and the median throughput varies little once the jitter
is large enough to take the workers out of step (`benchmarks/asp_phases.py` prints the figures).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from policies.registry import create
from sim.api import simulate
from sim.config import Config, parse_config
from sim.results.tables import steady_figures

SEEDS = 5
JITTER = 1.0  # coefficient of variation of compute that takes the workers out of step


def asynchronous_policies(config: Config) -> list[str]:
    """Labels of the config's policies whose workers never wait for each other (a shared budget)."""
    return [e.display for e in config.policies if create(e.name, e.settings).shared_budget]


def decorrelated(
    config: Config,
    policies: Sequence[str],
    seeds: int = SEEDS,
    jitter: float = JITTER,
    warmup: int = 0,
) -> pd.DataFrame:
    """One row per (policy, seed): the steady mean iteration time and throughput (iterations >=
    `warmup`) of `config` simulated with seed `config.seed + k` and compute jitter max(the config's,
    `jitter`). Timing only: the numerics section is dropped."""
    if seeds < 1:
        raise ValueError(f"seeds: {seeds}; allowed: 1 or more")
    if jitter < 0:
        raise ValueError(f"jitter: {jitter}; allowed: 0 or more")
    data = config.model_dump(mode="json")
    entries = [p for p in data["policies"] if (p.get("label") or p["name"]) in policies]
    unknown = sorted(set(policies) - {e.display for e in config.policies})
    if unknown:
        raise ValueError(f"policies: {unknown} are not in the config; allowed: {[e.display for e in config.policies]}")
    data.update(policies=entries, numerics=None)
    data["workload"]["compute_jitter"] = max(config.workload.compute_jitter, jitter)
    data["simulation"]["trace"] = False
    rows = []
    for k in range(seeds):
        data["seed"] = config.seed + k
        figures = steady_figures(simulate(parse_config(data)).iterations, warmup)
        rows += [{"policy": p, "seed": config.seed + k, **figures[p]} for p in policies if p in figures]
    return pd.DataFrame(rows, columns=["policy", "seed", "mean_iteration_s", "throughput_samples_s"])
