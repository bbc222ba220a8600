"""Dense all-reduce on oversubscribed racks under the NCCL model (sim/experiments/oversubscribed.py)
against the bytes each algorithm must move over the link that limits it, derived here by hand.

The cluster: 4 racks of 2 hosts (hosts 0-1, 2-3, 4-5, 6-7), one 100 Gb/s NIC per host, A100 NVLink
at 300 GB/s each way, rack uplinks of 100, 50 or 12.5 Gb/s.
"""

from __future__ import annotations

import pytest

from sim.experiments.oversubscribed import UPLINK_GBPS, Case, Outcome, run

GBPS = 1e9 / 8
NIC = 100 * GBPS
NVLINK = 300e9
NIC_EFFICIENCY = 0.94  # the share of a network link's line rate NCCL moves (NVIDIA/nccl-tests issue 290)
MIB = 2**20


def line_rate_seconds(case: Case) -> float:
    """The least time `case` can take: the bytes its algorithm puts on its busiest link each way, at
    that link's line rate, phase by phase."""
    n, g, p = case.nbytes, case.gpus, case.ranks
    uplink = UPLINK_GBPS[case.ratio] * GBPS
    if case.scheme == "ring":  # ranks packed host by host: each uplink and NIC carries one ring hop each way
        return 2 * (p - 1) / p * n / min(NIC, uplink)
    if case.scheme == "tree":
        # NCCL's first tree over 8 hosts: 1-2, 3-2, 2-4, 4-0, 5-6, 7-6, 6-4; the second its mirror (h -> 7-h):
        # 6-5, 4-5, 5-3, 3-7, 2-1, 0-1, 1-3. Edges leaving rack 1 (hosts 2, 3): 1-2, 2-4 and 5-3, 3-7, 2-1, 1-3;
        # rack 2 (hosts 4, 5): 2-4, 4-0, 5-6, 6-4 and 6-5, 5-3: six each, the most. Each edge carries half the
        # data each way, so those uplinks carry 3n each way; a host's NICs at most 4 edges, 2n; a GPU's
        # NVLink 2n (its chain's up and down passes).
        return max(3 * n / uplink, 2 * n / NIC, 2 * n / NVLINK if g > 1 else 0.0)
    if g > 1:  # hierarchical by host: each host's shard all-reduced by 8 one-GPU-per-host rings
        local = 2 * (g - 1) / g * n / NVLINK  # reduce-scatter and all-gather on each GPU's NVLink
        rings = g * 2 * 7 / 8 * (n / g)  # the 8 rings' hops on each uplink and NIC, each way
        return local + rings / min(NIC, uplink)
    # hierarchical by rack (2 hosts each): n/2 each way over each NIC to reduce-scatter and again to
    # all-gather; 2 rings of n/2 over the 4 racks, both crossing every uplink, one through each NIC
    rings_on_uplink, ring_on_nic = 2 * 2 * 3 / 4 * (n / 2), 2 * 3 / 4 * (n / 2)
    return 2 * (n / 2) / NIC + max(rings_on_uplink / uplink, ring_on_nic / NIC)


CASES = [
    Case(ratio, gpus, scheme, size * MIB)
    for ratio in UPLINK_GBPS
    for gpus in (1, 8)
    for scheme in ("ring", "tree", "hierarchical")
    for size in (1, 64, 256)
]


def _id(case: Case) -> str:
    return f"{case.ratio}-{case.gpus}gpu-{case.scheme}-{case.nbytes / MIB:g}MiB"


@pytest.fixture(scope="module")
def outcomes() -> dict[Case, Outcome]:
    return {case: run(case) for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_never_faster_than_its_bytes_at_line_rate(case: Case, outcomes: dict[Case, Outcome]) -> None:
    bound = line_rate_seconds(case)
    assert outcomes[case].seconds >= bound * (1 - 1e-9), f"{_id(case)}: {outcomes[case].seconds} s below {bound} s"


@pytest.mark.parametrize("case", [c for c in CASES if c.nbytes >= 64 * MIB], ids=_id)
def test_large_collectives_keep_the_bottleneck_busy(case: Case, outcomes: dict[Case, Outcome]) -> None:
    """Within 15% of the bytes at what NCCL's protocol reaches of the line rate, plus NCCL's own latency
    (its base and per-step figures): a model that idles a saturated uplink falls far outside."""
    o = outcomes[case]
    reference = line_rate_seconds(case) / (NIC_EFFICIENCY * o.efficiency) + o.nccl_latency_s
    assert o.seconds <= 1.15 * reference, f"{_id(case)}: {o.seconds * 1e3:.2f} ms, reference {reference * 1e3:.2f} ms"


@pytest.mark.parametrize("case", [c for c in CASES if c.nbytes >= 256 * MIB], ids=_id)
def test_the_limiting_link_is_busy_while_the_collective_crosses_racks(
    case: Case, outcomes: dict[Case, Outcome]
) -> None:
    o = outcomes[case]
    assert o.crossing_utilization >= 0.85, f"{_id(case)}: {o.crossing_link} busy {o.crossing_utilization:.1%}"
    assert "core" in o.crossing_link, f"{_id(case)}: the busiest link is {o.crossing_link}, not an uplink"


@pytest.mark.parametrize("ratio", list(UPLINK_GBPS))
def test_the_trees_load_the_uplinks_of_the_racks_holding_most_edges(ratio: str, outcomes: dict[Case, Outcome]) -> None:
    link = outcomes[Case(ratio, 8, "tree", 256 * MIB)].crossing_link
    assert link in {"tor1->core0", "tor2->core0", "core0->tor1", "core0->tor2"}, link


def test_nccls_pick_does_not_see_the_uplinks_but_its_time_does() -> None:
    """NCCL's topology search knows the hosts' NICs, not the rack uplinks behind them: on 16:1 racks it
    picks what it picks on non-blocking ones (two hosts' 100 Gb/s under each 200 Gb/s uplink), and
    that pick then runs on the slow uplinks."""
    case = Case("16:1", 8, "auto", 2**20)
    blind, open_racks = run(case), run(case, uplink_gbps=2 * 100.0)
    assert (blind.algorithm, blind.protocol) == (open_racks.algorithm, open_racks.protocol)
    assert blind.seconds > 2 * open_racks.seconds, (blind.seconds, open_racks.seconds)
