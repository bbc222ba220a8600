"""Sync-Switch's offline policy for recurring jobs: the smallest BSP fraction whose final accuracy
stays within a tolerance of full BSP's, found as the paper finds it, by halving the fraction
(50 -> 25 -> 12.5 -> 6.25 %) until a fraction falls short (numerics mode: accuracy is trained, not
assumed). Each fraction runs `seeds` seeds (3 by default: one seed's accuracy is not monotone in
the fraction) and the decision uses their mean. Every point tried is reported: `search_points.csv`
(a row per fraction and seed), `search.csv` (a row per fraction: the mean over seeds and the
spread, min and max, standard deviation and 95% interval), `search_separation.csv` (whether the
pick's mean accuracy can be told from its neighbours' given the seeds' spread:
`sim.experiments.seed_spread`) and `search.png` (final accuracy with its min-max bars, and time,
against the fraction).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from sim.api import ConfigLike, as_config, simulate
from sim.config import Config, parse_config
from sim.errors import ConfigError
from sim.experiments.seed_spread import LEVEL, Separation, interval, separation
from sim.files import atomic_write

COLUMNS = ("fraction", "seed", "final_accuracy", "best_accuracy", "sim_time_s", "throughput_samples_s", "switches")
SPREAD = ("final_accuracy", "sim_time_s")  # columns whose min and max over seeds search.csv also gives
DEFAULT_SEEDS = 3
SEPARATION = ("fraction", "neighbour", "fraction_mean", "fraction_ci95", "neighbour_mean", "neighbour_ci95", "seeds",
              "overlap", "seeds_needed", "verdict")  # fmt: skip


class SearchError(RuntimeError):
    """A run of the search failed (its summary's status says why)."""


@dataclass
class SearchResult:
    points: pd.DataFrame  # one row per fraction and seed tried (fraction 1.0: the full-BSP reference)
    table: pd.DataFrame  # one row per fraction: means over seeds, and whether it passed
    best: float  # the smallest passing fraction (1.0 when even the first halving falls short)
    reference: float  # full BSP's mean final accuracy
    tolerance: float
    config_name: Optional[str] = None  # the figure's caption
    # the pick against its neighbours (`pick_separation`)
    separation: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(SEPARATION)))

    def verdicts(self) -> list[str]:
        """Whether the pick can be told from its neighbours, a sentence each (`separation_sentence`)."""
        return list(self.separation["verdict"])

    def write(self, out_dir: str | os.PathLike[str]) -> Path:
        from sim.results.plots import search_plot

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "search.csv", self.table.to_csv(index=False))
        atomic_write(out / "search_points.csv", self.points.to_csv(index=False))
        atomic_write(out / "search_separation.csv", self.separation.to_csv(index=False))
        search_plot(self.table, self.reference, self.tolerance, out / "search.png", self.config_name, self.verdicts())
        return out


def offline_search(
    config: ConfigLike,
    policy: Optional[str] = None,
    *,
    tolerance: float = 0.01,
    start: float = 0.5,
    smallest: float = 0.0625,
    seeds: int = DEFAULT_SEEDS,
    on_point: Optional[Callable[[pd.DataFrame], None]] = None,
) -> SearchResult:
    """Halve the BSP fraction of the config's `sync_switch` entry (by label; default: the first)
    from `start` down to `smallest` while its mean final accuracy over `seeds` seeds stays within
    `tolerance` of the same run at fraction 1 (full BSP). `on_point` sees the points so far."""
    cfg = as_config(config)
    entry = _entry(cfg, policy)
    if not 0 < smallest <= start < 1:
        raise ConfigError(f"search: need 0 < smallest ({smallest}) <= start ({start}) < 1")
    if not 0 <= tolerance < float("inf"):
        raise ConfigError(f"search: tolerance must be a finite accuracy difference >= 0, got {tolerance}")
    if seeds < 1:
        raise ConfigError(f"search: seeds must be at least 1, got {seeds}")
    rows: list[dict[str, Any]] = []

    def measure(fraction: float) -> float:
        for i in range(seeds):
            result = simulate(_variant(cfg, entry, fraction, cfg.seed + i))
            summary = result.summary.iloc[0]
            if summary["status"] != "ok":
                raise SearchError(f"fraction {fraction:g}, seed {cfg.seed + i}: {summary['status']}")
            rows.append({"fraction": fraction, "seed": cfg.seed + i, **{c: summary[c] for c in COLUMNS[2:]}})
            if on_point is not None:
                on_point(pd.DataFrame(rows, columns=list(COLUMNS)))
        return float(pd.DataFrame(rows).query("fraction == @fraction")["final_accuracy"].mean())

    reference = measure(1.0)
    best, fraction = 1.0, start
    while fraction >= smallest - 1e-12:
        if measure(fraction) < reference - tolerance:
            break
        best, fraction = fraction, fraction / 2
    points = pd.DataFrame(rows, columns=list(COLUMNS))
    by_fraction = points.groupby("fraction", sort=False)
    table = by_fraction.mean(numeric_only=True).drop(columns="seed").reset_index()
    for column in SPREAD:  # each mean followed by its spread over the seeds
        at = table.columns.get_loc(column) + 1
        table.insert(at, f"{column}_min", by_fraction[column].min().to_numpy())
        table.insert(at + 1, f"{column}_max", by_fraction[column].max().to_numpy())
    table["seeds"] = by_fraction.size().to_numpy()
    spreads = [interval(list(rows["final_accuracy"])) for _, rows in by_fraction]
    at = table.columns.get_loc("final_accuracy_max") + 1
    table.insert(at, "final_accuracy_sd", [i.sd for i in spreads])
    table.insert(at + 1, "final_accuracy_ci95", [i.half for i in spreads])  # half-width: mean ± this
    table["passes"] = table["final_accuracy"] >= reference - tolerance
    table["chosen"] = table["fraction"] == best
    return SearchResult(points, table, best, reference, tolerance, cfg.name, pick_separation(points, best))


