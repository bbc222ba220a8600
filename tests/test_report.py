"""`syncsim report` and `--report`: one self-contained HTML page per run or sweep, with what the run was,
its figures and its provenance (the browser's view: tests/test_report_browser.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from sim.cli import main
from sim.report import write_report
from sim.report.page import number
from sim.report.run_figures import PARTS, THROUGHPUT_COLOUR, breakdown, policy_colours, utilization
from sim.report.sweep_figures import sweep_figure
from tests.report_folders import run_folder, sweep_folder

EXTERNAL = re.compile(r"""<(script|link|img|iframe)[^>]+(src|href)=["']?(https?:)?//""", re.IGNORECASE)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_folder(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sweep_folder(tmp_path_factory.mktemp("report"))


def test_a_run_report_holds_its_sections_and_loads_nothing_from_outside(run_dir: Path) -> None:
    text = (run_dir / "report.html").read_text()
    for heading in ("Provenance", "Summary", "What was decided", "Figures", "Config as run", "Files"):
        assert f"<h2>{heading}</h2>" in text, heading
    assert not EXTERNAL.search(text)  # no CDN, no remote image
    assert len(re.findall(r"\* plotly\.js v\d", text)) == 1  # the library's banner: inlined, once
    assert text.count('class="plotly-graph-div"') == 4  # breakdown, iteration times, utilization, memory
    assert '<a href="trace.json">trace.json</a>' in text
    assert "syncsim run " in text and "quickstart_small.yaml" in text  # the command as typed


def test_provenance_records_the_command_seed_and_libraries(run_dir: Path) -> None:
    record = json.loads((run_dir / "provenance.json").read_text())
    assert record["command"].startswith("syncsim run ") and record["command"].endswith("--report")
    assert record["seed"] == 0 and record["config"] == "quickstart"  # the config's name: field, not file
    assert record["libraries"]["simpy"] and record["libraries"]["plotly"]
    assert record["wall_s"] > 0 and record["machine"]["cpus"] >= 1


def test_a_sweep_report_names_its_config_and_offers_every_metric(sweep_dir: Path) -> None:
    text = (sweep_dir / "report.html").read_text()
    assert "<h1>syncsim sweep: zen_density</h1>" in text
    assert "<h2>Sweep config</h2>" in text and (sweep_dir / "sweep.yaml").is_file()
    assert not EXTERNAL.search(text)
    table = pd.read_csv(sweep_dir / "sweep.csv")
    fig = sweep_figure(table, "zen_density")
    assert "zen_density" in fig.layout.title.text
    (menu,) = fig.layout.updatemenus
    labels = [button.label for button in menu.buttons]
    assert labels[0] == "Throughput (samples/s)" and len(labels) == len(set(labels)) >= 5
    per_metric = len(fig.data) // len(labels)
    assert per_metric == 3  # a line per policy
    for i, button in enumerate(menu.buttons):  # each entry shows its own metric's lines only
        visible = button.args[0]["visible"]
        assert visible == [i * per_metric <= j < (i + 1) * per_metric for j in range(len(fig.data))]
    assert fig.layout.xaxis.type == "log"  # 0.001 to 0.1


def test_the_iteration_parts_and_throughput_take_colours_no_policy_takes() -> None:
    summary = pd.DataFrame(
        {
            "policy": ["ring", "ps"],
            "mean_compute_s": [1.0, 1.0],
            "mean_comm_s": [0.5, 0.2],
            "mean_wait_s": [0.0, 0.1],
            "throughput_samples_s": [10.0, 9.0],
        }
    )
    fig = breakdown(summary, "simulated time (s)")
    colours = {trace.name: trace.marker.color for trace in fig.data}
    assert len(set(colours.values())) == 4  # compute, communication, waiting, throughput
    policies = set(policy_colours([f"p{i}" for i in range(10)]).values())
    assert not policies & {colour for _, colour in PARTS.values()} and THROUGHPUT_COLOUR not in policies
    assert [t.xaxis for t in fig.data] == ["x", "x", "x", "x2"]  # throughput on its own axis


def test_utilization_panels_share_their_time_axis_and_scale() -> None:
    table = pd.DataFrame(
        {
            "policy": ["ring"] * 2 + ["hierarchical"] * 2,
            "time_s": [0.0, 5.0, 0.0, 2.9],
            "link": ["a->s"] * 4,
            "kind": ["nic"] * 4,
            "utilization": [0.5, 1.0, 0.2, 0.4],
        }
    )
    fig = utilization(table, {}, "simulated time (s)")
    assert fig is not None
    assert fig.layout.xaxis.matches == "x2" or fig.layout.xaxis2.matches == "x"  # one time axis for both
    assert fig.layout.yaxis.range == fig.layout.yaxis2.range == (0, 1.05)
    assert sum(t.showlegend is not False for t in fig.data) == 2  # mean and max, named once


def test_report_of_a_folder_that_is_neither_a_run_nor_a_sweep_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "folder:" in err and "syncsim run" in err


def test_report_rewrites_to_another_file(run_dir: Path, tmp_path: Path) -> None:
    path = write_report(run_dir, tmp_path / "r.html")
    assert path.read_text().startswith("<!DOCTYPE html>")


def test_numbers_read_as_people_write_them() -> None:
    assert number(14562.0023) == "14,562" and number(0.0351612) == "0.03516" and number(2.4e9) == "2.4e+09"
    assert number(float("nan")) == ""


def test_a_sweep_report_lists_the_settings_auto_decided_differently_between_points() -> None:
    from sim.report.page import changed_decisions

    decisions = pd.DataFrame(
        {
            "point": [0, 0, 1, 1],
            "policy": ["ds_sync", "ds_sync", "ds_sync", "ds_sync"],
            "setting": ["schedule", "buckets", "schedule", "buckets"],
            "value": ["one island of 16 ranks", "39 buckets", "4 rack islands", "39 buckets"],
            "why": ["no uplink oversubscribed", "bucket_mb", "uplinks oversubscribed", "bucket_mb"],
        }
    )
    changed = changed_decisions(decisions)
    assert list(changed["setting"]) == ["schedule", "schedule"] and list(changed["point"]) == [0, 1]
    assert changed_decisions(decisions[decisions["setting"] == "buckets"]).empty
