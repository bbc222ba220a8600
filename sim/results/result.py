"""What a `simulate` call returns, and the files it writes (README: "What you get"; the tables are
built in `sim/results/tables.py`).

Files are written atomically (`sim/files.py`), so a crash while writing never leaves half a table,
and `write` can be called again as more policies finish. A run clears the files a run owns
(`clear_run_files`) before its first write, so a folder never mixes two runs' results.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from sim.config import Config, dump_config
from sim.engine.run import PolicyRun
from sim.files import atomic_write

# summary.csv is written after these: it lists the policies whose rows are already in them, so a run
# killed between two files never has a summary claiming rows that are not there yet
DETAIL_TABLES = (
    "iterations", "phases", "ops", "links", "utilization", "staleness", "faults", "memory", "decisions",
)  # fmt: skip
# tables that folders written before they existed lack: read as empty frames
LATER_TABLES = ("memory", "decisions")
# per-link tables: a real run cannot see what each link carried, so its folder has none of them
UNMEASURED = ("links", "utilization")
FIGURES = ("comparison", "utilization", "staleness", "accuracy")
FIGURE_FORMATS = ("png", "pdf", "svg")  # what `syncsim plot` draws; `write` draws png
# every file a run's folder may hold (a real run's too: its parameters.npz marks a folder as measured);
# `clear_run_files` removes them so that a new run into the folder never sits beside an older one's
RUN_FILES = (
    "config.yaml",
    "errors.txt",
    "trace.json",
    "parameters.npz",
    "ranks.csv",
    *(f"{name}.csv{packed}" for name in ("summary", "accuracy", *DETAIL_TABLES) for packed in ("", ".gz")),
    *(f"{name}.{fmt}" for name in FIGURES for fmt in FIGURE_FORMATS),
)


@dataclass
class Result:
    """Everything one `simulate` call produced; tables are pandas DataFrames."""

    config: Config
    summary: pd.DataFrame
    iterations: pd.DataFrame
    ops: pd.DataFrame
    links: pd.DataFrame
    utilization: pd.DataFrame
    staleness: pd.DataFrame
    faults: pd.DataFrame
    phases: pd.DataFrame
    runs: list[PolicyRun] = field(default_factory=list)
    accuracy: Optional[pd.DataFrame] = None  # numerics mode only
    measured: bool = False  # a real run's tables: times measured, seconds from each policy's start
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)  # predicted peak memory per GPU (memory.csv)
    # what the run chose for `auto` settings, and why (decisions.csv; sim.engine.decisions)
    decisions: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def time_label(self) -> str:
        """What the tables' `_s` times are, for axis labels."""
        return "measured time (s, from the policy's start)" if self.measured else "simulated time (s)"

    @classmethod
    def read(cls, folder: str | os.PathLike[str]) -> Result:
        """A run's results back from the folder `write` (or `syncsim run --out`) filled: its config and
        tables as written (each `NAME.csv`, or `NAME.csv.gz` for an archived folder). `runs` is empty:
        the engine's in-memory objects are not saved."""
        from sim.config import load_config

        out = Path(folder)
        if not table_path(out, "summary").is_file() or not (out / "config.yaml").is_file():
            raise FileNotFoundError(f"{out}: no summary.csv and config.yaml here; not the folder of a syncsim run")
        accuracy = table_path(out, "accuracy")
        measured = (out / "parameters.npz").is_file()  # only a real run's folder has one
        tables = {
            name: _empty(name) if measured and name in UNMEASURED else read_table(out, name)
            for name in DETAIL_TABLES
            if name not in LATER_TABLES or table_path(out, name).is_file()
        }
        return cls(
            load_config(out / "config.yaml"),
            read_table(out, "summary"),
            **tables,  # type: ignore[arg-type]
            accuracy=read_table(out, "accuracy") if accuracy.is_file() else None,
            measured=measured,
        )

    @property
    def errors(self) -> dict[str, str]:
        return {run.label: run.error for run in self.runs if run.error is not None}

    def write(
        self, out_dir: str | os.PathLike[str], *, plot: bool = True, trace: Optional[bool] = None, tables: bool = True
    ) -> Path:
        """Write the tables as CSV, config.yaml, trace.json and the plots (see README). `tables=False`: the
        tables and config.yaml are already written (the last policy's save wrote this very result), only the rest."""
        from sim.results.trace import chrome_trace

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        if tables:
            atomic_write(out / "config.yaml", dump_config(self.config))
            self._write_tables(out)
        failed = [run for run in self.runs if run.error is not None]
        if failed:  # the summary says why in one line; the full traceback is for bug reports
            atomic_write(out / "errors.txt", "\n".join(f"== {run.label}\n{run.traceback}" for run in failed))
        elif (out / "errors.txt").exists():
            (out / "errors.txt").unlink()
        # the trace and the figures last: whatever happens there, every table is already written
        if self.config.simulation.trace if trace is None else trace:
            atomic_write(out / "trace.json", chrome_trace(self, self.config.simulation.trace_max_events))
        if plot:
            self.plot(out)
        return out

    def _write_tables(self, out: Path) -> None:
        for name in DETAIL_TABLES:
            if self.measured and name in UNMEASURED:  # a real run cannot see links: no file, not an empty one
                (out / f"{name}.csv").unlink(missing_ok=True)
                continue
            atomic_write(out / f"{name}.csv", getattr(self, name).to_csv(index=False))
        if self.accuracy is not None:
            atomic_write(out / "accuracy.csv", self.accuracy.to_csv(index=False))
        else:  # an older numerics run's accuracy must not be read back as this run's
            (out / "accuracy.csv").unlink(missing_ok=True)
        atomic_write(out / "summary.csv", self.summary.to_csv(index=False))

    def plot(self, out_dir: str | os.PathLike[str], formats: tuple[str, ...] = ("png",)) -> list[Path]:
        """Draw the standard figures into `out_dir`, once per format (png, pdf, svg); returns the files."""
        from sim.results.plots import accuracy_plot, comparison_plot, staleness_plot, utilization_plot

        out, written = Path(out_dir), []
        if not len(self.summary):
            return written
        out.mkdir(parents=True, exist_ok=True)
        for fmt in formats:
            name = self.config.name
            comparison_plot(
                self.summary, self.iterations, out / f"comparison.{fmt}", self.phases, name, self.time_label
            )
            written.append(out / f"comparison.{fmt}")
            # none in a real run, or when no policy sent anything: no figure rather than an empty one
            if len(self.utilization) and utilization_plot(self.utilization, out / f"utilization.{fmt}", name):
                written.append(out / f"utilization.{fmt}")
            if len(self.staleness):
                staleness_plot(self.staleness, out / f"staleness.{fmt}", name)
                written.append(out / f"staleness.{fmt}")
            if self.accuracy is not None and len(self.accuracy):
                target = self.config.numerics.target_accuracy if self.config.numerics else None
                path = out / f"accuracy.{fmt}"
                accuracy_plot(self.accuracy, path, target, self.phases, name, self.time_label)
                written.append(path)
        return written


