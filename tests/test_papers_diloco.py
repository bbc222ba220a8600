"""INTELLECT-1 (arXiv 2412.01152) and OpenDiLoCo (arXiv 2407.07852) as `configs/papers/` models them: the
simulated outer all-reduce is the ring closed form on the link figures each config takes from the reports, the
report's compute utilization is the share of time not communicating (as syncsim's `compute_utilization`), and
the published figures against the simulated ones (docs/cross_datacenter.md has the table and why they differ)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import GBPS, US

from sim.api import simulate
from sim.catalog.gpus import get_gpu
from sim.experiments.diloco_closed_form import Network, all_reduce_s, ring_latency

PAPERS = Path(__file__).parent.parent / "configs" / "papers"
# INTELLECT-1, Table 2: median all-reduce time (s) and compute utilization (%) per setting; 100 inner steps take
# 38 min in every setting
INTELLECT1 = {
    "intellect1_usa": (103.0, 95.7),
    "intellect1_usa_europe": (382.0, 85.6),
    "intellect1_global": (469.0, 83.0),
}
INNER_S = 38 * 60
OPENDILOCO = (90.0, 95.0)  # OpenDiLoCo's abstract: 90-95% compute utilization across continents
# Each config's slowest ring step, worked by hand from its YAML: (ranks, payload bytes on the wire, the hop's
# bandwidth in Gb/s, its path latency in s, values in the payload). The path is host -> region switch ->
# border -> WAN -> border -> switch -> host: two GPU-to-host hops of 1 us, two links of link_latency_us, and
# RTT/2 of the WAN link.
INT8 = 1e10 + math.ceil(1e10 / 2**20) * 4  # 10e9 int8 values and one fp32 scale per 2^20 of them
SLOWEST_STEP = {
    # US east -> west at 4 Gb/s, 60 ms
    "intellect1_usa": (14, INT8, 4.0, 2 * US + 2 * 5e-3 + 0.030, 1e10),
    # US west -> Europe: 0.5 Gb/s, 140 ms (the slowest link and the longest round trip on the ring)
    "intellect1_usa_europe": (14, INT8, 0.5, 2 * US + 2 * 5e-3 + 0.070, 1e10),
    # Asia -> US east: 0.5 Gb/s, 200 ms (every continental hop runs at 0.5 Gb/s; this one waits longest)
    "intellect1_global": (14, INT8, 0.5, 2 * US + 2 * 5e-3 + 0.100, 1e10),
    # fp16 payload, US b -> Finland: 0.1 Gb/s, 110 ms, default 5 us links
    "opendiloco_global": (4, 2.2e9, 0.1, 2 * US + 2 * 5 * US + 0.055, 1.1e9),
}


def run(name: str) -> tuple[float, float, float]:
    """The config's outer all-reduce time (s), its compute utilization (%) and its compute time (s) of one
    outer round."""
    config: dict[str, Any] = yaml.safe_load((PAPERS / f"{name}.yaml").read_text())
    config["simulation"]["trace"] = False
    result = simulate(config)
    row = result.summary.iloc[0]
    assert row["status"] == "ok", row["status"]
    (seconds,) = (result.ops["finished_s"] - result.ops["launched_s"])[result.ops["rank"] == -1]
    compute = config["workload"]["compute_ms"] / 1e3 * config["iterations"]
    return float(seconds), 100 * float(row["compute_utilization"]), compute


@pytest.mark.parametrize("name", INTELLECT1)
def test_published_utilization_is_the_share_of_time_not_communicating(name: str) -> None:
    """The report's utilization follows from its own columns as 38 min / (38 min + all-reduce), the quantity
    syncsim reports for a blocking outer step; so the report and syncsim mean the same thing by it."""
    seconds, utilization = INTELLECT1[name]
    assert 100 * INNER_S / (INNER_S + seconds) == pytest.approx(utilization, abs=0.1)


@pytest.mark.parametrize("name", SLOWEST_STEP)
def test_the_configs_all_reduce_is_the_ring_on_their_link_figures(name: str) -> None:
    """Each config does what its comments say: the outer all-reduce is the ring closed form, 2(k-1) steps each
    paced by the slowest hop, and utilization is compute over compute plus that all-reduce."""
    ranks, nbytes, gbps, hop, values = SLOWEST_STEP[name]
    # each member casts its fp32 tensor to the wire type before the ring and back after it, one memory-bound
    # pass each (sim/engine/wire_costs.py): read one form, write the other at the H100's 3.35 TB/s
    casts = 2 * (values * 4 + nbytes) / (get_gpu("H100").memory_bandwidth_gbs * 1e9)
    expected = all_reduce_s(nbytes, ranks, Network(gbps * GBPS, ring_latency(ranks, hop))) + casts
    seconds, utilization, compute = run(name)
    assert seconds == pytest.approx(expected, rel=1e-6)
    # the outer step's local arithmetic counts as compute: 10 fp32 passes over the model (anchor - parameters
    # 3, the outer sgd with momentum 5, parameters = anchor 2; sim/engine/local_op_costs.py)
    compute += 10 * 4 * values / (get_gpu("H100").memory_bandwidth_gbs * 1e9)
    assert utilization == pytest.approx(100 * compute / (compute + expected), rel=1e-6)


@pytest.mark.xfail(
    strict=True,
    reason="the reports' link figures (4 Gb/s in the USA, 0.5 Gb/s between continents; OpenDiLoCo's 0.1 Gb/s "
    "inferred from INTELLECT-1's '40x') give 38/299/300 s against the published 103/382/469 s and 88.4% against "
    "90-95%: docs/cross_datacenter.md; no constant is fitted to these rows",
)
@pytest.mark.parametrize("name", [*INTELLECT1, "opendiloco_global"])
def test_published_figures_within_issue_46s_tolerances(name: str) -> None:
    """Median all-reduce within 15% and utilization within 2 points of INTELLECT-1's Table 2; OpenDiLoCo's
    utilization inside its published 90-95%."""
    seconds, utilization, _ = run(name)
    if name == "opendiloco_global":
        assert OPENDILOCO[0] <= utilization <= OPENDILOCO[1]
        return
    published_s, published_utilization = INTELLECT1[name]
    assert seconds == pytest.approx(published_s, rel=0.15)
    assert utilization == pytest.approx(published_utilization, abs=2.0)
