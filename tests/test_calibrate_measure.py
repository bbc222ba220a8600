"""real/calibrate on a live gloo group: two processes on 127.0.0.1 pretending to be two hosts in two
racks. Checks the measurement rows' shape and what holds whatever the load (every time positive and
finite, a one-way time half its round trip, the fitted config valid), and that `calibrate` fits a valid
config. Measured times, rates and their ratios are printed, never asserted: the test shares a two-core
machine with other work, whose stalls (which only ever add time) can push any of them past a bound.

Every call takes the minimum over repeats (`statistic="min"`), so the printed curves stay readable."""

from __future__ import annotations

import math
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
    report, _, _ = measured
    m = report.measurements
    assert [(p.src_host, p.dst_host, p.nbytes) for p in m.pairs] == [
        (a, b, n) for a, b in [("hostA", "hostB"), ("hostB", "hostA")] for n in SIZES
    ]
    assert all(0 < p.seconds < p.round_trip_s < math.inf for p in m.pairs)  # one way: half the round trip
    (u0, u1) = m.uplinks
    assert (u0.rack, u1.rack) == ("r0", "r1")
    assert all(u.senders == u.receivers == 1 and u.nbytes == 1 << 24 and 0 < u.seconds < math.inf for u in (u0, u1))
    assert [(c.op, c.nbytes) for c in m.collectives] == [(op, n) for op in OPS for n in COLL_SIZES]
    assert all(c.ranks == 2 and 0 < c.seconds < math.inf for c in m.collectives)
    assert sorted(c.rank for c in m.computes) == [0, 1]
    assert all(c.batch == BATCH and 0 < c.seconds < math.inf and c.jitter >= 0 for c in m.computes)
    # how the times grow with size: figures to read, not bounds (load only adds time, to any size)
    for k in range(2):
        t = [p.seconds for p in m.pairs[k * len(SIZES) : (k + 1) * len(SIZES)]]
        print(f"\npair {k}: " + ", ".join(f"{n:,} B {s * 1e6:,.0f} us" for n, s in zip(SIZES, t)))
    for op in OPS:
        t = [c.seconds for c in m.collectives if c.op == op]
        print(f"{op}: " + ", ".join(f"{n:,} B {s * 1e6:,.0f} us" for n, s in zip(COLL_SIZES, t)))


@pytest.mark.slow
def test_calibrate_fits_a_valid_config_on_loopback(measured) -> None:
    from sim.config import parse_config

    report, size, _ = measured
    c = report.cluster
    assert (c["topology"], c["racks"], c["hosts_per_rack"], c["gpus_per_host"]) == ("two_tier", 2, 1, 1)
    assert 0 < report.nic.value < math.inf and 0 < report.latency.value < math.inf
    assert [pt.nbytes for pt in report.collective.points] == list(COLL_SIZES)
    assert report.collective.efficiency.value > 0 and report.folded
    assert report.rack_mismatch is None  # one pair cannot show racks: a note, not a mismatch
    assert set(report.uplink.per_rack) == {"r0", "r1"}
    assert all(0 < egress < math.inf for egress in report.uplink.per_rack.values())
    # one sender: its rack's egress is one pair's bandwidth, so the ratio is near 1 on a quiet machine;
    # a figure, not a bound (0.328 was measured on a busy one)
    ratios = ", ".join(f"{rack} {egress / report.nic.value:.2f}" for rack, egress in report.uplink.per_rack.items())
    nic_gbps, latency_us = report.nic.value * 8e-9, report.latency.value * 1e6
    print(f"\nloopback: NIC {nic_gbps:.2f} Gbit/s, latency {latency_us:.0f} us, egress / NIC {ratios}")
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
    assert (row.rank, row.batch) == (0, 16) and 0 < row.seconds < math.inf and row.jitter >= 0
    assert summarise([3.0, 1.0, 2.0, 10.0], "median") == 2.5 and summarise([3.0, 1.0, 2.0], "min") == 1.0
    with pytest.raises(ValueError, match="batch: 100000 exceeds"):
        compute(task, 100_000, 1)
    assert summarise([3.0, 1.0, 2.0], "mean") == 2.0
    with pytest.raises(ValueError, match="statistic: unknown 'mode'"):
        compute(task, 16, 1, statistic="mode")
