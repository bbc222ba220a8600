"""The DGX setups scaling rows are simulated on (sim/experiments/scaling_setups.py), against the datasheets."""

from __future__ import annotations

import pytest

from sim.catalog.gpus import GPU_NAMES
from sim.experiments.scaling_setups import SYSTEMS, cluster_section, hosts_and_gpus, system_setup


def test_datasheet_figures() -> None:
    # (GPU, GPUs per host, compute NICs, Gbit/s each): DGX-1 4x EDR, DGX-2 8x EDR, DGX A100 8x HDR
    assert {name: (s.gpu, s.gpus_per_host, s.nics_per_host, s.nic_gbps) for name, s in SYSTEMS.items()} == {
        "DGX-1": ("V100", 8, 4, 100.0),
        "DGX-2": ("V100", 16, 8, 100.0),
        "DGX A100": ("A100", 8, 8, 200.0),
    }
    assert all(s.gpu in GPU_NAMES and s.citation for s in SYSTEMS.values())


def test_published_names_find_their_system() -> None:
    assert system_setup("DGX-2H 32GB") is SYSTEMS["DGX-2"]
    assert system_setup("DGX A100 40GB") is SYSTEMS["DGX A100"]
    with pytest.raises(ValueError, match="'DGX H100'.*known: DGX-1, DGX-2, DGX A100"):
        system_setup("DGX H100")


def test_hosts_and_gpus() -> None:
    assert hosts_and_gpus("DGX-1 16GB", 1, 4) == (1, 4)
    assert hosts_and_gpus("DGX-2H 32GB", 4, 64) == (4, 16)
    for nodes, gpus in ((2, 12), (1, 16), (3, 8), (0, 8)):  # partial nodes, an overfull host, uneven, none
        with pytest.raises(ValueError, match="gpus"):
            hosts_and_gpus("DGX-1 16GB", nodes, gpus)


def test_cluster_section() -> None:
    assert cluster_section("DGX A100 80GB", 4, 32) == {
        "topology": "star",
        "hosts": 4,
        "gpus_per_host": 8,
        "gpu": "A100",
        "nics_per_host": 8,
        "nic_gbps": 200.0,
    }
