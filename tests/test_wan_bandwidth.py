"""`syncsim bandwidth` (sim/experiments/wan_bandwidth.py): the search against monotone functions whose
threshold is known, the bandwidth it finds for blocking Local SGD across two datacenters against the
closed form of docs/physics.md and docs/wan.md, the unreachable case, and bad arguments in one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import pandas as pd
import pytest
import yaml
from helpers import GBPS, US, synthetic

from sim.cli import main
from sim.errors import ConfigError, UsageError
from sim.experiments.wan_bandwidth import bandwidth_sweep, needed

MB = 1e6
NIC_GBPS, NIC_US, INTRA_US = 100.0, 5.0, 1.0  # the cluster below; intra_host_latency_us is the default 1
RTT = 0.010
C, N, H = 0.1, 100 * MB, 4  # compute per step (s), model bytes (fp32: gradient = parameters), period
TOL = 0.02


# ----------------------------------------------------------------------------- the search alone


def search(u: Any, target: float, lowest: float = 1e-3, highest: float = 1e6) -> tuple[Optional[float], dict]:
    seen: dict[float, float] = {}

    def probe(b: float) -> float:
        seen.setdefault(b, u(b))
        return seen[b]

    def bracket(t: float) -> tuple[Optional[float], Optional[float]]:
        hi = min((b for b, v in seen.items() if v >= t), default=None)
        lo = max((b for b, v in seen.items() if v < t and (hi is None or b < hi)), default=None)
        return lo, hi

    return needed(probe, target, TOL, lowest, highest, bracket, below=lambda t: 0.01), seen


@pytest.mark.parametrize("target", [0.3, 0.5, 0.9, 0.99])
def test_the_search_brackets_the_threshold_of_a_smooth_curve(target: float) -> None:
    # u = B / (B + 7): reaches u at B* = 7u / (1 - u)
    found, seen = search(lambda b: b / (b + 7.0), target)
    exact = 7.0 * target / (1 - target)
    assert found is not None and exact <= found <= exact * (1 + TOL)
    # 1/u is linear in 1/B: from the two ends (1e6 and the hint) one interpolation lands just over the
    # threshold and the next just under it
    assert len(seen) == 4


def test_the_search_ends_on_a_step_that_no_line_fits() -> None:
    # u jumps from 0.1 to 0.9 at 123.4: interpolation is useless, bisection must still close in
    found, seen = search(lambda b: 0.9 if b >= 123.4 else 0.1, 0.5)
    assert found is not None and 123.4 <= found <= 123.4 * (1 + TOL)
    widest = math.log2(math.log(1e9) / math.log(1 + TOL))  # bisections from the whole range
    assert len(seen) <= 3 * widest + 2


def test_a_target_above_the_curve_is_unreachable() -> None:
    assert search(lambda b: 0.8 * b / (b + 1), 0.85)[0] is None


# ----------------------------------------------------------------------------- closed form


def two_datacenters(rtt_s: float = RTT, **wan: Any) -> dict:
    """2 datacenters x 2 hosts x 1 GPU, star, ideal network; Local SGD with one replica per datacenter."""
    cluster = {
        "topology": "multi_datacenter",
        "gpus_per_host": 1,
        "nic_gbps": NIC_GBPS,
        "link_latency_us": NIC_US,
        "datacenters": [
            {"name": "east", "topology": "star", "hosts": 2},
            {"name": "west", "topology": "star", "hosts": 2},
        ],
        "wan": {"bandwidth_gbps": 1, "rtt_ms": rtt_s * 1e3, **wan},
    }
    policy = {"name": "local_sgd", "replica": "datacenter", "period": 1}  # period: set per H by the sweep
    config = synthetic(cluster, [policy], N / MB, compute_ms=C * 1e3)
    config["workload"]["precision"] = "fp32"  # parameters travel as fp32: n bytes, as the gradient
    return config


ALPHA_LAN = (2 * INTRA_US + 2 * NIC_US) * US  # GPU -> host -> switch -> host -> GPU
B_LAN = NIC_GBPS * GBPS


def period_seconds(bandwidth: float, rtt_s: float = RTT, flow_cap: float = math.inf) -> tuple[float, float]:
    """One period's compute H c and its other time, bandwidth B (bytes/s) on the WAN link.

    Each step all-reduces the gradient inside the replica (g = 2 ranks, one bucket ready at the end of
    backward): 2(g-1) alpha + 2(g-1)/g n / B_lan. After H steps the 2-D average: a reduce-scatter inside
    ((g-1) alpha + (g-1)/g n / B_lan), then each rank's n/g share all-reduced with its peer in the other
    datacenter, 2(2-1)(alpha_wan + n/g/2 / min(B/g, B_nic)) (the g rings' flows share the WAN link, one
    each per direction, and each has a NIC of its own; `flow_cap`: a flow's window ceiling), then an
    all-gather inside, as the reduce-scatter."""
    g = 2
    step = C + 2 * (g - 1) * ALPHA_LAN + 2 * (g - 1) / g * N / B_LAN
    inside = 2 * ((g - 1) * ALPHA_LAN + (g - 1) / g * N / B_LAN)
    across = 2 * (2 - 1) * (ALPHA_LAN + rtt_s / 2 + N / g / 2 / min(bandwidth / g, B_LAN, flow_cap))
    return H * C, H * step - H * C + inside + across


def closed_form_gbps(target: float) -> float:
    """u = H c / (H c + T(B)): the B at which it equals the target, where the WAN bounds the across flows
    (B/g < B_nic), so that T(B) = fixed + n/B."""
    compute, other = period_seconds(1e9)
    fixed = other - N / 1e9
    spare = compute / target - compute - fixed  # the time n / B may take
    assert N / spare / 2 < B_LAN  # the WAN, not the NIC, bounds each flow there
    return N / spare / GBPS


def test_the_bandwidth_found_for_blocking_local_sgd_matches_the_closed_form() -> None:
    targets = (0.5, 0.8)
    table = bandwidth_sweep(two_datacenters(), targets, [H], TOL)
    assert list(table["status"]) == ["ok", "ok"]
    for target, found, below in zip(targets, table["gbps"], table["lower_gbps"]):
        exact = closed_form_gbps(target)
        assert exact <= found * (1 + 1e-6) and found <= exact * (1 + TOL), (target, found, exact)
        assert below < exact <= found * (1 + 1e-6)  # the bracket holds the threshold
        compute, other = period_seconds(found * GBPS)
        assert compute / (compute + other) == pytest.approx(table.set_index("target").loc[target, "utilization"])


def test_a_target_past_the_round_trip_floor_is_unreachable_and_says_why() -> None:
    # at any bandwidth a period still takes H (c + the gradient's all-reduce) + the LAN phases + RTT, so
    # u stays under H c / that; with the round trip gone the same target is reached
    compute, floor = period_seconds(math.inf)
    ceiling = compute / (compute + floor)
    target = round(ceiling + 0.01, 3)
    assert period_seconds(math.inf, rtt_s=0)[1] < compute / target - compute  # reachable without the RTT
    table = bandwidth_sweep(two_datacenters(), [target], [H], TOL)
    status = table["status"].iloc[0]
    assert status.startswith("unreachable") and "round trip" in status, status
    assert math.isnan(table["gbps"].iloc[0])
    assert table["utilization"].iloc[0] == pytest.approx(ceiling, rel=1e-3)


def test_a_target_past_the_window_ceiling_is_unreachable_and_names_it() -> None:
    # 1 MB per 10 ms round trip: 100 MB/s (0.8 Gb/s) per flow whatever the link, so the WAN's two flows
    # move what 1.6 Gb/s would, short of the bandwidth a 50% utilization needs
    window = 1 * MB / RTT
    compute, floor = period_seconds(math.inf, flow_cap=window)
    ceiling = compute / (compute + floor)
    assert ceiling < 0.5 < compute / (compute + period_seconds(math.inf)[1])
    table = bandwidth_sweep(two_datacenters(connection_window_mb=1), [0.5], [H], TOL)
    status = table["status"].iloc[0]
    assert status.startswith("unreachable") and "window ceiling" in status and "0.8 Gb/s" in status, status
    assert table["utilization"].iloc[0] == pytest.approx(ceiling, rel=1e-3)


# ----------------------------------------------------------------------------- arguments and the command


@pytest.mark.parametrize(
    "targets, periods, flag",
    [([0.0], [4], "--targets"), ([1.0], [4], "--targets"), ([1.5], [4], "--targets"), ([0.5], [0], "--periods")],
)
def test_bad_arguments_are_refused_naming_the_flag(targets: list, periods: list, flag: str) -> None:
    with pytest.raises(UsageError, match=f"^{flag}: .*allowed"):
        bandwidth_sweep(two_datacenters(), targets, periods)


def test_a_config_without_a_wan_is_refused_naming_it() -> None:
    config = synthetic({"topology": "star", "hosts": 2}, [{"name": "ring"}])
    with pytest.raises(ConfigError, match=r"^cluster\.wan: .*multi_datacenter"):
        bandwidth_sweep(config)


@pytest.mark.parametrize(
    "argv, flag",
    [(["--targets", "1.2"], "--targets"), (["--targets", "0"], "--targets"), (["--periods", "0"], "--periods")],
)
def test_the_command_refuses_bad_flags_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(two_datacenters()))
    with pytest.raises(SystemExit) as stop:  # argparse's own exit, as every flag of a bad type
        main(["bandwidth", str(path), *argv, "--out", str(tmp_path / "out")])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0], err


def test_the_command_refuses_a_config_without_a_wan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(synthetic({"topology": "star", "hosts": 2}, [{"name": "ring"}])))
    assert main(["bandwidth", str(path), "--out", str(tmp_path / "out")]) == 2
    assert "cluster.wan:" in capsys.readouterr().err


def test_the_command_prints_the_table_and_writes_bandwidth_csv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(two_datacenters()))
    out = tmp_path / "out"
    assert main(["bandwidth", str(path), "--targets", "0.5", "--periods", str(H), "--out", str(out)]) == 0
    table = pd.read_csv(out / "bandwidth.csv")
    assert list(table[["policy", "period", "target", "status"]].itertuples(index=False, name=None)) == [
        ("local_sgd", H, 0.5, "ok")
    ]
    found = table["gbps"].iloc[0]
    assert f"{found:.3g}" in capsys.readouterr().out
    assert closed_form_gbps(0.5) <= found * (1 + 1e-6) <= closed_form_gbps(0.5) * (1 + TOL) * (1 + 1e-6)


def test_a_case_that_cannot_run_fails_alone_and_the_command_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # overlap_steps x fragments must stay below H: at H = 1 the streaming entry is refused, local_sgd runs
    config = two_datacenters()
    config["policies"].append({"name": "streaming_diloco", "fragments": 1, "overlap_steps": 1})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    assert main(["bandwidth", str(path), "--targets", "0.2", "--periods", "1", "--out", str(out)]) == 1
    table = pd.read_csv(out / "bandwidth.csv").set_index("policy")
    assert table.loc["local_sgd", "status"] == "ok"
    assert table.loc["streaming_diloco", "status"].startswith("failed: policies[1].overlap_steps: must be below H/P")
    assert "streaming_diloco H=1, 20%: failed: policies[1].overlap_steps" in capsys.readouterr().out
