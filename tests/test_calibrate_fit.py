"""real/calibrate fitting, in-process, on synthetic measurements generated from known figures.

The generator follows the simulator's physics (docs/physics.md): a host pair's latency is
2·intra + 2·link within a rack and 2·intra + 4·link across, a single cross-rack flow gets
min(NIC, uplink), a rack's egress is min(senders·NIC, uplink) after a latency out and one back
(the ack), and the all-reduce is the ring's closed form, optionally slowed by a protocol
efficiency and a per-step overhead.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import GBPS, US, synthetic

from real.calibrate import (
    CalibrationError,
    CollectiveSample,
    ComputeSample,
    Measurements,
    PairSample,
    UplinkSample,
    calibrated_config,
    fit_report,
    write_calibrated_config,
)
from real.calibrate.figures import detect_racks, fit_line, fit_pairs
from sim.api import simulate
from sim.config import load_config, parse_config

SIZES = (8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22, 1 << 24)
COLL_SIZES = (1 << 12, 1 << 16, 1 << 20, 1 << 22, 1 << 24)
INTRA_US = 1.0
BASE = {"name": "calibrated", "iterations": 3, "policies": [{"name": "ring"}]}


def synth(
    racks: list[list[str]],
    *,
    nic_gbps: float = 25.0,
    uplink_gbps: float | None = None,
    link_us: float = 5.0,
    noise: float = 0.0,
    step_extra_us: float = 0.0,
    bw_efficiency: float = 1.0,
    compute_ms: float = 20.0,
    gpus_per_host: int = 1,
    seed: int = 0,
) -> Measurements:
    rng = np.random.default_rng(seed)

    def jitter() -> float:
        return float(1 + noise * rng.standard_normal()) if noise else 1.0

    rack_of = {h: i for i, r in enumerate(racks) for h in r}
    hosts = [h for r in racks for h in r]
    nic = nic_gbps * GBPS
    up = uplink_gbps * GBPS if uplink_gbps else np.inf
    same_a, cross_a = (2 * INTRA_US + 2 * link_us) * US, (2 * INTRA_US + 4 * link_us) * US
    pairs = []
    for a in hosts:
        for b in hosts:
            if a != b:
                same = rack_of[a] == rack_of[b]
                alpha, rate = (same_a, nic) if same else (cross_a, min(nic, up))
                for n in SIZES:
                    t = (alpha + n / rate) * jitter()
                    pairs.append(PairSample(a, b, n, t, 2 * t))
    uplinks = []
    for i, r in enumerate(racks):
        others = len(hosts) - len(r)
        if len(racks) > 1:
            agg = min(len(r) * nic, up, min(len(r), others) * nic)
            seconds = 2 * cross_a + len(r) * (1 << 24) / agg  # data out, ack back
            uplinks.append(UplinkSample(f"r{i}", len(r), min(len(r), others), 1 << 24, seconds))
    p = len(hosts) * gpus_per_host
    alpha = (cross_a if len(racks) > 1 else same_a) + step_extra_us * US
    ring_rate = min(nic, up) * bw_efficiency
    coll = [
        CollectiveSample("all_reduce", p, n, (2 * (p - 1) * alpha + 2 * (p - 1) / p * n / ring_rate) * jitter())
        for n in COLL_SIZES
    ]
    computes = [ComputeSample(k, 32, compute_ms * 1e-3 * jitter(), 0.03) for k in range(p)]
    rank_hosts = tuple(h for h in hosts for _ in range(gpus_per_host))
    host_racks = {h: f"r{rack_of[h]}" for h in hosts}
    return Measurements(rank_hosts, host_racks, tuple(pairs), tuple(uplinks), tuple(coll), tuple(computes), 4000, 32)


def racks_of(n_racks: int, per_rack: int) -> list[list[str]]:
    return [[f"h{r * per_rack + i}" for i in range(per_rack)] for r in range(n_racks)]


def test_line_fit_recovers_alpha_and_bandwidth_per_pair_under_noise() -> None:
    m = synth(racks_of(1, 3), nic_gbps=10, link_us=20, noise=0.02, seed=3)
    fits = fit_pairs(m.pairs)
    assert len(fits) == 6
    for f in fits:
        assert f.latency_s == pytest.approx(42 * US, rel=0.05)
        assert f.bytes_per_s == pytest.approx(10 * GBPS, rel=0.04)
        assert 0.005 < f.residual < 0.05  # the 2 % noise shows up, no more


def test_two_tier_oversubscribed_recovers_every_figure() -> None:
    m = synth(racks_of(4, 4), nic_gbps=25, uplink_gbps=10, noise=0.02, compute_ms=20, seed=1)
    r = fit_report(m, fold_efficiency=False)
    c = r.cluster
    assert (c["topology"], c["racks"], c["hosts_per_rack"], c["gpus_per_host"]) == ("two_tier", 4, 4, 1)
    assert c["nic_gbps"] == pytest.approx(25, rel=0.02)
    assert c["uplink_gbps"] == pytest.approx(10, rel=0.03)
    assert c["link_latency_us"] == pytest.approx(5, rel=0.05)
    assert r.cross_rack_latency.value == pytest.approx(22 * US, rel=0.05)
    assert r.uplink.oversubscription == pytest.approx(10, rel=0.03)
    assert r.rack_mismatch is None and not r.notes
    assert sorted(map(sorted, r.detected.groups)) == sorted(map(sorted, racks_of(4, 4)))
    assert r.collective.efficiency.value == pytest.approx(1.0, rel=0.03)
    assert r.compute.value == pytest.approx(0.020, rel=0.02)
    assert r.workload == {
        "model": "synthetic",
        "batch_size": 32,
        "gradient_mb": 0.004,
        "compute_ms": pytest.approx(20, rel=0.02),
        "compute_jitter": 0.03,
    }


def test_noisy_measurements_are_flagged() -> None:
    quiet = fit_report(synth(racks_of(1, 4), noise=0.02, seed=5))
    assert not quiet.notes
    noisy = fit_report(synth(racks_of(1, 4), noise=0.5, seed=5))
    assert any(n.startswith("pairs [") for n in noisy.notes)


def test_non_blocking_racks_give_no_uplink_and_no_false_mismatch() -> None:
    r = fit_report(synth(racks_of(2, 4), uplink_gbps=100, noise=0.01))
    assert "uplink_gbps" not in r.cluster and r.uplink.bytes_per_s is None
    assert r.uplink.oversubscription == 1.0
    assert len(r.detected.groups) == 1  # a single pair fills one NIC whatever the uplink
    assert r.rack_mismatch is None
    assert any("no rack structure" in n for n in r.notes)


def test_detects_racks_and_flags_a_mismatch() -> None:
    m = synth(racks_of(2, 2), uplink_gbps=5, noise=0.02)  # racks {h0,h1}, {h2,h3}
    detection = detect_racks(fit_pairs(m.pairs), m.hosts)
    assert sorted(map(sorted, detection.groups)) == [["h0", "h1"], ["h2", "h3"]]
    assert detection.gap_ratio == pytest.approx(5, rel=0.1) and detection.cliques
    wrong = Measurements(**{**m.__dict__, "host_racks": {"h0": "a", "h2": "a", "h1": "b", "h3": "b"}})
    r = fit_report(wrong)
    assert r.rack_mismatch is not None and "['h0', 'h1'], ['h2', 'h3']" in r.rack_mismatch
    unknown = fit_report(Measurements(**{**m.__dict__, "host_racks": None}))  # racks taken from the matrix
    assert unknown.racks == (("h0", "h1"), ("h2", "h3")) and unknown.cluster["racks"] == 2


def test_efficiency_is_one_when_measurements_equal_the_closed_form() -> None:
    r = fit_report(synth(racks_of(2, 3), uplink_gbps=10))
    c = r.collective
    assert [pt.efficiency for pt in c.points] == pytest.approx([1.0] * len(COLL_SIZES), rel=1e-9)
    assert c.efficiency.value == pytest.approx(1.0, rel=1e-9) and c.efficiency.residual < 1e-9
    assert c.bandwidth_efficiency == pytest.approx(1.0, rel=1e-6)
    assert c.step_latency_s == pytest.approx(22 * US, rel=1e-6)
    assert c.bytes_per_s == pytest.approx(10 * GBPS, rel=1e-9)  # the ring's bottleneck: one flow per uplink
    # folding an efficiency of 1 changes nothing
    assert r.cluster["nic_gbps"] == pytest.approx(25, rel=1e-6)
    assert r.cluster["link_latency_us"] == pytest.approx(5, rel=1e-6)


def test_slower_protocol_lowers_efficiency_and_folds_into_the_network() -> None:
    m = synth(racks_of(2, 2), uplink_gbps=10, step_extra_us=40, bw_efficiency=0.6)
    raw = fit_report(m, fold_efficiency=False)
    folded = fit_report(m)
    assert raw.collective.bandwidth_efficiency == pytest.approx(0.6, rel=1e-6)
    assert raw.collective.step_latency_s == pytest.approx(62 * US, rel=1e-6)
    effs = [pt.efficiency for pt in raw.collective.points]
    assert effs[0] == pytest.approx(22 / 62, rel=0.03)  # latency-bound end: 22 us of wire per 62 us step
    assert effs[-1] == pytest.approx(0.6, rel=0.01)  # bandwidth-bound end
    assert effs == sorted(effs) and effs[0] < raw.collective.efficiency.value < effs[-1]
    assert raw.cluster["nic_gbps"] == pytest.approx(25, rel=1e-6) and not raw.folded
    assert folded.folded
    assert folded.cluster["nic_gbps"] == pytest.approx(15, rel=1e-6)
    assert folded.cluster["uplink_gbps"] == pytest.approx(6, rel=1e-6)  # oversubscription 2·15/6 = 5 as raw
    assert folded.cluster["link_latency_us"] == pytest.approx(15, rel=1e-6)  # (62 - 2·1) / 4 hops


@pytest.mark.parametrize("nbytes", [1 << 22, 1 << 26])
def test_simulator_on_folded_config_reproduces_the_measured_all_reduce(nbytes: int) -> None:
    m = synth(racks_of(2, 2), uplink_gbps=10, step_extra_us=40, bw_efficiency=0.6)
    report = fit_report(m)
    p, alpha, rate = 4, 62 * US, 10 * GBPS * 0.6
    measured = 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / rate
    result = simulate(synthetic(report.cluster, [{"name": "ring"}], nbytes / 1e6))
    assert not result.errors
    assert float(result.summary["mean_iteration_s"].iloc[0]) == pytest.approx(measured, rel=0.01)


def test_one_rack_gives_a_star_and_multi_gpu_hosts_count_ranks() -> None:
    r = fit_report(synth(racks_of(1, 3), gpus_per_host=2, link_us=10))
    assert r.cluster["topology"] == "star" and r.cluster["hosts"] == 3 and r.cluster["gpus_per_host"] == 2
    assert r.uplink is None and r.collective.ranks == 6
    assert r.latency.value == pytest.approx(22 * US, rel=1e-6)


def test_calibrated_config_validates_and_round_trips(tmp_path) -> None:
    r = fit_report(synth(racks_of(2, 2), uplink_gbps=5, noise=0.02))
    base = {
        **BASE,
        "cluster": {"topology": "star", "hosts": 9, "gpu": "A100", "intra_host_latency_us": 3.0},
        "workload": {"model": "resnet50", "bucket_mb": 10},
    }
    data = calibrated_config(r, base)
    assert data["cluster"]["gpu"] == "A100" and "hosts" not in data["cluster"]
    assert data["cluster"]["intra_host_latency_us"] == 1.0  # the value link_latency_us was solved with
    assert data["workload"]["bucket_mb"] == 10 and data["workload"]["model"] == "synthetic"
    config = parse_config(data)
    assert config.cluster.topology == "two_tier" and config.cluster.uplink_gbps == pytest.approx(5, rel=0.03)
    path = write_calibrated_config(r, base, tmp_path / "cal" / "calibrated.yaml")
    text = path.read_text()
    assert text.startswith("# calibrated by real.calibrate\n")
    assert load_config(path) == config


def test_a_resolved_config_with_small_floats_writes_back_as_numbers(tmp_path) -> None:
    """The session passes the loaded config, every default filled in: adam's eps (1e-08) must come
    back a number, where YAML would read JSON's `1e-08` as a string and the config would not load."""
    base = load_config(Path(__file__).parent.parent / "configs" / "validate_2x2.yaml")
    assert base.numerics is not None and base.numerics.optimizer.eps == 1e-8
    path = write_calibrated_config(fit_report(synth(racks_of(2, 2), uplink_gbps=5)), base, tmp_path / "c.yaml")
    again = load_config(path)
    assert again.numerics == base.numerics and again.policies == base.policies


