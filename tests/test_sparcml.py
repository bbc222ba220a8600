"""SparCML's split all-reduce (policies/sparcml.py) on the simulator against its closed form, computed
here from the drawn index sets: per message min(pairs, the owner's dense range), range ownership."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import GBPS, US, star, synthetic
from test_policies import BUCKET, program, view

from policies import ModelInfo, SettingError
from policies.ops import AllGather, AllToAll, Density, Group, SparseCoding
from policies.registry import create
from sim.api import prepare, simulate
from sim.compute.sparsity import IndexSets
from sim.config import parse_config

B = 25 * GBPS
ALPHA = 12 * US  # GPU-host-switch-host-GPU on the test star
TOLERANCE = 0.02
BV, BI = 4, 4  # bytes per value, per id


def test_sparcml_plans_a_split_all_reduce_over_ranges_with_a_dense_switch() -> None:
    policy = create("sparcml", {})
    policy.bind(view(2, 2, 2), ModelInfo(32e6, (8e6,) * 4, (False, False, True, False)))
    coding = SparseCoding("contiguous", "list", 4, dense_switch=True)
    world = Group.of(range(8))
    assert program(policy, "on_gradients", 0, 0, BUCKET) == [
        AllToAll(world, 8e6, density=Density.SPARSE, coding=coding),
        AllGather(world, 8e6, density=Density.SPARSE, coding=coding),
    ]


@pytest.mark.parametrize("settings, field", [({"index_bytes": 2}, "index_bytes"), ({"partition": "hash"}, "partition")])
def test_bad_settings_name_the_field(settings: dict, field: str) -> None:
    with pytest.raises(SettingError, match="allowed|should be") as err:
        create("sparcml", settings)
    assert err.value.field == field


def run(n: int, rows: int, d: float, seed: int = 0):  # type: ignore[no-untyped-def]
    raw = synthetic(star(n), [{"name": "sparcml"}], gradient_mb=rows * BV / 1e6, seed=seed)
    raw["workload"]["sparsity"] = {"topk": d}
    config = parse_config(raw)
    _, plan = prepare(config)
    sets = IndexSets(plan.layouts, config.seed)
    assert len(plan.layouts) == 1 and plan.layouts[0].segments[0].rows == rows
    drawn = [sets.rows(0, 0, 0, r) for r in range(n)]
    ops = simulate(config).ops
    ops = ops[ops["rank"] == -1].set_index("kind")
    return drawn, ops


def closed_form(drawn: list, n: int, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a2a[i, j] bytes i sends owner j, gather[j] bytes owner j sends each other rank, dense[j] True
    where owner j's gather goes dense). Owner j holds rows [ceil(j M / n), ceil((j+1) M / n))."""
    bounds = [-(-j * rows // n) for j in range(n + 1)]
    span = np.diff(bounds)
    count = np.array([[np.count_nonzero((s >= bounds[j]) & (s < bounds[j + 1])) for j in range(n)] for s in drawn])
    union = np.unique(np.concatenate(drawn))
    held = np.array([np.count_nonzero((union >= bounds[j]) & (union < bounds[j + 1])) for j in range(n)])
    a2a = np.minimum(count * (BV + BI), span * BV).astype(float)
    np.fill_diagonal(a2a, 0.0)
    gather = np.minimum(held * (BV + BI), span * BV).astype(float)
    return a2a, gather, held * (BV + BI) >= span * BV


@pytest.mark.parametrize("d, gather_dense", [(0.01, False), (0.2, True)])
def test_wire_bytes_and_times_match_the_closed_form(d: float, gather_dense: bool) -> None:
    """n = 4, M = 2M rows: at d = 1% (D = 3.9%) both phases move pairs; at d = 20% (D = 59% > 1/2 =
    b_v / (b_v + b_i)) the all-gather moves every owner's range dense, the split still pairs."""
    n, rows = 4, 2_000_000
    drawn, ops = run(n, rows, d)
    a2a, gather, dense = closed_form(drawn, n, rows)
    assert dense.all() == gather_dense and dense.any() == gather_dense
    assert ops.loc["AllToAll", "wire_bytes"] == pytest.approx(a2a.sum(), rel=1e-12)
    assert ops.loc["AllGather", "wire_bytes"] == pytest.approx((n - 1) * gather.sum(), rel=1e-12)
    if gather_dense:
        assert ops.loc["AllGather", "wire_bytes"] == (n - 1) * rows * BV  # every range, values only
    busiest = max(a2a.sum(axis=0).max(), a2a.sum(axis=1).max())
    assert ops.loc["AllToAll", "duration_s"] == pytest.approx(ALPHA + busiest / B, rel=TOLERANCE)
    received = gather.sum() - gather  # owner j receives the others' ranges
    busiest = max((n - 1) * gather.max(), received.max())
    assert ops.loc["AllGather", "duration_s"] == pytest.approx(ALPHA + busiest / B, rel=TOLERANCE)


def test_the_dense_switch_is_taken_owner_by_owner_exactly_at_the_crossover() -> None:
    """d = 15.9%, n = 4: D = 1 - (1 - d)^4 = 50.0%, right at b_v / (b_v + b_i). Drawn sets put some
    ranges above the crossover and some below: exactly those above move dense."""
    n, rows = 4, 400_000
    for seed in range(4):
        drawn, ops = run(n, rows, 0.159, seed=seed)
        a2a, gather, dense = closed_form(drawn, n, rows)
        if dense.any() and not dense.all():
            break
    else:
        pytest.fail("no seed drew ranges on both sides of the crossover")
    assert ops.loc["AllGather", "wire_bytes"] == pytest.approx((n - 1) * gather.sum(), rel=1e-12)
    union = len(np.unique(np.concatenate(drawn)))  # all pairs, or all dense: both cost more
    assert ops.loc["AllGather", "wire_bytes"] < (n - 1) * min(union * (BV + BI), rows * BV)


def test_at_full_density_sparcml_moves_ring_all_reduces_bytes() -> None:
    """d = 60%: every message is denser than 1/2, so both phases move dense ranges: 2 (n - 1) M b_v in
    all, a ring all-reduce's bytes (with 2 latencies instead of 2 (n - 1))."""
    n, rows = 4, 400_000
    _, ops = run(n, rows, 0.6)
    assert ops.wire_bytes.sum() == 2 * (n - 1) * rows * BV


def test_contiguous_ranges_are_load_imbalanced_under_skew_where_zens_hash_is_not() -> None:
    raw = synthetic(star(8), [{"name": "sparcml"}, {"name": "zen"}], gradient_mb=64)
    raw["workload"]["sparsity"] = {"lookups": 20_000, "embedding_dim": 16, "zipf_s": 1.1, "hot_rows": "first"}
    ops = simulate(parse_config(raw)).ops
    a2a = ops[(ops["rank"] == -1) & (ops.kind == "AllToAll")].set_index("policy").imbalance
    assert a2a["zen"] < 1.1 < 3 < a2a["sparcml"]
