"""The default compute model's fit to published throughputs and measured steps (sim/compute/fit.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.catalog.gpus import FITTED_GPUS, SAME_DIE, get_gpu
from sim.catalog.zoo import MODEL_NAMES, get_model
from sim.compute import fit as compute_fit
from sim.compute.fit import fit, flops_only_held_out, held_out, held_out_by_family, predict
from sim.compute.fit_rows import Row, fitted_rows, training_rows
from sim.compute.roofline import model_seconds

DOC = Path(__file__).resolve().parents[1] / "docs" / "compute_model.md"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return fitted_rows()


@pytest.fixture(scope="module")
def scored(rows: list[Row]) -> pd.DataFrame:
    return held_out(rows)


@pytest.fixture(scope="module")
def by_family(rows: list[Row]) -> pd.DataFrame:
    return held_out_by_family(rows)


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
    assert_quoted(scored, lead)


def assert_quoted(scored: pd.DataFrame, lead: str) -> None:
    """docs/compute_model.md quotes `scored`'s median and max |error| after `lead`."""
    text = DOC.read_text()
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


@pytest.mark.parametrize("kind", ["measured", "published"])
def test_the_documented_tables_held_out_by_family_are_what_the_fit_gives(by_family: pd.DataFrame, kind: str) -> None:
    rows = by_family[by_family["kind"] == kind]
    assert_documented(rows, rf"all {len(rows)} {kind} rows, held out by family: \*\*")


@pytest.mark.parametrize("group", ["model", "family"])
def test_the_documented_flops_only_null_is_what_it_gives(rows: list[Row], group: str) -> None:
    null = flops_only_held_out(rows, str if group == "model" else compute_fit.family)
    for kind in ("measured", "published"):
        scored = null[null["kind"] == kind]
        assert_quoted(scored, rf"FLOPs only, {kind} rows held out by {group}: ")


def test_held_out_by_family_meets_the_issue_targets(
    by_family: pd.DataFrame,
) -> None:
    """Issue 44's targets, held out by family over seven families: median |error| <= 12% on the
    measured steps, <= 15% and worst <= 40% on the published rows (docs/compute_model.md: 10.6%,
    14.4% and 39.3%)."""
    errors = by_family["error"].abs()
    published = errors[by_family["kind"] == "published"]
    assert published.median() <= 0.15 and published.max() <= 0.40
    assert errors[by_family["kind"] == "measured"].median() <= 0.12
    assert errors[by_family["kind"] == "measured"].median() <= 0.12


def test_every_zoo_model_has_a_family_and_an_unknown_one_is_an_error() -> None:
    assert set(compute_fit.FAMILIES) == set(MODEL_NAMES)
    family = compute_fit.family
    assert family("bert_base") == family("bert_large") != family("gpt2") != family("vgg16")
    assert family("transformer_xl") == family("transformer_xl_large") != family("gnmt")
    assert family("resnet50") == family("resnet32") != family("ssd300")
    with pytest.raises(ValueError, match="model 'alexnet' has no family; families are given for: resnet50"):
        compute_fit.family("alexnet")


def test_the_fit_covers_at_least_six_families_and_the_new_ones(rows: list[Row]) -> None:
    """Issue 44: held out by family over at least six families, SSD300, GNMT and Transformer-XL
    (base and large) among them, each from NVIDIA's PyTorch 1-GPU figures (DGX-2H rows left out)."""
    families = {compute_fit.family(r.model) for r in rows}
    assert len(families) >= 6 and {"ssd", "gnmt", "transformer_xl"} <= families
    for model in ("ssd300", "gnmt", "transformer_xl", "transformer_xl_large"):
        own = [r for r in rows if r.model == model]
        assert own and all(r.implementation == "eager" and "DeepLearningExamples" in r.source for r in own), model


def test_held_out_by_family_predicts_each_family_from_the_others_only(
    rows: list[Row], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[set[str]] = []

    def recording(fitted: list[Row], gpus=FITTED_GPUS) -> dict:
        seen.append({r.model for r in fitted})
        return {gpu: get_gpu(gpu).costs for gpu in gpus}

    monkeypatch.setattr(compute_fit, "fit", recording)
    table = held_out_by_family(rows)
    families = {compute_fit.family(r.model) for r in rows}
    assert len(seen) == len(families) and len(table) == len(rows)
    for models in seen:  # each fit sees every family but one, whole
        missing = families - {compute_fit.family(m) for m in models}
        assert len(missing) == 1
        assert models == {r.model for r in rows if compute_fit.family(r.model) not in missing}


def test_the_flops_only_null_by_family_takes_the_other_familys_efficiency() -> None:
    """One row per family on one GPU and precision: each is predicted at the other's fraction of
    peak, (FLOPs / peak) / (the other's FLOPs / peak / its seconds): the peak cancels."""
    a = Row("resnet50", "V100", "fp32", 32, True, 0.1, "x")
    b = Row("bert_base", "V100", "fp32", 8, True, 0.3, "x")
    flops = {r.model: compute_fit._flops(r) for r in (a, b)}
    null = flops_only_held_out([a, b], compute_fit.family).set_index("model")
    assert null.loc["resnet50", "predicted_ms"] == pytest.approx(1e3 * flops["resnet50"] * 0.3 / flops["bert_base"])
    assert null.loc["bert_base", "predicted_ms"] == pytest.approx(1e3 * flops["bert_base"] * 0.1 / flops["resnet50"])


def test_no_shipped_constant_sits_at_its_bound() -> None:
    """Each fitted constant is inside its physical bounds (sim.compute.fit.BOUNDS) by more than 1%:
    none is pinned there, an efficiency of 1 or a Winograd speed-up of 4."""
    low, high = compute_fit.BOUNDS
    for gpu in FITTED_GPUS:
        costs = get_gpu(gpu).costs
        for name, lo, hi in zip(compute_fit.NAMES, low, high, strict=True):
            value = math.log(getattr(costs, name))
            assert lo + 0.01 < value < hi - 0.01, (gpu, name, getattr(costs, name))


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
