"""The Sync-Switch authors' logged runs, one row per run (docs/sync_switch.md, "The authors' logs").

The authors' repository (cake-lab/Sync-Switch) keeps, under `data/`, a TensorBoard export of every
run's test accuracy: `acc.csv`, one line per evaluation with its wall clock (`Wall time`, Unix
seconds), the global step and the accuracy. A run's wall time is its last evaluation's clock minus
its first (the step-0 evaluation taken when training starts; none when a run kept only its final
evaluation); its steps are the last evaluation's step, as TensorFlow's global step counts them
(under ASP every worker's update is a step). Blank lines in an export are skipped.
Directories name a configuration and, for repeated runs, a run number (`b5-a95-run3`, `12_88_2`,
`bsp_4`); a directory without one is run 0.

The repository also keeps its launcher's job records (`data/bsp_job.txt`, `data/asp_job.txt`): for
every phase a job ran, its mode and when training started and ended, with the steps done. A hybrid
job has one record per phase, so the gap between one phase's end and the next one's start is what a
switch cost (`sim/catalog/sync_switch_phases.csv`).

    python -m sim.experiments.sync_switch_logs --repo PATH   # rebuild the bundled table from a clone
    python -m sim.experiments.sync_switch_logs               # the per-configuration summary (Markdown)
    python -m sim.experiments.sync_switch_logs --repo PATH --step-times   # straggler runs' step spread
"""

from __future__ import annotations

import io
import re
import subprocess
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path

import pandas as pd

from sim.files import atomic_write
from sim.markdown import markdown_table

REPOSITORY = "cake-lab/Sync-Switch"
COMMIT = "09af0864c3d8745803a4b9c88ccf333eec4101b7"
TABLE = "sync_switch_runs.csv"
PHASES = "sync_switch_phases.csv"
JOB_RECORDS = ("data/bsp_job.txt", "data/asp_job.txt")
PHASE_COLUMNS = ("job", "mode", "started", "ended", "steps", "source")
_RECORD = re.compile(
    r"Job name: (?P<job>\S+), SGD: (?P<mode>\w+)\s*"
    r"Started training at:\s+(?P<started>\S+ \S+)\s*"
    r"Ended training at:\s+(?P<ended>\S+ \S+), (?P<steps>\d+) steps"
)
COLUMNS = (
    "experiment",
    "configuration",
    "run",
    "evaluations",
    "steps",
    "wall_min",
    "final_accuracy",
    "best_accuracy",
    "source",
)
_RUN = re.compile(r"(?:[-_]run|_)(\d+)$")
_SWITCH = re.compile(r"^([ab])(\d+)[-_]([ab])(\d+)$")  # b5-a95: 5% BSP, then 95% ASP (a first: ASP first)


def configuration(name: str) -> tuple[str, int]:
    """A run directory's name split into its configuration and run number (0: none given); the
    switch experiments' two spellings (`b50-a50`, `b50_a50`) are one configuration."""
    match = _RUN.search(name)
    config, run = (name[: match.start()], int(match.group(1))) if match else (name, 0)
    switch = _SWITCH.match(config)
    if switch:
        config = f"{switch.group(1)}{switch.group(2)}-{switch.group(3)}{switch.group(4)}"
    return config, run


def reduce_run(text: str) -> dict[str, float]:
    """One run's `acc.csv` as its evaluations, steps, wall minutes, final and best accuracy."""
    evaluations = pd.read_csv(io.StringIO(text))
    missing = {"Wall time", "Step", "Value"} - set(evaluations.columns)
    evaluations = evaluations.dropna(subset=["Wall time", "Step", "Value"]) if not missing else evaluations
    if missing or evaluations.empty:
        raise ValueError(f"not a TensorBoard accuracy export (missing {sorted(missing) or 'rows'})")
    evaluations = evaluations.sort_values("Wall time")
    wall = evaluations["Wall time"]
    # one evaluation (a run exported at its end only) gives no duration
    minutes = round(float(wall.iloc[-1] - wall.iloc[0]) / 60.0, 2) if len(evaluations) > 1 else float("nan")
    return {
        "evaluations": len(evaluations),
        "steps": int(evaluations["Step"].max()),
        "wall_min": minutes,
        "final_accuracy": round(float(evaluations["Value"].iloc[-1]), 4),
        "best_accuracy": round(float(evaluations["Value"].max()), 4),
    }


def reduce_job_records(text: str) -> list[dict[str, object]]:
    """A launcher's job record file as one dict per finished phase: job, mode (BSP or ASP), start and
    end (ISO timestamps as written) and steps. Phases that never logged their end are left out."""
    return [
        {**match.groupdict(), "steps": int(match["steps"])}
        for match in _RECORD.finditer(text.replace("Job name:", "\nJob name:"))
    ]


def switch_gaps(phases: pd.DataFrame) -> pd.Series:
    """Seconds from one phase's end to the next phase's start, for every job of several phases
    (indexed by job): the stop, checkpoint and relaunch that a switch costs."""
    ordered = phases.assign(started=pd.to_datetime(phases["started"]), ended=pd.to_datetime(phases["ended"]))
    ordered = ordered.sort_values(["job", "started"])
    gaps = (ordered["started"] - ordered.groupby("job")["ended"].shift()).dt.total_seconds()
    return gaps.set_axis(ordered["job"]).dropna()


def _git(repo: Path) -> Callable[..., str]:
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout

    return git


