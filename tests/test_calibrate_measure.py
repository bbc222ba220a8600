"""real/calibrate on a live gloo group: two processes on 127.0.0.1 pretending to be two hosts in two
racks. Checks the measurement rows' shape and plausibility, and that `calibrate` fits a valid config.

Every call takes the minimum over repeats (`statistic="min"`): the test shares a two-core machine
with other work, and scheduling stalls of milliseconds (which only ever add time) must not bend the
curves or the fitted line."""

from __future__ import annotations

import pickle
import socket
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")
pytest.importorskip("sklearn")

HOSTS = ("hostA", "hostB")
RACKS = {"hostA": "r0", "hostB": "r1"}
SIZES = (8, 1 << 12, 1 << 16, 1 << 20, 1 << 24)
COLL_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 24)
OPS = ("all_reduce", "reduce_scatter", "all_gather")
BATCH = 32
REPEATS = 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out: str) -> None:
    from real.calibrate import calibrate
    from sim.config.numerics import NumericsConfig
    from sim.numerics.tasks import Task

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        task = Task(NumericsConfig(model="mlp", hidden=[64]), seed=0)
        t0 = time.perf_counter()
        report = calibrate(
            rank,
            world,
            HOSTS,
            RACKS,
            task,
            sizes=SIZES,
            repeats=REPEATS,
            uplink_bytes=1 << 24,
            collective_sizes=COLL_SIZES,
            collective_ops=OPS,
            batch=BATCH,
            statistic="min",
        )
        seconds = time.perf_counter() - t0
        Path(out, f"rank{rank}.pkl").write_bytes(pickle.dumps((report, task.size, seconds)))
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, int, float]:
    out = tmp_path_factory.mktemp("calibrate")
    t0 = time.perf_counter()
    mp.spawn(_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    elapsed = time.perf_counter() - t0
    report1, _, _ = pickle.loads((out / "rank1.pkl").read_bytes())
    assert report1 is None  # the report lives on rank 0
    report, size, seconds = pickle.loads((out / "rank0.pkl").read_bytes())
    print(f"\ncalibrate: {seconds:.2f} s of measuring, {elapsed:.2f} s with process start-up")
    return report, size, elapsed


@pytest.mark.slow
def test_measurements_have_the_right_shape_and_grow_with_size(measured) -> None:
    report, _, elapsed = measured
    assert elapsed < 30
    m = report.measurements
    assert [(p.src_host, p.dst_host, p.nbytes) for p in m.pairs] == [
        (a, b, n) for a, b in [("hostA", "hostB"), ("hostB", "hostA")] for n in SIZES
    ]
    assert all(0 < p.seconds < p.round_trip_s < 1.0 for p in m.pairs)
    for k in range(2):
        t = [p.seconds for p in m.pairs[k * len(SIZES) : (k + 1) * len(SIZES)]]
        assert t[-1] > 2 * t[0] and t[-1] == max(t)  # 16 MB takes clearly longer than 8 B
    (u0, u1) = m.uplinks
    assert (u0.rack, u1.rack) == ("r0", "r1")
    assert all(u.senders == u.receivers == 1 and u.nbytes == 1 << 24 and u.seconds > 0 for u in (u0, u1))
    assert [(c.op, c.nbytes) for c in m.collectives] == [(op, n) for op in OPS for n in COLL_SIZES]
    assert all(c.ranks == 2 and c.seconds > 0 for c in m.collectives)
    for op in OPS:
        t = [c.seconds for c in m.collectives if c.op == op]
        assert t[-1] > 2 * t[0] and t[-1] == max(t)
    assert sorted(c.rank for c in m.computes) == [0, 1]
    assert all(c.batch == BATCH and 0 < c.seconds < 1.0 and c.jitter >= 0 for c in m.computes)


@pytest.mark.slow
def test_calibrate_fits_a_valid_config_on_loopback(measured) -> None:
    from sim.config import parse_config

    report, size, _ = measured
    c = report.cluster
    assert (c["topology"], c["racks"], c["hosts_per_rack"], c["gpus_per_host"]) == ("two_tier", 2, 1, 1)
    assert 0.1 < report.nic.value * 8e-9 < 1000  # loopback TCP: Gbit/s-scale, finite
    assert 0 < report.latency.value < 5e-3
    assert [pt.nbytes for pt in report.collective.points] == list(COLL_SIZES)
    assert report.collective.efficiency.value > 0 and report.folded
    assert report.rack_mismatch is None  # one pair cannot show racks: a note, not a mismatch
    for egress in report.uplink.per_rack.values():  # one sender: its rack's egress is one pair's bandwidth
        assert 1 / 3 < egress / report.nic.value < 3  # (loose: other work shares this machine's two cores)
    w = report.workload
    assert w["gradient_mb"] == pytest.approx(size * 4 / 1e6) and w["batch_size"] == BATCH and w["compute_ms"] > 0
    config = parse_config({"name": "loopback", "policies": [{"name": "ring"}], "cluster": c, "workload": w})
    assert config.cluster.nic_gbps == c["nic_gbps"]
    print("\n" + report.summary())


def test_egress_matching_spreads_senders_over_the_other_racks() -> None:
    from real.calibrate.measure import egress_matching

    racks = {"r0": ["a", "b"], "r1": ["c", "d"], "r2": ["e"]}
    assert egress_matching(racks, "r0") == {"a": "c", "b": "e"}  # one receiver in each other rack
    assert egress_matching(racks, "r1") == {"c": "e", "d": "a"}
    assert egress_matching(racks, "r2") == {"e": "a"}
    assert egress_matching({"r0": ["a", "b", "c"], "r1": ["d"]}, "r0") == {"a": "d", "b": "d", "c": "d"}
    assert egress_matching({"r0": ["a"]}, "r0") == {}


def test_compute_without_a_process_group_times_this_process() -> None:
    from real.calibrate.measure import compute, summarise
    from sim.config.numerics import NumericsConfig
    from sim.numerics.tasks import Task

    task = Task(NumericsConfig(model="logreg"), seed=0)
    (row,) = compute(task, 16, 3)
    assert (row.rank, row.batch) == (0, 16) and 0 < row.seconds < 1.0 and row.jitter >= 0
    assert summarise([3.0, 1.0, 2.0, 10.0], "median") == 2.5 and summarise([3.0, 1.0, 2.0], "min") == 1.0
    with pytest.raises(ValueError, match="batch: 100000 exceeds"):
        compute(task, 100_000, 1)
    assert summarise([3.0, 1.0, 2.0], "mean") == 2.0
    with pytest.raises(ValueError, match="statistic: unknown 'mode'"):
        compute(task, 16, 1, statistic="mode")
