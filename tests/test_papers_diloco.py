"""INTELLECT-1 (arXiv 2412.01152) and OpenDiLoCo (arXiv 2407.07852) as `configs/papers/` models them: the
simulated outer all-reduce is the closed form of its algorithm on the link figures each config takes from the
reports (for INTELLECT-1 one ring per layer group, as PRIME runs it, and the outer step on the host's CPU; for
OpenDiLoCo hivemind's butterfly), the report's
compute utilization is the share of time not communicating (as syncsim's `compute_utilization`), and the
published figures against the simulated ones (docs/cross_datacenter.md has the table and why they differ)."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
from helpers import GBPS, US

from policies.diloco import DiLoCo
from policies.ops import AllGather, AllReduce, Group, ReduceScatter
from policies.registry import add_search_folder, resolve
from sim.api import simulate
from sim.catalog.gpus import get_gpu
from sim.config import load_config
from sim.errors import ConfigError
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


def int8_bytes(values: float) -> float:
    """Wire bytes of int8 values with one fp32 scale per 2^20 of them."""
    return values + math.ceil(values / 2**20) * 4


def fp16_bytes(values: float) -> float:
    """Wire bytes of fp16 values."""
    return 2 * values


# Each config's slowest ring step, worked by hand from its YAML: (ranks, values in the model, the hop's bandwidth
# in Gb/s, its path latency in s, the wire's bytes for v values, the rings the outer average is cut into). The path
# is host -> region switch -> border -> WAN -> border -> switch -> host: two GPU-to-host hops of 1 us, two links of
# link_latency_us, and RTT/2 of the WAN link.
GROUPS = 44  # PRIME's rings for its 10B Llama-3: the embedding, 42 layers, the norm with the output head
SLOWEST_STEP = {
    # US east -> west at 4 Gb/s, 60 ms
    "intellect1_usa": (14, 1e10, 4.0, 2 * US + 2 * 5e-3 + 0.030, int8_bytes, GROUPS),
    # US west -> Europe: 0.5 Gb/s, 140 ms (the slowest link and the longest round trip on the ring)
    "intellect1_usa_europe": (14, 1e10, 0.5, 2 * US + 2 * 5e-3 + 0.070, int8_bytes, GROUPS),
    # the ring of the report's Figure 2, US west -> east -> Europe -> Asia -> west: every continental hop runs at
    # 0.5 Gb/s, Europe -> Asia (160 ms) waits longest
    "intellect1_global": (14, 1e10, 0.5, 2 * US + 2 * 5e-3 + 0.080, int8_bytes, GROUPS),
    # fp16 payload, one all-reduce of the whole model, a butterfly (BUTTERFLY): every pair of workers has its own
    # 0.1 Gb/s WAN link; the longest pair latency is a US state -> Finland, 110 ms RTT, default 5 us links
    "opendiloco_global": (4, 1.1e9, 0.1, 2 * US + 2 * 5 * US + 0.055, fp16_bytes, 1),
}
BUTTERFLY = {"opendiloco_global"}  # configs whose outer all-reduce is hivemind's butterfly (hivemind_diloco.py)
BOTH = ("butterfly", "ring")
# Every hop of each INTELLECT-1 config's ring, worked by hand from its YAML as above: (one-way path latency in s,
# bandwidth in Gb/s), for replaying PRIME's own ring schedule on them (sim/experiments/prime_ring.py). Inside a
# region: 2 x 1 us + 2 x 5 ms at the NIC's 4 Gb/s; across regions, + RTT/2 at the WAN link's rate.
INSIDE = (2 * US + 2 * 5e-3, 4.0)


def across(rtt_ms: float, gbps: float) -> tuple[float, float]:
    return (2 * US + 2 * 5e-3 + rtt_ms / 2e3, gbps)


HOPS = {
    "intellect1_usa": [INSIDE] * 6 + [across(60, 4)] + [INSIDE] * 6 + [across(60, 4)],
    "intellect1_usa_europe": [INSIDE] * 4
    + [across(60, 4)]
    + [INSIDE] * 4
    + [across(140, 0.5)]
    + [INSIDE] * 3
    + [across(90, 0.5)],
    "intellect1_global": [INSIDE] * 3
    + [across(60, 4)]
    + [INSIDE] * 3
    + [across(90, 0.5)]
    + [INSIDE] * 2
    + [across(160, 0.5)]
    + [INSIDE] * 2
    + [across(120, 0.5)],
}
# the INTELLECT-1 configs' host_memory_gbs: the outer step's 10 fp32 passes over the model in the 7.5 s middle of
# the report's 5-10 s of CPU outer step (section 3.2); OpenDiLoCo's outer step stays on the GPU
HOST_BYTES_PER_S = 53.3e9


def run(name: str) -> tuple[float, float, float]:
    """The config's outer all-reduce time (s, its rings one after the other), its compute utilization (%) and
    its compute time (s) of one outer round."""
    config = load_config(PAPERS / f"{name}.yaml")  # from its file: the plug-in policy beside it resolves
    config = config.model_copy(update={"simulation": config.simulation.model_copy(update={"trace": False})})
    result = simulate(config)
    row = result.summary.iloc[0]
    assert row["status"] == "ok", row["status"]
    rings = result.ops[result.ops["rank"] == -1]
    assert len(rings) == SLOWEST_STEP[name][5]
    seconds = float((rings["finished_s"] - rings["launched_s"]).sum())
    compute = config.workload.compute_ms / 1e3 * config.iterations
    return seconds, 100 * float(row["compute_utilization"]), compute


def outer_step_s(name: str) -> float:
    """The outer step's local arithmetic: 10 fp32 passes over the model (anchor - parameters 3, the outer sgd
    with momentum 5, parameters = anchor 2; sim/engine/local_op_costs.py), on the host for INTELLECT-1."""
    values = SLOWEST_STEP[name][1]
    rate = get_gpu("H100").memory_bandwidth_gbs * 1e9 if name == "opendiloco_global" else HOST_BYTES_PER_S
    return 10 * 4 * values / rate


@pytest.mark.parametrize("name", INTELLECT1)
def test_published_utilization_is_the_share_of_time_not_communicating(name: str) -> None:
    """The report's utilization follows from its own columns as 38 min / (38 min + all-reduce), the quantity
    syncsim reports for a blocking outer step; so the report and syncsim mean the same thing by it."""
    seconds, utilization = INTELLECT1[name]
    assert 100 * INNER_S / (INNER_S + seconds) == pytest.approx(utilization, abs=0.1)


def butterfly_s(nbytes: float, members: int, pair_bandwidth: float, latency: float) -> float:
    """A butterfly all-reduce of `nbytes` where every pair of members has a link of its own (`pair_bandwidth`
    each way) that binds: the scatter sends each owner its n/p part from every other member, each part over its
    own pair's link, so it ends one path latency after n/p / W; the gather sends each reduced part back the same
    way. A member's receive side takes p - 1 parts at once, one per link, at the same rate as it sends them."""
    return 2 * (latency + nbytes / members / pair_bandwidth)


