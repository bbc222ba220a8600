"""The cost estimate's counts (sim/estimate/shape.py) against what `build_cluster` builds, for the
topologies counted by formula rather than by walking a config's lists."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import synthetic

from sim.cluster.topology import build_cluster
from sim.config import parse_config
from sim.estimate.shape import shape_of

FAT_TREE = {
    "topology": "fat_tree",
    "pods": 3,
    "racks_per_pod": 2,
    "hosts_per_rack": 3,
    "aggregation_switches": 2,
    "spine_switches": 4,
    "gpus_per_host": 2,
    "server_hosts": 2,
    "pod_oversubscription": 2.0,
}
RAILS = {
    "topology": "rail_optimized",
    "rail_groups": 2,
    "hosts_per_group": 3,
    "spine_switches": 2,
    "gpus_per_host": 8,
    "nics_per_host": 4,
    "server_hosts": 1,
}


@pytest.mark.parametrize("cluster", [FAT_TREE, RAILS], ids=["fat_tree", "rail_optimized"])
def test_counts_match_the_built_cluster(cluster: dict[str, Any]) -> None:
    config = parse_config(synthetic(cluster, [{"name": "ring"}]))
    built, shape = build_cluster(config.cluster), shape_of(config)
    assert shape.links == len(built.links)
    assert shape.workers == built.world_size
    assert shape.hosts == len(built.view.worker_hosts)
    assert shape.racks == len(built.view.racks)
    assert shape.server_hosts == len(built.view.server_hosts)
    assert shape.oversubscribed == (cluster is FAT_TREE)
