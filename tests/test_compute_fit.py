"""The default compute model's fit to published throughputs and measured steps (sim/compute/fit.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.catalog.gpus import FITTED_GPUS, SAME_DIE, get_gpu
from sim.catalog.zoo import get_model
from sim.compute import fit as compute_fit
from sim.compute.fit import fit, flops_only_held_out, held_out, predict
from sim.compute.fit_rows import Row, fitted_rows, training_rows
from sim.compute.roofline import model_seconds

DOC = Path(__file__).resolve().parents[1] / "docs" / "compute_model.md"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return fitted_rows()


@pytest.fixture(scope="module")
def scored(rows: list[Row]) -> pd.DataFrame:
    return held_out(rows)


def test_the_shipped_constants_are_the_fit_to_the_bundled_figures(rows: list[Row]) -> None:
    for gpu, costs in fit(rows).items():
        shipped = get_gpu(gpu).costs
        for name in compute_fit.NAMES:
            assert getattr(shipped, name) == pytest.approx(getattr(costs, name), rel=0.01), (gpu, name)


def test_a_prediction_is_the_roofline_of_the_zoo_model_as_its_implementation_issued_it() -> None:
    gpu = get_gpu("V100")
    layers = get_model("vgg16").layers
    for implementation in ("eager", "tuned", "fused"):
        row = Row("vgg16", "V100", "fp16", 4, True, 1.0, "x", implementation=implementation)
        forward, backward = model_seconds(gpu, gpu.costs, layers, 4, "fp16", implementation)
        assert predict(row, gpu.costs) == pytest.approx(sum(forward) + sum(backward)), implementation
    eager = predict(Row("vgg16", "V100", "fp16", 4, True, 1.0, "x", implementation="eager"), gpu.costs)
    assert eager > predict(Row("vgg16", "V100", "fp16", 4, True, 1.0, "x"), gpu.costs)  # the CPU binds batch 4
    forward, _ = model_seconds(gpu, gpu.costs, layers, 32, "fp16", "tuned")
    assert predict(Row("vgg16", "V100", "fp16", 32, False, 1.0, "x"), gpu.costs) == pytest.approx(sum(forward))


def test_every_gpu_gets_constants_even_without_rows(rows: list[Row]) -> None:
    only_v100 = [r for r in rows if r.gpu == "V100"]
    costs = fit(only_v100)
    assert set(costs) == set(FITTED_GPUS)
    assert costs["H100"].source == "0 published + 0 measured rows"
    assert costs["V100"].source == f"{len(only_v100)} published + 0 measured rows"


def test_a_gpu_of_the_same_die_ships_its_siblings_constants() -> None:
    for gpu, sibling in SAME_DIE.items():
        assert sibling in FITTED_GPUS and get_gpu(gpu).costs == get_gpu(sibling).costs


def test_held_out_error_beats_the_flops_only_model_it_replaced(rows: list[Row], scored: pd.DataFrame) -> None:
    assert set(scored["model"]) == {r.model for r in rows}
    published = scored[scored["kind"] == "published"]["error"].abs()
    baseline = flops_only_held_out(training_rows())["error"].abs()
    assert published.median() < 0.5 * baseline.median()
    assert published.max() < 0.5 * baseline.max()


def assert_documented(scored: pd.DataFrame, lead: str) -> None:
    """docs/compute_model.md holds `scored`'s summary table and quotes its median and max after `lead`."""
    text = DOC.read_text()
    for line in compute_fit.markdown(compute_fit.summary(scored)).splitlines()[2:]:
        assert line in text, line
    errors = scored["error"].abs()
    quoted = re.search(lead + r"median \|error\| ([\d.]+)%, max ([\d.]+)%", text)
    assert quoted, f"docs/compute_model.md quotes the median and max after {lead!r}"
    assert float(quoted.group(1)) == pytest.approx(100 * errors.median(), abs=0.05)
    assert float(quoted.group(2)) == pytest.approx(100 * errors.max(), abs=0.05)
    assert math.isfinite(errors.max())


@pytest.mark.parametrize("kind", ["measured", "published"])
def test_the_documented_error_tables_are_what_the_fit_gives(scored: pd.DataFrame, kind: str) -> None:
    rows = scored[scored["kind"] == kind]
    assert_documented(rows, rf"all {len(rows)} {kind} rows, held out by model: \*\*")


def test_held_out_by_model_the_measured_steps_meet_the_issue_bounds(scored: pd.DataFrame) -> None:
    """Issue 30's acceptance: held out by model, median |error| <= 15% and worst <= 35% on the
    measured steps (documented in docs/compute_model.md, so a refit that misses them fails here)."""
    errors = scored[scored["kind"] == "measured"]["error"].abs()
    assert errors.median() <= 0.15 and errors.max() <= 0.35


def test_the_grouped_jacobian_equals_one_difference_per_constant() -> None:
    """Two shared constants and two per GPU for three GPUs (the middle one without rows): GPU g's
    residuals see only the shared pair and its own, the pulls one constant each."""
    k, gpus = 2, 3
    rows_of = [np.arange(0, 3), np.arange(3, 3), np.arange(3, 5)]
    weights = [np.array([1.0, 2.0, 3.0]), np.array([]), np.array([0.5, 4.0])]

    def fun(x: np.ndarray) -> np.ndarray:
        errors = [
            np.sin(x[0] * w) + x[1] ** 2 * w + np.exp(x[k * (g + 1)] * w) * x[k * (g + 1) + 1]
            for g, w in enumerate(weights)
        ]
        return np.concatenate([*errors, 0.1 * x[:k], 10.0 * x[k:]])

    owned = [np.append(rows_of[g], 5 + k * (g + 1) + np.arange(k)) for g in range(gpus)]
    x = np.array([0.3, -1.2, 0.1, 2.0, 0.0, -0.5, 1.5, 0.7])
    low, high = np.full(len(x), -np.inf), np.full(len(x), np.inf)
    high[1] = x[1] + 1e-9  # a step that would leave the bounds is taken backwards
    f0 = fun(x)
    grouped = compute_fit._block_jacobian(fun, x, f0, k, owned, (low, high))
    dense = np.zeros_like(grouped)
    for c in range(len(x)):
        step = np.sqrt(np.finfo(float).eps) * max(1.0, abs(x[c])) * (1.0 if x[c] >= 0 else -1.0)
        step = -step if x[c] + step > high[c] else step
        moved = x.copy()
        moved[c] += step
        dense[:, c] = (fun(moved) - f0) / (moved[c] - x[c])
    np.testing.assert_allclose(grouped, dense, rtol=1e-12, atol=0.0)
    assert grouped[0, 1] == pytest.approx(2 * x[1] * 1.0, rel=1e-6)  # d/dx1 of x1^2 * w
