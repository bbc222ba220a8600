"""The held-out nccl-tests table (multi-host figures the NCCL constants are never fitted to) and its
scorer: the file's format and citations, the figures against nccl-tests' own definitions, the fit
still reading only the fitted table, and the null model's alpha-beta line against hand derivations."""

from __future__ import annotations

import dataclasses
from importlib import resources

import pandas as pd
import pytest

from sim.catalog.gpus import get_gpu
from sim.experiments import fidelity_heldout as heldout
from sim.nccl.published import KINDS, Published, rows, table

MiB, GiB = 2**20, 2**30


def _csv(name: str) -> pd.DataFrame:
    with resources.files("sim.catalog").joinpath(name).open() as f:
        return pd.read_csv(f, dtype={"nccl_version": str})


FITTED = _csv("published_collectives.csv")
HELD = _csv("published_collectives_heldout.csv")


def figure(nbytes: float, busbw_gbs: float, nodes: int = 2, collective: str = "all_reduce") -> Published:
    return Published(
        "inter_node",
        collective,
        "H100",
        nodes,
        8,
        8,
        400.0,
        "infiniband",
        nbytes,
        busbw_gbs,
        "auto",
        False,
        True,
        "",
        "",
    )


def test_the_heldout_table_has_exactly_the_fitted_tables_columns() -> None:
    assert list(HELD.columns) == list(FITTED.columns)


def test_every_heldout_row_is_cited_sized_and_known() -> None:
    for column in ("source", "source_line", "system", "note"):
        assert HELD[column].notna().all() and (HELD[column].str.strip() != "").all(), column
    assert (HELD["size_bytes"] > 0).all() and (HELD["busbw_gbs"] > 0).all()
    assert set(HELD["bug_report"]) <= {"yes", "no"} and set(HELD["in_place"]) <= {"yes", "no"}
    assert set(HELD["collective"]) <= set(KINDS)
    for gpu in set(HELD["gpu"]):
        get_gpu(gpu)  # raises for a GPU the catalogue lacks
    # a repository row names its commit (40 hex digits) and path; otherwise a web address
    repo = HELD["source"].str.match(r"^[\w.-]+/[\w.-]+@[0-9a-f]{40}:\S+$")
    assert (repo | HELD["source"].str.startswith("https://")).all()


def test_every_heldout_row_is_across_hosts_and_states_its_nics() -> None:
    assert (HELD["nodes"] > 1).all() and (HELD["kind"] == "inter_node").all()
    assert (HELD["nics_per_node"] >= 1).all() and (HELD["nic_gbps"] > 0).all()
    assert len(rows(include_bug_reports=True, heldout=True)) == len(HELD)  # none dropped as unstated


def test_no_heldout_row_repeats_a_fitted_one() -> None:
    """Same source, collective, hosts, GPUs per host and size would be the same figure."""
    key = ["source", "collective", "nodes", "gpus_per_node", "size_bytes"]
    assert not set(map(tuple, HELD[key].values)) & set(map(tuple, FITTED[key].values))
    assert not HELD.duplicated(key + ["source_line"]).any()


def test_heldout_figures_obey_nccl_tests_own_definitions() -> None:
    """busbw = algbw x 2(p-1)/p (all-reduce) or (p-1)/p, and algbw = size / time, wherever the source
    printed them: a check on the transcription and on the stated hosts and GPUs per host."""
    p = HELD["nodes"] * HELD["gpus_per_node"]
    factor = (2 * (p - 1) / p).where(HELD["collective"] == "all_reduce", (p - 1) / p)
    printed = HELD["algbw_gbs"].notna()
    assert printed.sum() > 50
    ratio = HELD["busbw_gbs"][printed] / HELD["algbw_gbs"][printed] / factor[printed]
    assert ratio.between(0.97, 1.03).all()  # printed to 2 decimals
    timed = HELD["time_us"].notna()
    algbw = HELD["size_bytes"][timed] / (HELD["time_us"][timed] * 1e-6) / 1e9
    assert (algbw / HELD["algbw_gbs"][timed]).between(0.97, 1.03).all()


def test_the_fit_still_reads_only_the_fitted_table() -> None:
    assert table().equals(FITTED) and table(heldout=True).equals(HELD)
    assert rows(include_bug_reports=True) == rows(include_bug_reports=True, frame=FITTED)
    # the network constants are fitted to rows across hosts: none of them comes from a held-out source
    across = {r.source for r in rows(include_bug_reports=True) if r.nodes > 1}
    assert not across & set(HELD["source"])


def test_the_alpha_beta_fit_reproduces_a_two_point_line() -> None:
    """Two figures made by time = 20 us + n / 50 GB/s: the fit gives back 20 us and 50 GB/s."""
    alpha, bandwidth = 20e-6, 50e9
    figures = []
    for n in (1 * MiB, 1 * GiB):
        seconds = alpha + n / bandwidth
        figures.append(figure(n, 2 * 15 / 16 * n / seconds / 1e9))  # 16 ranks' all-reduce bus factor
    line = heldout.fit_alpha_beta(figures)
    assert line.alpha_s == pytest.approx(alpha, rel=1e-9)
    assert line.bytes_per_s == pytest.approx(bandwidth, rel=1e-9)


