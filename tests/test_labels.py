"""Figure words: labels with units for columns and config paths, log-spacing detection, link names."""

from __future__ import annotations

import pytest

from sim.results.labels import label, link_names, log_spaced, value_label


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("throughput_samples_s", "Throughput (samples/s)"),  # from the table
        ("cluster.uplink_gbps", "Uplink bandwidth (Gbit/s)"),
        ("mean_wait_s", "Waiting per iteration (s)"),
        ("faults.stragglers.0.delay_ms", "Delay (ms)"),  # derived: the last part, its suffix as the unit
        ("cluster.link_bandwidth_gbps", "Link bandwidth (Gbit/s)"),
        ("numerics.lr", "Lr"),
        ("seed", "Seed"),
    ],
)
def test_columns_and_config_paths_read_as_words_with_units(name: str, text: str) -> None:
    assert label(name) == text


def test_a_legend_value_says_its_axis_and_unit() -> None:
    assert value_label("cluster.uplink_gbps", 12.5) == "uplink bandwidth: 12.5 Gbit/s"
    assert value_label("cluster.placement", "packed") == "rank placement: packed"


@pytest.mark.parametrize(
    ("values", "log"),
    [
        ([100, 25, 12.5, 6.25], True),  # a bandwidth sweep: halvings
        ([1, 10, 100, 1000], True),
        ([10, 25, 100], True),
        ([10, 20, 30, 40], False),  # even steps
        ([1, 10, 20, 30], False),  # mostly even
        ([5, 50], False),  # two values say nothing about spacing
        ([0, 1, 100], False),  # a zero has no logarithm
        ([2, 4, 8], False),  # spans less than a factor of 10
    ],
)
def test_log_spacing_is_detected(values: list[float], log: bool) -> None:
    assert log_spaced(values) is log


def test_link_names_pair_directions_and_join_shared_ends() -> None:
    assert link_names(["tor0->core0", "core0->tor0", "tor1->core0", "core0->tor1"]) == "tor0, tor1 ↔ core0"
    assert link_names(["core0->tor0", "tor0->core0"]) == "core0 ↔ tor0"  # a lone pair: as first seen
    assert link_names(["tor0->core0", "core0->tor1"]) == "tor0 → core0 → tor1"  # one route
    eight = [f"tor{i}->core0" for i in range(8)] + [f"core0->tor{i}" for i in range(8)]
    assert link_names(eight) == "tor0, tor1 … tor7 (8) ↔ core0"
    assert link_names(["a->b", "c->d", "e->f", "g->h", "i->j"]) == "a → b; c → d; e → f (+2 more)"