def run_files_text(folder: str | os.PathLike[str]) -> str:
    """The run files `folder` holds, as a run's last line names them: the tables (`summary, ops: .csv`),
    then every other file but config.yaml (trace.json, the figures), in `RUN_FILES` order."""
    present = [name for name in RUN_FILES if (Path(folder) / name).is_file() and name != "config.yaml"]
    tables = [name.removesuffix(".csv") for name in present if name.endswith(".csv")]
    others = [name for name in present if not name.endswith(".csv")]
    return "; ".join(part for part in (f"{', '.join(tables)}: .csv" if tables else "", ", ".join(others)) if part)


def clear_run_files(folder: str | os.PathLike[str]) -> list[Path]:
    """Remove every `RUN_FILES` name from `folder` (call it while holding the folder, before a run writes
    there): a re-run into an `--out` never leaves an older run's tables or figures beside its own.
    Other files are left alone. Returns what was removed."""
    out, removed = Path(folder), []
    for name in RUN_FILES:
        path = out / name
        if path.is_file() or path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed


def _empty(name: str) -> pd.DataFrame:
    """An `UNMEASURED` table with its columns and no rows."""
    from sim.results.tables import links_frame, utilization_frame

    return {"links": links_frame, "utilization": utilization_frame}[name]([], None)  # type: ignore[arg-type]


def table_path(folder: Path, name: str) -> Path:
    """`folder/NAME.csv`, or `NAME.csv.gz` where only that one exists."""
    plain = folder / f"{name}.csv"
    packed = folder / f"{name}.csv.gz"
    return packed if not plain.is_file() and packed.is_file() else plain


def read_table(folder: Path, name: str) -> pd.DataFrame:
    """A written table; a file with no columns at all (nothing was recorded) reads as an empty frame."""
    try:
        return pd.read_csv(table_path(folder, name))
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
