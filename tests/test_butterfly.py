"""The butterfly all-reduce (sim/engine/butterfly.py, `AllReduce(algorithm="butterfly")`) against closed forms
derived by hand: on a star, where every member's NIC carries its p - 1 parts each way; across datacenters, where
every pair has a WAN link of its own. The ring stays as it was; the checks and the NCCL model refuse what they
should."""

from __future__ import annotations

import pytest
import simpy
from helpers import GBPS, US, star, synthetic

from policies.ops import AllReduce, Group
from sim.api import simulate
from sim.cluster.routing import Router
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.collectives import CollectiveRunner
from sim.engine.op_checks import OpValidator
from sim.errors import PolicyError
from sim.network.flows import Network

MB = 1e6
ALPHA = 12 * US  # the test star's path: GPU -> host 1 us, host -> switch 5 us, and back down
B = 25 * GBPS  # the test star's NIC
MODELS = ["pipelined", "stepwise"]


def run_op(op: AllReduce, cluster: dict, model: str) -> float:
    """Seconds `op` takes alone on `cluster`."""
    built = build_cluster(parse_config(synthetic(cluster, [{"name": "ring"}])).cluster)
    env = simpy.Environment()
    net = Network(env, built.capacity, built.latency)
    done = CollectiveRunner(env, net, Router(built), built.rank_gpus, model).run(op).done
    env.run()
    assert done.processed
    return env.now


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("p", [2, 3, 8])
def test_on_a_star_each_phase_is_one_latency_and_p_minus_one_parts_through_a_nic(p: int, model: str) -> None:
    """Scatter: each member sends its p - 1 other parts of n/p at once, sharing its NIC's B, so they end after
    (p - 1) n/p / B, one path latency later delivered; each member also receives p - 1 parts, one from each
    other member, over its NIC's downlink at the same B. The gather is the same exchange in reverse:
    2 (alpha + (p - 1) n / (p B))."""
    n = 64 * MB
    expected = 2 * (ALPHA + (p - 1) / p * n / B)
    op = AllReduce(Group.of(range(p)), n, algorithm="butterfly")
    assert run_op(op, star(p), model) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_each_nic_carries_the_rings_bytes_out_and_in(model: str) -> None:
    """Per member 2 (p - 1) n/p bytes leave by its NIC and as many arrive (its p - 1 parts out and the others'
    copies of its own part in, then the reduced part out and the other owners' in); 2 (p - 1) n on the wire
    in all, as for the ring."""
    n, p = 8 * MB, 4
    config = synthetic(star(p), [{"name": "custom_policies:ButterflyBuckets"}], n / MB, model=model)
    result = simulate(config)
    assert not result.errors
    links = result.links.set_index("link")["bytes"]
    for h in range(p):
        assert links[f"h{h}->switch"] == pytest.approx(2 * (p - 1) / p * n, rel=1e-12)
        assert links[f"switch->h{h}"] == pytest.approx(2 * (p - 1) / p * n, rel=1e-12)
    assert result.ops["wire_bytes"].tolist() == pytest.approx([2 * (p - 1) * n], rel=1e-12)


# four datacenters of one host, every pair joined by its own 1 Gb/s WAN link of its own round trip
RTTS_MS = {("a", "b"): 20, ("a", "c"): 40, ("a", "d"): 120, ("b", "c"): 60, ("b", "d"): 80, ("c", "d"): 100}
WAN = 1 * GBPS
NIC_US, INTRA_US = 5.0, 1.0  # link_latency_us below, and the default intra_host_latency_us


def four_datacenters() -> dict:
    return {
        "topology": "multi_datacenter",
        "gpus_per_host": 1,
        "nic_gbps": 10,
        "link_latency_us": NIC_US,
        "datacenters": [{"name": name, "topology": "star", "hosts": 1} for name in "abcd"],
        "wan": {
            "bandwidth_gbps": 1,
            "rtt_ms": 50,
            "links": [{"a": a, "b": b, "rtt_ms": rtt} for (a, b), rtt in RTTS_MS.items()],
        },
    }


def path_latency(rtt_ms: float) -> float:
    """GPU -> host -> switch (-> border, no latency) -> WAN -> switch -> host -> GPU, one way."""
    return 2 * INTRA_US * US + 2 * NIC_US * US + rtt_ms / 2e3


@pytest.mark.parametrize("model", MODELS)
def test_across_datacenters_each_phase_is_one_part_over_a_pairs_own_wan_link(model: str) -> None:
    """Each member's three parts go over three different WAN links at 1 Gb/s each (its NIC has 10): each phase
    ends n/p / W after it starts, delivered the pair's path latency later, and the longest pair paces both
    phases: 2 (max latency + (n/p) / W). The ring would take 2 (p - 1) steps of n/p over one link each."""
    n, p = 40 * MB, 4
    expected = 2 * (path_latency(max(RTTS_MS.values())) + n / p / WAN)
    op = AllReduce(Group.of(range(p)), n, algorithm="butterfly")
    assert run_op(op, four_datacenters(), model) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_the_ring_is_the_default_and_unchanged(model: str) -> None:
    """`ring` is the default algorithm, and the ring all-reduce keeps its closed form: 2 (p - 1) steps of one
    path latency and n/p over a NIC (a star), or over the ring's slowest WAN hop (pipelined across datacenters:
    a -> b -> c -> d -> a, whose longest round trip is d -> a's 120 ms)."""
    n, p = 40 * MB, 4
    group = Group.of(range(p))
    assert AllReduce(group, n) == AllReduce(group, n, algorithm="ring")
    assert run_op(AllReduce(group, n), star(p), model) == pytest.approx(2 * (p - 1) * (ALPHA + n / p / B), rel=1e-9)
    if model == "pipelined":  # stepwise steps each wait their own hop's latency: no single closed form here
        hop = path_latency(max(RTTS_MS[("a", "b")], RTTS_MS[("b", "c")], RTTS_MS[("c", "d")], RTTS_MS[("a", "d")]))
        assert run_op(AllReduce(group, n), four_datacenters(), model) == pytest.approx(
            2 * (p - 1) * (hop + n / p / WAN), rel=1e-9
        )


def test_an_unknown_algorithm_is_refused_naming_the_allowed_ones() -> None:
    checks = OpValidator("p", 4, 0)
    group = Group.of(range(4))
    checks.check(0, 0, AllReduce(group, 1.0, algorithm="butterfly"))
    with pytest.raises(PolicyError, match=r"at step 3: unknown algorithm; allowed: ring, butterfly$"):
        checks.check(0, 3, AllReduce(group, 1.0, algorithm="tree"))


def test_the_nccl_model_refuses_a_butterfly() -> None:
    """NCCL has no butterfly all-reduce: the NCCL model fails the run naming the algorithm it allows."""
    config = synthetic(star(4), [{"name": "custom_policies:ButterflyBuckets"}], 8.0)
    config["simulation"]["network_model"] = "nccl"
    error = simulate(config).errors["butterfly_buckets"]
    assert "algorithm 'butterfly' has no NCCL form; under simulation.network_model nccl allowed: ring" in error