def test_the_null_models_busbw_is_the_bus_factor_over_the_lines_time() -> None:
    line = heldout.AlphaBeta(alpha_s=100e-6, bytes_per_s=25e9)
    # 1 GiB all-reduce on 16 ranks: 0.1 ms + 42.95 ms = 43.05 ms; busbw = 1.875 x 1.0737 GB / 43.05 ms
    assert line.busbw_gbs(figure(GiB, 1.0)) == pytest.approx(1.875 * GiB / (100e-6 + GiB / 25e9) / 1e9)
    assert line.busbw_gbs(figure(GiB, 1.0)) == pytest.approx(46.77, abs=0.01)
    # all-gather of 4 hosts x 8 GPUs: factor 31/32
    gather = figure(64 * MiB, 1.0, nodes=4, collective="all_gather")
    assert line.busbw_gbs(gather) == pytest.approx(31 / 32 * 64 * MiB / (100e-6 + 64 * MiB / 25e9) / 1e9)


def test_the_alpha_beta_fit_names_what_it_lacks() -> None:
    with pytest.raises(ValueError, match="figures"):
        heldout.fit_alpha_beta([figure(GiB, 100.0)])


def test_the_scorer_simulates_rows_and_summarises_them_per_source() -> None:
    picked = rows(include_bug_reports=True, heldout=True)
    few = [picked[0], picked[-1], next(r for r in picked if r.collective == "all_gather" and not r.bug_report)]
    few.append(dataclasses.replace(few[0], bug_report=True))
    line = heldout.AlphaBeta(10e-6, 40e9)
    scored = heldout.heldout_table(few, null=line)
    assert len(scored) == 4 and (scored["simulated_gbs"] > 0).all()
    assert scored["null_gbs"].tolist() == [round(line.busbw_gbs(r), 1) for r in few]
    summary = heldout.summary(scored)
    assert summary.loc["overall", "rows"] == 3  # the bug report left out
    assert summary["rows"].drop("overall").sum() == 3
    assert summary[["within", "null_within"]].stack().between(0, 1).all()
    networks = heldout.summary(scored, "network")
    assert networks.index.name == "network" and networks["rows"].drop("overall").sum() == 3
    assert set(networks.index) == {r.network for r in few} | {"overall"}


def test_heldout_infiniband_and_roce_rows_stay_within_the_documented_error() -> None:
    """The transports the NCCL model fits (InfiniBand, RoCE), scored on sources it never saw with the
    constants as committed: a 6.5% median and 57 of 65 rows within 20%, the issue's 85% (the 8 misses
    are one degraded run, scored all the same); a change to the model across hosts that loses that
    fails here (the figures are deterministic)."""
    figures = [r for r in rows(heldout=True) if r.network in ("infiniband", "roce")]
    errors = heldout.heldout_table(figures)["error"].abs()
    assert len(errors) == 65
    assert errors.median() <= 0.07, f"median |error| {errors.median():.1%} (documented 6.5%)"
    assert (errors <= 0.20).mean() >= 0.85, f"{(errors <= 0.20).mean():.0%} within 20% (documented 88%)"


def test_rows_set_aside_come_from_bug_reports_and_degraded_runs_stay_scored() -> None:
    """A held-out row left out of the scores comes from a bug report's thread; a run whose setup was
    degraded is scored all the same, its note citing the source's own lines that show it."""
    aside = HELD[HELD["bug_report"] == "yes"]
    assert aside["source"].str.contains("/issues/").all()
    degraded = HELD["note"].str.startswith("A degraded setup, scored all the same")
    assert degraded.sum() == 8 and (HELD.loc[degraded, "bug_report"] == "no").all()
    assert HELD.loc[degraded, "note"].str.contains(r"L\d+").all()


def test_headline_splits_scored_rows_into_overall_fitted_transports_and_large_messages() -> None:
    table = pd.DataFrame(
        {
            "network": ["infiniband", "roce", "efa", "infiniband"],
            "nbytes": [MiB, 64 * MiB, GiB, GiB],
            "error": [0.1, -0.3, 0.5, 0.0],
            "null_error": [0.5, 0.5, 0.1, -0.9],
            "bug_report": [False, False, False, True],
        }
    )
    figures = heldout.headline(table)
    assert figures["rows"].tolist() == [3, 2, 2]  # the bug report in none
    assert figures.loc["infiniband+roce", "median"] == pytest.approx(0.2)  # |0.1| and |-0.3|
    assert figures.loc[">= 64 MiB", "within"] == pytest.approx(0.0)  # 0.3 and 0.5
    assert figures.loc["overall", "null_within"] == pytest.approx(1 / 3)  # only |0.1|