def read_job_records(repo: Path, commit: str = COMMIT) -> pd.DataFrame:
    """Every finished phase in the launcher's job records of a clone at `commit`, one row each."""
    git = _git(repo)
    rows = [
        {**record, "source": f"{REPOSITORY}@{commit}:{path}"}
        for path in JOB_RECORDS
        for record in reduce_job_records(git("show", f"{commit}:{path}"))
    ]
    return pd.DataFrame(rows, columns=list(PHASE_COLUMNS))


def read_repository(repo: Path, commit: str = COMMIT) -> pd.DataFrame:
    """Every run under `data/` of a clone of the authors' repository at `commit`, one row each."""
    git = _git(repo)
    rows = []
    for path in sorted(p for p in git("ls-tree", "-r", "--name-only", commit, "data").splitlines()):
        if not path.endswith("/acc.csv"):
            continue
        parts = path.split("/")[1:-1]  # data/<experiment...>/<run dir>/acc.csv
        config, run = configuration(parts[-1])
        source = f"{REPOSITORY}@{commit}:{path}"
        reduced = reduce_run(git("show", f"{commit}:{path}"))
        rows.append(
            {"experiment": "/".join(parts[:-1]), "configuration": config, "run": run, **reduced, "source": source}
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def interval_step_ms(text: str) -> tuple[pd.Timestamp, pd.Series]:
    """A run's `loss.csv` (one line per logged step, every 100 steps) as its start (UTC) and the
    milliseconds per step over each interval between two logged lines (the clock is in whole seconds)."""
    logged = pd.read_csv(io.StringIO(text)).dropna(subset=["Wall time", "Step"]).sort_values("Step")
    steps, wall = logged["Step"].diff(), logged["Wall time"].diff()
    started = pd.Timestamp(int(logged["Wall time"].iloc[0]), unit="s")
    return started, (1e3 * wall / steps)[steps > 0].reset_index(drop=True)


def step_times(repo: Path, experiment: str = "straggler", commit: str = COMMIT) -> pd.DataFrame:
    """Per run of `experiment` with a `loss.csv`, in the order they ran: when it started and how steady
    its steps were (10th, 50th and 90th percentile and mean of the per-interval milliseconds per step)."""
    git = _git(repo)
    rows = []
    for path in sorted(git("ls-tree", "-r", "--name-only", commit, f"data/{experiment}").splitlines()):
        if not path.endswith("/loss.csv"):
            continue
        started, ms = interval_step_ms(git("show", f"{commit}:{path}"))
        rows.append(
            {
                "run": path.split("/")[-2],
                "started_utc": started.strftime("%Y-%m-%d %H:%M"),
                "intervals": len(ms),
                "p10_ms": ms.quantile(0.1),
                "median_ms": ms.median(),
                "p90_ms": ms.quantile(0.9),
                "mean_ms": ms.mean(),
            }
        )
    return pd.DataFrame(rows).sort_values("started_utc", kind="stable").round(1)


def bundled(table: str = TABLE) -> pd.DataFrame:
    """A bundled table: the logged runs (sim/catalog/sync_switch_runs.csv), one row each, or with
    `PHASES` the job records' phases (sim/catalog/sync_switch_phases.csv)."""
    with resources.files("sim.catalog").joinpath(table).open() as f:
        return pd.read_csv(f, comment="#")


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per experiment and configuration: runs, how many of them are timed, median/min/max wall
    minutes over those, median steps and final accuracy."""
    grouped = runs.groupby(["experiment", "configuration"], sort=True)
    table = grouped.agg(
        runs=("run", "size"),
        timed=("wall_min", "count"),
        median_min=("wall_min", "median"),
        min_min=("wall_min", "min"),
        max_min=("wall_min", "max"),
        steps=("steps", "median"),
        final_accuracy=("final_accuracy", "median"),
    ).reset_index()
    return table.round({"median_min": 1, "min_min": 1, "max_min": 1, "steps": 0, "final_accuracy": 4})


def markdown(table: pd.DataFrame) -> str:
    """`table` as a Markdown table (docs/sync_switch.md)."""

    return markdown_table(table, lambda value: f"{value:g}" if isinstance(value, float) else str(value))


def main(argv: Sequence[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m sim.experiments.sync_switch_logs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--repo", type=Path, help="a clone of cake-lab/Sync-Switch: rebuild the bundled table from it")
    parser.add_argument(
        "--step-times", action="store_true", help="with --repo: how steady each straggler run's steps were, and stop"
    )
    args = parser.parse_args(argv)
    if args.step_times:
        if args.repo is None:
            parser.error("--step-times reads the runs' loss.csv: give --repo CLONE")
        print(markdown(step_times(args.repo)))
        return
    if args.repo is not None:
        runs = read_repository(args.repo)
        target = Path(__file__).resolve().parents[1] / "catalog" / TABLE
        header = (
            f"# The Sync-Switch authors' logged runs, one row per data/**/acc.csv of {REPOSITORY}@{COMMIT}\n"
            "# (python -m sim.experiments.sync_switch_logs --repo CLONE): wall_min = last evaluation's wall clock\n"
            "# minus the first's; steps = last evaluated global step; accuracies = test accuracy as logged.\n"
        )
        atomic_write(target, header + runs.to_csv(index=False))
        phases = read_job_records(args.repo)
        header = (
            f"# The Sync-Switch launcher's job records ({', '.join(JOB_RECORDS)} of {REPOSITORY}@{COMMIT}), one row\n"
            "# per finished phase (python -m sim.experiments.sync_switch_logs --repo CLONE); times as written there.\n"
        )
        atomic_write(target.with_name(PHASES), header + phases.to_csv(index=False))
        print(f"{len(runs)} runs -> {target}; {len(phases)} phases -> {target.with_name(PHASES)}")
        return
    print(markdown(summary(bundled())))


if __name__ == "__main__":
    main()
