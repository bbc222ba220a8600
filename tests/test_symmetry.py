"""Host symmetry (sim/engine/symmetry.py): one host simulated gives every table the general path gives,
and anything that makes hosts differ runs the general path."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pytest

from sim.api import simulate
from sim.engine.symmetry import HostImages, expand_iterations, expand_ops
from sim.results.tables import ITERATION_FIELDS, OP_FIELDS

TABLES = ("summary", "iterations", "ops", "links", "utilization", "phases", "memory")
WALL = ("wall_s", "events", "flows", "recomputes")
# Link bytes and utilisation integrate rates between events, and the general path has more events (the
# other hosts' local flows start and end): the same sums, added in other pieces.
RTOL = 1e-9

SYNTHETIC = {"model": "synthetic", "gradient_mb": 24.0, "compute_ms": 6.0, "synthetic_layers": 6, "bucket_mb": 5.0}
BOTH = [{"name": "ring"}, {"name": "hierarchical"}]


def config(cluster: dict[str, Any], **extra: Any) -> dict[str, Any]:
    data = {
        "name": "symmetry",
        "seed": 3,
        "iterations": 3,
        "cluster": {"gpu": "A100", "nic_gbps": 100, **cluster},
        "workload": dict(SYNTHETIC),
        "policies": BOTH,
        "simulation": {"trace": False},
    }
    for key, value in extra.items():
        if key == "workload" and "model" in value:  # another model: none of the synthetic one's keys
            data[key] = value
        elif isinstance(value, dict):
            data.setdefault(key, {}).update(value)
        else:
            data[key] = value
    return data


def tables(data: dict[str, Any], symmetry: str) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    data = copy.deepcopy(data)
    data["simulation"]["host_symmetry"] = symmetry
    result = simulate(data)
    out = {}
    for name in TABLES:
        frame = getattr(result, name)
        if frame is not None:
            out[name] = frame.drop(columns=[c for c in frame.columns if any(w in c for w in WALL)])
    return out, result.decisions


EXACT = ("iterations", "ops", "phases", "memory")  # times and counts: to the last bit


def assert_same(general: pd.DataFrame, symmetric: pd.DataFrame, name: str) -> None:
    """Equal rows in the same order: text, integers and the EXACT tables exactly, other floats to RTOL."""
    assert list(general.columns) == list(symmetric.columns), name
    assert len(general) == len(symmetric), f"{name}: {len(general)} rows against {len(symmetric)}"
    if name in EXACT:
        pd.testing.assert_frame_equal(symmetric, general, check_exact=True, obj=name)
        return
    for column in general.columns:
        a, b = general[column].to_numpy(), symmetric[column].to_numpy()
        if a.dtype.kind == "f":
            np.testing.assert_allclose(b, a, rtol=RTOL, atol=0, equal_nan=True, err_msg=f"{name}.{column}")
        else:
            assert (a == b).all(), f"{name}.{column} differs"


def symmetry_rows(decisions: pd.DataFrame) -> list[str]:
    return decisions.loc[decisions["setting"] == "simulation.host_symmetry", "value"].tolist()


CASES = {
    "two_tier, oversubscribed, NCCL": config(
        {"topology": "two_tier", "racks": 2, "hosts_per_rack": 3, "gpus_per_host": 4, "uplink_gbps": 100}
    ),
    "two_tier, ideal network": config(
        {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 4, "uplink_gbps": 200},
        simulation={"network_model": "ideal"},
    ),
    # PCIe GPUs: a host's local flows and its ranks' cross-host flows share the GPU-host links
    "star, PCIe V100, bf16 wire, accumulation": config(
        {"topology": "star", "hosts": 3, "gpus_per_host": 2, "gpu": "V100", "nic_gbps": 25},
        workload={"accumulation_steps": 2, "optimizer_ms": 1.0},
        policies=[{"name": "ring", "wire": "bf16"}, {"name": "hierarchical", "level": "host"}],
    ),
    "fat_tree": config(
        {
            "topology": "fat_tree",
            "pods": 2,
            "racks_per_pod": 2,
            "hosts_per_rack": 2,
            "gpus_per_host": 2,
            "tor_oversubscription": 2.0,
        }
    ),  # fmt: skip
    "rail_optimized, 2 NICs a host": config(
        {"topology": "rail_optimized", "rail_groups": 2, "hosts_per_group": 2, "gpus_per_host": 4, "nics_per_host": 2}
    ),
    "FSDP full, grad_op and hybrid by host": config(
        {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 4, "uplink_gbps": 200},
        policies=[
            {"name": "fsdp"},
            {"name": "fsdp", "strategy": "grad_op", "label": "zero2"},
            {"name": "fsdp", "strategy": "hybrid", "shard_group": "host", "label": "hsdp"},
        ],
    ),
    # local ops (projections, orthogonalization) between the all-reduces of every bucket
    "PowerSGD": config(
        {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 4, "uplink_gbps": 100},
        policies=[{"name": "powersgd", "rank": 4, "warmup_steps": 1}],
        iterations=4,
    ),
    "BERT-large buckets, H100": config(
        {
            "topology": "two_tier",
            "racks": 2,
            "hosts_per_rack": 2,
            "gpus_per_host": 8,
            "gpu": "H100",
            "nic_gbps": 400,
            "nics_per_host": 8,
        },
        workload={"model": "bert_large", "batch_size": 32, "precision": "bf16"},
        iterations=2,
    ),  # fmt: skip
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_host_gives_every_table_of_the_general_path(case: str) -> None:
    general, general_decisions = tables(CASES[case], "off")
    symmetric, decisions = tables(CASES[case], "auto")
    policies = len(CASES[case]["policies"])
    assert symmetry_rows(decisions) == ["one host"] * policies  # the fast path did run
    assert symmetry_rows(general_decisions) == ["every rank"] * policies
    assert set(general) == set(symmetric)
    for name in general:
        assert_same(general[name], symmetric[name], name)


FALLBACKS = {
    "compute jitter": ({"workload": {"compute_jitter": 0.1}}, "compute jitter"),
    "a slow worker": ({"faults": {"slow_workers": [{"ranks": [5], "compute_factor": 1.5}]}}, "faults"),
    "scattered placement": ({"cluster": {"placement": "scattered"}}, "placement"),
    "stepwise collectives": ({"simulation": {"network_model": "ideal", "collective_model": "stepwise"}}, "stepwise"),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_what_makes_hosts_differ_runs_every_rank(case: str) -> None:
    change, why = FALLBACKS[case]
    data = config({"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 2}, iterations=2)
    for key, value in change.items():
        data.setdefault(key, {}).update(value)
    decisions = simulate(data).decisions
    rows = decisions[decisions["setting"] == "simulation.host_symmetry"]
    assert rows["value"].tolist() == ["every rank", "every rank"]
    assert all(why in text for text in rows["why"])


def test_policies_whose_hosts_differ_run_every_rank() -> None:
    data = config(
        {"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 2},
        iterations=2,
        policies=[
            {"name": "ps"},
            {"name": "hierarchical", "level": "rack"},
            {"name": "ds_sync"},
            {"name": "fsdp", "strategy": "hybrid", "shard_group": "rack", "label": "hsdp"},
        ],
    )
    decisions = simulate(data).decisions
    rows = decisions[decisions["setting"] == "simulation.host_symmetry"]
    assert rows["value"].tolist() == ["every rank"] * 4
    assert all("does not run the same program on every host" in text for text in rows["why"])


def test_every_rank_starts_its_slice_slowed_when_a_collective_launches_at_that_instant() -> None:
    """Under the NCCL model a collective's kernels slow the backward slices that begin when it launches.
    Ranks in lockstep reach it at one instant; which of them SimPy handles last must not matter."""
    data = config({"topology": "two_tier", "racks": 2, "hosts_per_rack": 2, "gpus_per_host": 4}, iterations=2)
    data["policies"] = [{"name": "ring"}]
    iterations = tables(data, "off")[0]["iterations"]
    for column in ("compute_end_s", "compute_s", "wait_s", "end_s"):
        per_step = iterations.groupby("iteration")[column].nunique()
        assert (per_step == 1).all(), column


def frame(rows: list[tuple], fields: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(fields))


def test_iteration_rows_are_copied_to_every_host_with_ranks_shifted() -> None:
    images = HostImages(hosts=3, per_host=2)
    rows = [(step, rank, 0.0, 0.0, 0.0, 0.0, 1.0 + step + rank / 10, 0.5, 0.0, 0) for step in (1, 0) for rank in (0, 1)]
    out = expand_iterations(frame(rows, ITERATION_FIELDS), images)
    assert out["rank"].tolist() == [0, 1, 2, 3, 4, 5] * 2
    assert out["iteration"].tolist() == [0] * 6 + [1] * 6
    # rank 5 is position 1 on host 2: position 1's times
    assert out.loc[(out["iteration"] == 1) & (out["rank"] == 5), "end_s"].item() == 2.1


def test_op_rows_of_host_local_groups_get_their_images_ids_after_their_own() -> None:
    images = HostImages(hosts=3, per_host=4, image_gids={0})
    base = ("AllReduce", 0, 4, -1, 1, 8.0, 0.0, 0.0, 1.0, 8.0, float("nan"), "", "ring", "simple", 2)
    rows = [
        (0, -1, *base[:1], 0, *base[2:]),  # host 0's local group: ids 0, 1, 2 on hosts 0, 1, 2
        (0, -1, *base[:1], 3, *base[2:]),  # a group across hosts: once
        (0, 1, "push", -1, *base[2:]),  # rank 1's own op: ranks 1, 5, 9
    ]
    out = expand_ops(frame(rows, OP_FIELDS), images)
    assert out["group"].tolist() == [0, 1, 2, 3, -1, -1, -1]
    assert out["rank"].tolist() == [-1, -1, -1, -1, 1, 5, 9]
