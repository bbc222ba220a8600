"""Result tables and files: summary arithmetic, bytes on the wire against closed forms, trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import star, synthetic

from sim.api import simulate

MB = 1e6


def test_summary_arithmetic() -> None:
    cfg = synthetic(star(4), [{"name": "no_sync"}, {"name": "ring"}], 100, compute_ms=50.0, iterations=5)
    cfg["workload"]["batch_size"] = 32
    result = simulate(cfg)
    s = result.summary.set_index("policy")
    assert s.loc["no_sync", "mean_iteration_s"] == pytest.approx(0.050)
    assert s.loc["no_sync", "throughput_samples_s"] == pytest.approx(4 * 32 / 0.050)
    assert s.loc["no_sync", "scaling_efficiency"] == pytest.approx(1.0)
    ring = s.loc["ring"]
    assert ring["mean_iteration_s"] == pytest.approx(ring["mean_compute_s"] + ring["mean_comm_s"] + ring["mean_wait_s"])
    assert ring["throughput_samples_s"] == pytest.approx(4 * 32 / ring["mean_iteration_s"])
    assert ring["p50_iteration_s"] <= ring["p99_iteration_s"]
    assert (s["iterations"] == 5).all() and (s["status"] == "ok").all() and (s["workers"] == 4).all()


def test_compute_utilization_is_each_workers_compute_over_its_span() -> None:
    """no_sync computes all the time; a ring of 100 MB on 4 hosts at 100 Gbit/s under the ideal model
    adds its exposed communication, so a worker computes compute / (compute + comm + wait) of its time."""
    cfg = synthetic(star(4), [{"name": "no_sync"}, {"name": "ring"}], 100, compute_ms=50.0, iterations=5)
    s = simulate(cfg).summary.set_index("policy")
    assert s.loc["no_sync", "compute_utilization"] == pytest.approx(1.0)
    ring = s.loc["ring"]
    share = ring["mean_compute_s"] / ring["mean_iteration_s"]
    assert 0 < share < 1 and ring["compute_utilization"] == pytest.approx(share, rel=1e-9)
    assert ring["min_compute_utilization"] <= ring["compute_utilization"]


def test_compute_utilization_by_hand() -> None:
    """Rank 0 computes 3 s of its 4 s span, rank 1 1 s of its 4 s; rank 3, away from 1 s to 3 s (a departure),
    1 s of the 2 s it trained; a worker with no span is left out."""
    import pandas as pd

    from sim.results.tables import compute_utilization

    frame = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1, 2, 3, 3],
            "compute_s": [1.5, 1.5, 0.5, 0.5, 0.0, 0.5, 0.5],
            "start_s": [0.0, 2.0, 0.0, 2.0, 1.0, 0.0, 3.0],
            "end_s": [2.0, 4.0, 2.0, 4.0, 1.0, 1.0, 4.0],
        }
    )
    frame["iteration_s"] = frame["end_s"] - frame["start_s"]
    assert compute_utilization(frame) == {"compute_utilization": 0.5, "min_compute_utilization": 0.25}


@pytest.mark.parametrize(
    "cluster, policy, expected",
    [
        # ring all-reduce: each of p ranks sends 2(p-1)/p of n
        (star(6), {"name": "ring"}, 2 * 5 * 100 * MB),
        # one PS shard per host: (p-1)/p of n out of every worker per push, as much back per read;
        # 3 iterations push 3 times and read 2 times (step 0 starts from the initial parameters)
        (star(4), {"name": "ps"}, (3 + 2) / 3 * 3 * 100 * MB),
        # host-level hierarchical: only the g cross-host rings of n/g bytes leave hosts
        (star(3, gpus_per_host=4), {"name": "hierarchical", "level": "host"}, 2 * 2 * 100 * MB),
        (star(5), {"name": "no_sync"}, 0.0),
    ],
)
def test_network_bytes_match_the_algorithm(cluster: dict, policy: dict, expected: float) -> None:
    result = simulate(synthetic(cluster, [policy], 100, iterations=3))
    assert result.summary["network_bytes_per_iteration"].iloc[0] == pytest.approx(expected, rel=1e-6)


def test_ops_table_rows() -> None:
    result = simulate(
        synthetic(star(4), [{"name": "ring"}, {"name": "ps", "shards": 2}], 40, iterations=2, bucket_mb=10, layers=4)
    )
    ops = result.ops
    ring = ops[ops["policy"] == "ring"]
    assert (ring["kind"] == "AllReduce").all() and len(ring) == 2 * 4  # one row per collective
    assert (ring["group_size"] == 4).all() and (ring["rank"] == -1).all()
    ps = ops[ops["policy"] == "ps"]
    assert set(ps["kind"]) == {"push", "pull"}
    # buckets x ranks x (pushes in 2 steps + reads in step 1), each coupled over the 2 shards
    assert len(ps) == 4 * 4 * (2 + 1)
    assert (ps["count"] == 2).all() and ps["nbytes"].sum() == pytest.approx((2 + 1) * 4 * 40 * MB)
    assert (ps["duration_s"] > 0).all()


def test_trace_is_chrome_trace_format_and_capped(tmp_path: Path) -> None:
    cfg = synthetic(star(4), [{"name": "ring"}], 40, compute_ms=10.0, iterations=3)
    cfg["simulation"].update(trace=True, trace_max_events=30)
    result = simulate(cfg)
    result.write(tmp_path, plot=False)
    trace = json.loads((tmp_path / "trace.json").read_text())
    events = trace["traceEvents"]
    assert len(events) == 30
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {"ring: workers", "ring: communication"}
    spans = [e for e in events if e["ph"] == "X"]
    assert {"forward", "backward"} <= {e["name"] for e in spans}
    assert all(e["dur"] >= 0 and {"ts", "pid", "tid"} <= set(e) for e in spans)
    assert trace["otherData"]["dropped_events"] > 0


def test_write_is_repeatable_and_plot_exists(tmp_path: Path) -> None:
    result = simulate(synthetic(star(2), [{"name": "ring"}, {"name": "no_sync"}], 10, compute_ms=5.0, iterations=2))
    result.write(tmp_path)
    first = (tmp_path / "summary.csv").read_bytes()
    result.write(tmp_path)
    assert (tmp_path / "summary.csv").read_bytes() == first
    assert (tmp_path / "comparison.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob("*.tmp"))


def test_network_bytes_on_a_custom_topology() -> None:
    """Link kinds come from the wiring: host links count as NIC traffic in custom clusters too."""
    cluster = {
        "topology": "custom",
        "nodes": [{"name": "s", "kind": "switch"}] + [{"name": f"h{i}", "kind": "host"} for i in range(3)],
        "links": [{"a": f"h{i}", "b": "s"} for i in range(3)],
    }
    result = simulate(synthetic(cluster, [{"name": "ring"}], 100, iterations=2))
    assert result.summary["network_bytes_per_iteration"].iloc[0] == pytest.approx(2 * 2 * 100 * MB, rel=1e-6)


def test_result_read_gives_back_what_write_wrote(tmp_path: Path) -> None:
    import pandas as pd

    from sim.results import Result

    cfg = synthetic(star(4), [{"name": "ring"}, {"name": "asp", "placement": "colocated"}], 10.0, compute_ms=5.0)
    result = simulate({**cfg, "iterations": 3})
    result.write(tmp_path, plot=False)
    back = Result.read(tmp_path)
    assert back.config == result.config and back.runs == []
    for name in ("summary", "iterations", "ops", "links", "utilization", "staleness", "faults", "phases"):
        pd.testing.assert_frame_equal(getattr(back, name), pd.read_csv(tmp_path / f"{name}.csv"), obj=name)
        assert len(getattr(back, name)) == len(getattr(result, name)), name
    assert back.summary["mean_iteration_s"].tolist() == pytest.approx(result.summary["mean_iteration_s"].tolist())
    with pytest.raises(FileNotFoundError, match="not the folder of a syncsim run"):
        Result.read(tmp_path / "nowhere")


def test_result_read_takes_gzipped_tables(tmp_path: Path) -> None:
    import gzip
    import shutil

    import pandas as pd

    from sim.results import Result

    cfg = synthetic(star(4), [{"name": "ring"}], 10.0, compute_ms=5.0)
    simulate({**cfg, "iterations": 3}).write(tmp_path / "plain", plot=False)
    shutil.copytree(tmp_path / "plain", tmp_path / "packed")
    for name in ("summary", "ops", "utilization"):
        table = tmp_path / "packed" / f"{name}.csv"
        with table.open("rb") as src, gzip.open(table.with_suffix(".csv.gz"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        table.unlink()
    plain, packed = Result.read(tmp_path / "plain"), Result.read(tmp_path / "packed")
    for name in ("summary", "ops", "utilization", "iterations"):
        pd.testing.assert_frame_equal(getattr(packed, name), getattr(plain, name), obj=name)


def test_every_run_figure_names_its_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.results.plots

    titles: dict[str, str] = {}

    def capture(fig, path, close=True):  # type: ignore[no-untyped-def]
        titles[Path(path).name] = fig._suptitle.get_text() if fig._suptitle else ""

    monkeypatch.setattr(sim.results.plots, "save_figure", capture)
    cfg = synthetic(star(4), [{"name": "ring"}, {"name": "asp", "placement": "colocated"}], 10.0, compute_ms=5.0)
    result = simulate({**cfg, "iterations": 3, "name": "named-run"})
    files = result.plot(tmp_path, ("png", "svg"))
    assert sorted(titles) == sorted(f.name for f in files) and len(files) == 6  # comparison, utilization, staleness
    assert set(titles.values()) == {"config: named-run"}