def planned_runs(start: float, smallest: float, seeds: int) -> int:
    """The most runs a search makes: full BSP and every halving from `start` down to `smallest`,
    `seeds` each (it stops earlier when a fraction falls short)."""
    fractions, fraction = 1, start
    while fraction >= smallest - 1e-12:
        fractions, fraction = fractions + 1, fraction / 2
    return fractions * seeds


def pick_separation(points: pd.DataFrame, best: float) -> pd.DataFrame:
    """The pick against each neighbour tried (the next larger fraction, or full BSP; the next smaller,
    the one that fell short): both means, their intervals, whether they overlap, and the seeds that
    would separate them (`sim.experiments.seed_spread`), with a sentence saying so."""
    tried = sorted(points["fraction"].unique())
    at = tried.index(best)
    accuracy = {f: list(rows["final_accuracy"]) for f, rows in points.groupby("fraction")}
    rows = []
    for neighbour in [tried[i] for i in (at + 1, at - 1) if 0 <= i < len(tried)]:
        found = separation(accuracy[best], accuracy[neighbour])
        rows.append(
            {
                "fraction": best,
                "neighbour": neighbour,
                "fraction_mean": found.a.mean,
                "fraction_ci95": found.a.half,
                "neighbour_mean": found.b.mean,
                "neighbour_ci95": found.b.half,
                "seeds": min(found.a.seeds, found.b.seeds),
                "overlap": found.overlap,
                "seeds_needed": found.seeds_needed,
                "verdict": separation_sentence(best, neighbour, found),
            }
        )
    return pd.DataFrame(rows, columns=list(SEPARATION))


def separation_sentence(pick: float, neighbour: float, found: Separation) -> str:
    """One line: the pick's and the neighbour's mean accuracy with their intervals, and the verdict."""
    name = "full BSP" if neighbour == 1.0 else f"{neighbour:.2%}"
    if found.overlap is None:
        return (f"the pick {pick:.2%} ({found.a.mean:.4f}) against {name} ({found.b.mean:.4f}): one seed per "
                "fraction shows no spread, so whether they differ cannot be told; run --seeds 3 or more")  # fmt: skip
    said = (f"the pick {pick:.2%} ({found.a.mean:.4f} ± {found.a.half:.4f}) against {name} ({found.b.mean:.4f} ± "
            f"{found.b.half:.4f}; {LEVEL:.0%} intervals over {min(found.a.seeds, found.b.seeds)} seeds)")  # fmt: skip
    if not found.overlap:
        return f"{said}: distinguishable (the intervals do not overlap)"
    if found.seeds_needed is not None:
        more = f"about {found.seeds_needed} seeds per fraction would separate them if the spread stayed as measured"
    elif found.a.mean == found.b.mean:
        more = "their means are equal, so no number of seeds would separate them"
    else:
        more = "no practical number of seeds would separate them"
    return f"{said}: NOT distinguishable (the intervals overlap); {more}"


def _entry(config: Config, label: Optional[str]) -> dict[str, Any]:
    if not config.numerics_on:
        raise ConfigError("numerics: the search compares trained accuracy; add a numerics: section")
    entries = [e for e in config.policies if e.name == "sync_switch" and (label is None or e.display == label)]
    if not entries:
        known = ", ".join(e.display for e in config.policies if e.name == "sync_switch") or "none in this config"
        raise ConfigError(f"policy: no sync_switch entry {label or ''} to search; sync_switch entries: {known}")
    entry = entries[0].model_dump()
    if entry.get("switching", "offline") != "offline" or entry.get("pattern", "10") != "10":
        raise ConfigError(f"policies[{config.policies.index(entries[0])}]: the search varies switch_at of an "
                          "offline 10 pattern (BSP, then ASP)")  # fmt: skip
    return entry


def _variant(config: Config, entry: dict[str, Any], fraction: float, seed: int) -> Config:
    """The config with only the searched entry, at `fraction`, with `seed`."""
    data = config.model_dump(mode="json")
    data["seed"] = seed
    data["policies"] = [{**entry, "switch_at": fraction, "label": f"switch_at={fraction:g}"}]
    data.setdefault("simulation", {})["trace"] = False
    return parse_config(data)
