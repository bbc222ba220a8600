"""The network transports (sim/nccl/transports.py): their figures pinned by hand from the plugins' code and
NCCL's tuning.cc, their hooks in the tuner, the row shapes and the engine, and their fit."""

from __future__ import annotations

import dataclasses
import math

import pytest

from sim.catalog.gpus import get_gpu
from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.engine.nccl_plans import nccl_capacity, planner_for
from sim.errors import ConfigError
from sim.experiments.fidelity import row_config
from sim.nccl import fit as nccl_fit
from sim.nccl.fabrics import fabric_of
from sim.nccl.published import Published, row_shape, rows
from sim.nccl.transports import FITTED, TRANSPORTS, Transport, transport, transport_of_row
from sim.nccl.tuner import Shape, choose, predict

MiB, GiB = 2**20, 2**30


def figure(nbytes: float, nodes: int = 2, network: str = "infiniband", system: str = "", **fields: object) -> Published:
    base = Published(
        "inter_node", "all_reduce", "A100", nodes, 8, 4, 100.0, network, nbytes, 1.0, "auto", False, True, "", system
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


def shape(hosts: int = 2, nbytes: float = 1 * MiB) -> Shape:
    """An all-reduce of 8 GPUs per host, one ring hop between hosts per host, on fixed rates."""
    p = 8 * hosts
    return Shape("all_reduce", nbytes, p, hosts, 8, 25e9, hosts, 2e-6, 240e9, 25e9)


def test_names_are_validated_with_the_allowed_values() -> None:
    assert TRANSPORTS == ("infiniband", "roce", "efa", "efa_rdma", "tcpx", "tcpxo")
    with pytest.raises(ValueError, match="transport 'ib'; allowed: infiniband, roce, efa, efa_rdma, tcpx, tcpxo"):
        transport("ib")
    with pytest.raises(ValueError, match="allowed: infiniband"):
        fabric_of("A100", "slingshot")


def test_infiniband_and_roce_are_todays_model() -> None:
    """RoCE runs NCCL's own IB verbs code: no plugin latency, no extra step cost, 0.94 of the line rate
    (nccl-tests issue 290), every protocol and algorithm."""
    for name in ("infiniband", "roce"):
        t = transport(name)
        assert (t.plugin_us, t.step_us, t.nic_share) == (0.0, 0.0, 0.94)
        assert t.protocols == ("ll", "ll128", "simple") and t.algorithms == ("ring", "tree", "nvls", "nvls_tree")
    assert fabric_of("A100") is fabric_of("A100", "infiniband")  # the default fabric, untouched


def test_the_plugins_own_figures() -> None:
    """aws-ofi-nccl reports 75 us to NCCL on p4d/p5 (platform-aws.cpp) and forces Simple where EFA lacks
    in-order 128-byte delivery; the TCPX plugin reports 0 and Google's recipes set Ring and Simple."""
    efa, rdma, tcpx, tcpxo = (transport(n) for n in ("efa", "efa_rdma", "tcpx", "tcpxo"))
    assert (efa.plugin_us, rdma.plugin_us, tcpx.plugin_us, tcpxo.plugin_us) == (75.0, 75.0, 0.0, 0.0)
    assert efa.protocols == ("simple",) and efa.algorithms == ("ring", "tree", "nvls", "nvls_tree")
    assert rdma.protocols == ("ll", "ll128", "simple")
    assert tcpx.protocols == ("simple",) and tcpx.algorithms == ("ring",)
    assert tcpxo.protocols == ("ll128", "simple")


def test_a_network_step_costs_twice_for_simple_as_nccl_counts_the_plugins_latency() -> None:
    t = Transport("x", plugin_us=75.0, step_us=10.0)
    assert t.step_latency_us("simple") == (20.0, 150.0)
    assert t.step_latency_us("ll128") == (10.0, 75.0)
    assert t.step_latency_us("ll") == (10.0, 75.0)


@pytest.mark.parametrize(
    ("hosts", "algorithm", "path_steps", "tables_steps"), [(2, "ring", 4, 2), (4, "ring", 8, 6), (4, "tree", 4, 4)]
)
def test_the_transport_costs_once_per_network_step(
    hosts: int, algorithm: str, path_steps: int, tables_steps: int
) -> None:
    """An all-reduce's network steps, 8 GPUs per host: a ring's last chunk crosses every host boundary
    twice (2 x hosts: runRing of NCCL's kernels, `Shape.path_steps`) while NCCL's tables count
    2(nNodes - 1); a tree's are 2 log2(nNodes) in both. With the NIC share unchanged the rates are too,
    so a forced choice changes only by the transport's cost per step: step_us on the time per path
    step, plugin_us on NCCL's estimate per counted step, both twice for Simple."""
    ib = fabric_of("A100")
    other = fabric_of("A100", Transport("x", plugin_us=75.0, step_us=10.0))
    for protocol, times in (("simple", 2), ("ll128", 1)):
        base = predict(shape(hosts), ib, algorithm, protocol)
        over = predict(shape(hosts), other, algorithm, protocol)
        assert base is not None and over is not None
        assert over.latency_s - base.latency_s == pytest.approx(path_steps * times * 10.0e-6, rel=1e-9)
        assert over.tuner_seconds - base.tuner_seconds == pytest.approx(tables_steps * times * 75.0e-6, rel=1e-9)
        assert over.transfer_s == base.transfer_s


def test_inside_one_host_the_transport_changes_nothing() -> None:
    one_host = Shape("all_reduce", 1 * MiB, 8, 1, 8, 240e9)
    ib, tcpx = choose(one_host, fabric_of("A100")), choose(one_host, fabric_of("A100", "tcpx"))
    assert ib == tcpx and tcpx.protocol != "simple"  # NVLink's own pick stays: the plugin carries no byte


def test_efa_and_tcpx_run_only_what_their_plugins_allow() -> None:
    for n in (4 * 2**10, 1 * MiB, 64 * MiB):
        assert choose(shape(2, n), fabric_of("A100")).protocol != "simple" or n == 64 * MiB
        assert choose(shape(2, n), fabric_of("A100", "efa")).protocol == "simple"
        pick = choose(shape(4, n), fabric_of("A100", "tcpx"))
        assert (pick.algorithm, pick.protocol) == ("ring", "simple")
    # a forced protocol the transport refuses falls back to the ring with one it allows
    forced = choose(shape(2), fabric_of("A100", "efa"), "tree", "ll")
    assert (forced.algorithm, forced.protocol) == ("ring", "simple")


def test_a_rows_nics_reach_the_transports_share_of_their_line_rate() -> None:
    """4 x 100 Gb/s = 50 GB/s of line rate per host: InfiniBand moves 47 GB/s, EFA nic_share of it."""
    row = figure(64 * MiB)
    nvlink = get_gpu("A100").intra_host_gbps / 8
    assert row_shape(row, fabric_of("A100"), nvlink).net_rate == pytest.approx(47e9, rel=1e-12)
    share = transport("efa").nic_share
    assert row_shape(row, fabric_of("A100", "efa"), nvlink).net_rate == pytest.approx(50e9 * share, rel=1e-12)


def test_a_huge_ring_over_efa_runs_at_the_nics_share() -> None:
    """A 64 GiB ring all-reduce over 2 hosts: its bus bandwidth is the NICs' rate (the latency is
    microseconds against seconds of transfer)."""
    row = figure(64 * GiB, algorithm="ring", network="efa", system="AWS p4d.24xlarge")
    busbw, algorithm, protocol = nccl_fit.predict(row, fabric_of("A100", "efa"))
    line = 4 * 100 / 8  # GB/s per host
    assert (algorithm, protocol) == ("ring", "simple")
    assert busbw == pytest.approx(line * transport("efa").nic_share, rel=5e-3)
    assert busbw < line * transport("efa").nic_share


def test_the_config_key_reaches_the_engines_links_and_planner() -> None:
    config = row_config(figure(64 * MiB, network="efa", system="AWS p4d.24xlarge"))
    assert config["simulation"]["nccl"]["transport"] == "efa"
    parsed = parse_config(config)
    cluster = build_cluster(parsed.cluster)
    capacity = nccl_capacity(cluster, fabric_of("A100", parsed.simulation.nccl.transport))
    nic = [c for c, link in zip(capacity, cluster.links) if link.kind != "intra"]
    # a host's 4 NICs of 100 Gb/s are one 50 GB/s link to its switch (and back)
    assert nic and all(c == pytest.approx(4 * 100e9 / 8 * transport("efa").nic_share, rel=1e-12) for c in nic)
    from sim.cluster.routing import Router

    planner = planner_for(cluster, parsed.simulation, Router(cluster), capacity)
    assert planner.fabric.transport == transport("efa")
    config["simulation"]["nccl"]["transport"] = "omnipath"
    with pytest.raises((ConfigError, ValueError), match="transport"):
        parse_config(config)


def test_efa_runs_whose_source_forced_rings_are_read_as_rings() -> None:
    """AWS's DLAMI p3dn log sets NCCL_TREE_THRESHOLD=0 (NCCL 2.4 then never builds trees) and every
    version of aws-samples/aws-efa-eks's nccl-efa-tests.yaml sets NCCL_ALGO=RING: both run rings."""
    p3dn = [r for r in rows() if r.network == "efa" and "p3dn" in r.system]
    eks = [r for r in rows(heldout=True) if r.source.startswith("aws-samples/aws-efa-eks")]
    assert len(p3dn) == 3 and len(eks) == 9
    assert {r.algorithm for r in p3dn + eks} == {"ring"}


def test_rows_name_their_transport_by_network_and_instance() -> None:
    assert transport_of_row("efa", "AWS p4d.24xlarge (EFA)") == "efa"
    assert transport_of_row("efa", "AWS p3dn.24xlarge (1x100G EFA)") == "efa"
    assert transport_of_row("efa", "AWS p5.48xlarge (EFA)") == "efa_rdma"
    assert transport_of_row("efa", "AWS p5en.48xlarge (EFA)") == "efa_rdma"
    assert transport_of_row("gpudirect_tcpx", "GCP A3 High (a3-highgpu-8g)") == "tcpx"
    assert transport_of_row("gpudirect_tcpx", "GCP A3 Mega (a3-megagpu-8g)") == "tcpxo"
    assert transport_of_row("infiniband_sharp", "") == "infiniband"
    assert transport_of_row("roce", "") == "roce"
    assert transport_of_row("nvlink", "") == "infiniband"


def test_the_fitted_constants_are_physical() -> None:
    """A step's extra cost between 0 and half a millisecond (EFA's plugin tells NCCL 75-150 us); a NIC
    share above a fifth and at most the whole line rate."""
    for name in FITTED:
        t = transport(name)
        assert 0.0 <= t.step_us <= 500.0 and 0.2 <= t.nic_share <= 1.0
    # host TCP costs more per step than EFA's send/recv, and NIC offload (TCPXO) less than host TCP
    assert (
        transport("tcpx").step_us > transport("efa").step_us and transport("tcpxo").step_us < transport("tcpx").step_us
    )


def test_the_committed_constants_are_the_fit_to_each_transports_own_rows() -> None:
    figures = rows()
    for name in FITTED:
        fitted = nccl_fit.fit_transport(figures, name)
        assert (fitted.step_us, fitted.nic_share) == (transport(name).step_us, transport(name).nic_share), name


def test_the_fit_reads_no_row_of_another_transport() -> None:
    figures = rows()
    own = nccl_fit.transport_rows(figures, "tcpx")
    assert own and {r.transport for r in own} == {"tcpx"} and all(r.nodes > 1 and r.sized for r in own)
    wild = dataclasses.replace(own[0], network="efa", system="AWS p4d.24xlarge", busbw_gbs=1e-3)
    assert nccl_fit.fit_transport([*figures, wild], "tcpx") == nccl_fit.fit_transport(figures, "tcpx")
    with pytest.raises(ValueError, match="transport efa: 1 rows"):
        nccl_fit.fit_transport([wild], "efa")


def test_nothing_infinite_leaks_from_a_transport() -> None:
    for name in TRANSPORTS:
        pick = choose(shape(2), fabric_of("H100", name))
        assert math.isfinite(pick.seconds) and pick.seconds > 0


def test_a_training_run_pays_its_transport() -> None:
    """The whole simulator (sim.api.simulate): a 1 GiB gradient's all-reduce between 2 hosts is bound by
    the NICs, so an iteration over EFA takes about IB's share over EFA's (0.94 / nic_share) as long as
    over InfiniBand (microseconds of step costs and 1 ms of compute against tens of ms); RoCE runs
    NCCL's IB code, so exactly as long."""
    from sim.api import simulate

    def iteration_s(name: str) -> float:
        config = row_config(figure(1 * GiB))
        config["iterations"] = 2
        config["workload"]["gradient_mb"] = 1024.0
        config["simulation"]["nccl"]["transport"] = name
        return float(simulate(config).summary["mean_iteration_s"].iloc[0])

    ib = iteration_s("infiniband")
    assert iteration_s("efa") / ib == pytest.approx(0.94 / transport("efa").nic_share, rel=0.1)
    assert iteration_s("roce") == ib