@pytest.mark.parametrize("name", SLOWEST_STEP)
def test_the_configs_all_reduce_is_its_closed_form_on_their_link_figures(name: str) -> None:
    """Each config does what its comments say: the outer average is `groups` rings one after the other, each
    of 2(k-1) steps paced by the slowest hop, on its share of the model (OpenDiLoCo: one butterfly, two rounds
    of the longest pair latency and of a quarter of the model over one pair's link); utilization is compute
    (with the outer step's arithmetic) over compute plus those all-reduces."""
    ranks, values, gbps, hop, wire, groups = SLOWEST_STEP[name]
    part = values / groups
    # each member casts its part to the wire type before the all-reduce and back after it, one memory-bound pass
    # each on the GPU (sim/engine/wire_costs.py): read one form, write the other at the H100's 3.35 TB/s
    casts = 2 * (part * 4 + wire(part)) / (get_gpu("H100").memory_bandwidth_gbs * 1e9)
    if name in BUTTERFLY:  # 10 Gb/s NICs carry three 0.1 Gb/s pair flows: the WAN links bind
        one = butterfly_s(wire(part), ranks, gbps * GBPS, hop) + casts
    else:
        one = all_reduce_s(wire(part), ranks, Network(gbps * GBPS, ring_latency(ranks, hop))) + casts
    expected = groups * one
    seconds, utilization, compute = run(name)
    assert seconds == pytest.approx(expected, rel=1e-6)
    compute += outer_step_s(name)
    assert utilization == pytest.approx(100 * compute / (compute + expected), rel=1e-6)


