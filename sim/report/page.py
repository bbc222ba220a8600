"""The report page: one self-contained HTML file per run or sweep folder, opened from disk with no server,
no network and no CDN (plotly's JavaScript is written into the page once, the style sheet too).

A run's page: provenance, the summary, what the simulator decided for every `auto` setting (the folder's
`decisions.csv`, where the run wrote one), the interactive figures, the config as run and the folder's
files (the Perfetto trace among them). A sweep's page: provenance, the points' summary, the sweep figure
with a metric menu, the failed points.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import plotly.graph_objects as go

from sim.report.names import DECISIONS_FILE, SWEEP_CONFIG_FILE
from sim.report.provenance import read_provenance

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; color: #222; padding: 0 1rem; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.9rem; margin: 0.5rem 0; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
pre { background: #f7f7f7; padding: 0.8rem; overflow-x: auto; font-size: 0.85rem; max-height: 32rem; }
.note { color: #555; font-size: 0.9rem; } .scroll { overflow-x: auto; max-width: 100%; }
"""
SUMMARY_COLUMNS = (
    "policy", "status", "workers", "iterations", "mean_iteration_s", "p99_iteration_s", "throughput_samples_s",
    "mean_compute_s", "mean_comm_s", "mean_wait_s", "scaling_efficiency", "network_bytes_per_iteration",
    "peak_memory_gib", "final_accuracy", "time_to_target_s",
)  # fmt: skip


def number(value: float) -> str:
    """Four significant figures; thousands to billions whole, with separators (14,562 rather than 1.456e+04)."""
    if pd.isna(value):
        return ""
    if 1e3 <= abs(value) < 1e9:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def table_html(frame: pd.DataFrame, columns: Optional[Iterable[str]] = None) -> str:
    """`frame` (its `columns` that exist) as an HTML table, numbers to four significant figures."""
    if columns is not None:
        frame = frame[[c for c in columns if c in frame]]
    shown = frame.copy()
    for column in shown.columns:
        if shown[column].dtype.kind == "f":
            shown[column] = shown[column].map(number)
    return '<div class="scroll">' + shown.to_html(index=False, border=0, escape=True, na_rep="") + "</div>"


def provenance_html(folder: Path) -> str:
    """The folder's provenance.json as a table, or a line saying it has none."""
    record = read_provenance(folder)
    if record is None:
        return '<p class="note">No provenance.json here: written by an older syncsim or through the API.</p>'
    rows: list[tuple[str, Any]] = [(k, v) for k, v in record.items() if not isinstance(v, dict)]
    rows += [(f"{k}.{sub}", v) for k, d in record.items() if isinstance(d, dict) for sub, v in d.items()]
    cells = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table>{cells}</table>"


def figures_html(figures: list[go.Figure]) -> str:
    """The figures as divs; plotly's JavaScript inlined with the first, once."""
    return "\n".join(
        fig.to_html(full_html=False, include_plotlyjs=i == 0, config={"displaylogo": False, "responsive": True})
        for i, fig in enumerate(figures)
    )


def files_html(folder: Path) -> str:
    """Links to the folder's files (relative: the page and the folder move together)."""
    items = []
    for path in sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")):
        note = ""
        if path.name == "trace.json":
            note = " (open it in Perfetto's UI, ui.perfetto.dev, with Open trace file: it stays on your machine)"
        items.append(f'<li><a href="{html.escape(path.name)}">{html.escape(path.name)}</a>{note}</li>')
    return "<ul>" + "".join(items) + "</ul>"


def page(title: str, sections: list[tuple[str, str]]) -> str:
    """A whole HTML document: `sections` as (heading, HTML body) pairs."""
    body = "\n".join(f"<h2>{html.escape(head)}</h2>\n{content}" for head, content in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def run_page(folder: Path) -> str:
    """The report of the run `syncsim run` wrote to `folder`."""
    from sim.report.run_figures import run_figures
    from sim.results import Result

    result = Result.read(folder)
    decisions = folder / DECISIONS_FILE
    decided = (
        table_html(pd.read_csv(decisions))
        if decisions.is_file()
        else '<p class="note">No decisions.csv here: the run was written before syncsim recorded its decisions.</p>'
    )
    kind = "measured on a real cluster" if result.measured else "simulated"
    sections = [
        ("Provenance", provenance_html(folder)),
        ("Summary", f'<p class="note">Times {kind}.</p>' + table_html(result.summary, SUMMARY_COLUMNS)),
        ("What was decided", decided),
        ("Figures", figures_html(run_figures(result))),
        ("Config as run", f"<pre>{html.escape((folder / 'config.yaml').read_text())}</pre>"),
        ("Files", files_html(folder)),
    ]
    return page(f"syncsim run: {result.config.name}", sections)


def changed_decisions(decisions: pd.DataFrame) -> pd.DataFrame:
    """The rows of a sweep's decisions.csv whose setting took more than one value across the points (per
    policy): where an `auto` setting's choice, not only the swept value, changed between points."""
    if decisions.empty:
        return decisions
    values = decisions.groupby(["policy", "setting"], sort=False)["value"].transform("nunique")
    return decisions[values > 1]


def changed_html(decisions: pd.DataFrame, axes: list[str]) -> str:
    """`changed_decisions` as a table, or a line saying nothing changed."""
    changed = changed_decisions(decisions)
    if changed.empty:
        return '<p class="note">Every setting was decided the same at every point (decisions.csv has each).</p>'
    note = '<p class="note">Settings whose choice differs between points, and why (every row: decisions.csv).</p>'
    return note + table_html(changed, ["point", *axes, "policy", "setting", "value", "why"])


def sweep_page(folder: Path, table_file: str, errors_file: str) -> str:
    """The report of the sweep `syncsim sweep` wrote to `folder`."""
    from sim.experiments.sweep_plot import axes_of
    from sim.report.sweep_figures import METRICS, sweep_figure

    table = pd.read_csv(folder / table_file)
    from sim.experiments.sweep_runner import config_name

    name = config_name(folder) or f"{folder.name} (config not recorded)"
    columns = ["point", *axes_of(table), "policy", "status", *METRICS] if len(table) else None
    errors = folder / errors_file
    failed = pd.read_csv(errors) if errors.is_file() and errors.stat().st_size else pd.DataFrame()
    sections = [("Provenance", provenance_html(folder))]
    if not table.empty:
        sections.append(("Figure", figures_html([sweep_figure(table, name)])))
    decisions = folder / DECISIONS_FILE
    if decisions.is_file() and decisions.stat().st_size:
        sections.append(("Where auto changed its mind", changed_html(pd.read_csv(decisions), axes_of(table))))
    sections += [
        (
            "Points",
            f'<p class="note">{table["point"].nunique() if len(table) else 0} points; every column in '
            f"{table_file}.</p>" + table_html(table, columns),
        ),
        ("Failed points", table_html(failed) if len(failed) else '<p class="note">None.</p>'),
        ("Files", files_html(folder)),
    ]
    source = folder / SWEEP_CONFIG_FILE
    if source.is_file():
        sections.insert(-1, ("Sweep config", f"<pre>{html.escape(source.read_text())}</pre>"))
    return page(f"syncsim sweep: {name}", sections)