def test_report_keeps_the_raw_rows_as_flat_records() -> None:
    m = synth(racks_of(2, 2), uplink_gbps=5)
    rows = fit_report(m).rows()
    assert {k: len(v) for k, v in rows.items()} == {
        "pairs": 12 * len(SIZES),
        "uplinks": 2,
        "collectives": len(COLL_SIZES),
        "computes": 4,
    }
    assert rows["pairs"][0] == {"src_host": "h0", "dst_host": "h1", "nbytes": 8, **rows["pairs"][0]}
    assert set(rows["uplinks"][0]) == {"rack", "senders", "receivers", "nbytes", "seconds"}


def test_without_a_model_the_base_workload_stays() -> None:
    m = synth(racks_of(1, 2))
    r = fit_report(Measurements(**{**m.__dict__, "computes": (), "gradient_bytes": None, "batch": None}))
    assert r.workload is None and r.compute is None
    data = calibrated_config(r, {**BASE, "workload": {"model": "resnet50"}})
    assert parse_config(data).workload.model == "resnet50"
    with pytest.raises(ValueError, match="base_config.workload"):
        calibrated_config(r, BASE)


def test_errors_name_the_field() -> None:
    with pytest.raises(CalibrationError, match="sizes: need two distinct"):
        fit_line([1024, 1024], [1e-3, 1.1e-3])
    with pytest.raises(CalibrationError, match="do not grow"):
        fit_line([1, 1 << 20], [1e-3, 1e-4])
    m = synth([["h0", "h1"], ["h2"]])
    with pytest.raises(ValueError, match="host_racks: racks hold"):
        fit_report(m)
    uneven = Measurements(**{**synth(racks_of(1, 2)).__dict__, "rank_hosts": ("h0", "h0", "h1")})
    with pytest.raises(ValueError, match="rank_hosts: hosts run different numbers of ranks"):
        fit_report(uneven)
    with pytest.raises(CalibrationError, match="rank_hosts: one host"):
        fit_report(Measurements(("h0",), None))


def test_a_token_bucket_burst_does_not_pass_for_bandwidth() -> None:
    """tbf lets messages under its bucket (64 KiB here) through at line rate; gradients see the rate."""
    sizes = [8, 1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22]
    rate, line, bucket, alpha = 25e6, 1.25e9, 65536, 60e-6
    seconds = [alpha + min(n, bucket) / line + max(0, n - bucket) / rate for n in sizes]
    fit = fit_line(sizes, seconds)
    assert 1 / fit.slope == pytest.approx(rate, rel=0.03)
    assert fit.intercept == pytest.approx(alpha, rel=0.05)