def test_prime_diloco_cuts_only_a_one_rank_replicas_average() -> None:
    """The plug-in's rings are the ring of all ranks; replicas of several ranks average 2-D, which it refuses
    to cut rather than ignore `groups`."""
    config = load_config(PAPERS / "intellect1_usa.yaml")
    entry = config.policies[0].model_dump() | {"replica": "datacenter"}
    bad = config.model_copy(update={"policies": [type(config.policies[0])(**entry)], "iterations": 2})
    with pytest.raises(ConfigError, match=r"policies\[0\]\.groups: 44 parts need replica: rank"):
        simulate(bad)


def test_hivemind_diloco_runs_only_the_average_all_reduce_as_its_algorithm() -> None:
    """The plug-in issues the built-in diloco's ops, its all-reduces with `algorithm` swapped in (the 2-D
    average's reduce-scatter and all-gather inside a replica stay rings); `algorithm: ring` is the built-in."""
    add_search_folder(PAPERS)
    plugin, ring = (resolve("hivemind_diloco:HivemindDiLoCo")(period=5, wire="fp16", algorithm=a) for a in BOTH)
    builtin = DiLoCo(period=5, wire="fp16")
    group, where = Group.of(range(4)), {"tensor": "outer_gradient"}
    for kind in (AllReduce, ReduceScatter, AllGather):
        ours, theirs = plugin._average_op(kind, group, 4e6, where), builtin._average_op(kind, group, 4e6, where)
        assert ring._average_op(kind, group, 4e6, where) == theirs
        assert ours == (replace(theirs, algorithm="butterfly") if kind is AllReduce else theirs)
    assert theirs.wire == "fp16" and theirs.elements == 1e6 and theirs.tensor == "outer_gradient"


def test_intellect1_within_issue_46s_tolerances() -> None:
    """Median all-reduce within 15% and utilization within 2 points of INTELLECT-1's Table 2. The report's
    all-reduce time is PRIME's whole outer step (train.py logs `all_reduce_step` around `diloco.step`), so the
    outer step's CPU arithmetic counts in it, and its utilization is 38 min over 38 min plus that time (the test
    above); syncsim's `compute_utilization` counts the outer step as compute instead (0.3 points higher here).
    Held out: no figure of any config was fitted to Table 2. Not robust: the round trips, which the report does
    not give, carry 23-51% of these times, and PRIME's own schedule replayed on the same links misses the USA
    and Global medians (docs/cross_datacenter.md)."""
    misses = []
    for name, (published_s, published_utilization) in INTELLECT1.items():
        seconds, _, _ = run(name)
        step = seconds + outer_step_s(name)
        utilization = 100 * INNER_S / (INNER_S + step)
        if abs(step / published_s - 1) > 0.15 or abs(utilization - published_utilization) > 2.0:
            misses.append(f"{name}: {step:.1f} s, {utilization:.2f}%")
    assert not misses, misses


@pytest.mark.xfail(
    strict=True,
    reason="with hivemind's butterfly all-reduce, OpenDiLoCo's inferred 0.1 Gb/s (INTELLECT-1's '40x') and inferred "
    "4.04 s inner step give 95.8%, above the published 90-95% (a ring gives 88.4%, below): docs/cross_datacenter.md; "
    "no constant is fitted to this row",
)
def test_opendiloco_within_its_published_utilization() -> None:
    """OpenDiLoCo's utilization inside its published 90-95%."""
    _, utilization, _ = run("opendiloco_global")
    assert OPENDILOCO[0] <= utilization <= OPENDILOCO[1]


@pytest.mark.parametrize("name", HOPS)
def test_the_hand_worked_hops_hold_the_slowest_step(name: str) -> None:
    """The hop lists used to replay PRIME's schedule describe the rings the configs run: k hops, the slowest
    latency and the narrowest bandwidth those of the step that paces syncsim's ring."""
    ranks, _, gbps, hop, _, _ = SLOWEST_STEP[name]
    hops = HOPS[name]
    assert len(hops) == ranks
    assert max(latency for latency, _ in hops) == pytest.approx(hop, rel=1e-12)
    assert min(bandwidth for _, bandwidth in hops) == gbps
