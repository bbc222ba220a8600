"""The default compute model's fit to published throughputs (sim/compute/fit.py)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from sim.catalog.gpus import FITTED_GPUS, SAME_DIE, get_gpu
from sim.catalog.zoo import get_model
from sim.compute import fit as compute_fit
from sim.compute.fit import Row, fit, flops_only_held_out, held_out, predict, training_rows, usable
from sim.compute.roofline import model_seconds

DOC = Path(__file__).resolve().parents[1] / "docs" / "compute_model.md"


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return training_rows()


@pytest.fixture(scope="module")
def scored(rows: list[Row]) -> pd.DataFrame:
    return held_out(rows)


def _row(**fields: object) -> dict[str, object]:
    base = {
        "model": "resnet50",
        "source_model": "ResNet-50",
        "gpu": "A100",
        "gpus": 1,
        "precision": "fp32",
        "batch_per_gpu": 64,
        "seq_len": float("nan"),
        "image_size": 224,
        "phase": "training",
        "samples_per_s": 640.0,
        "latency_ms": float("nan"),
        "framework": "PyTorch",
        "source": "owner/repo@abc:README.md",
        "table": "Training",
        "note": "",
    }
    return base | fields


def test_the_shipped_constants_are_the_fit_to_the_bundled_figures(rows: list[Row]) -> None:
    for gpu, costs in fit(rows).items():
        shipped = get_gpu(gpu).costs
        for name in compute_fit.NAMES:
            assert getattr(shipped, name) == pytest.approx(getattr(costs, name), rel=0.01), (gpu, name)


def test_rows_become_seconds_per_step_of_one_gpu() -> None:
    (row,) = usable(pd.DataFrame([_row()]))
    assert row.seconds == pytest.approx(0.1) and row.batch == 64 and row.training


def test_rows_that_measure_another_network_or_machine_are_left_out() -> None:
    table = pd.DataFrame(
        [
            _row(gpus=8),  # eight GPUs: communication is in the time
            _row(batch_per_gpu=float("nan")),
            _row(image_size=299),
            _row(gpu="T4"),  # not a GPU of sim.catalog.gpus
            _row(note="A100 80GB PCIe"),
            _row(model="bert_large", seq_len=512, table="Pre-training NVIDIA DGX A100"),
            _row(samples_per_s=float("nan")),  # no figure at all
        ]
    )
    assert usable(table) == []


def test_ngc_pytorch_fp32_on_ampere_is_tf32_and_transformers_keep_their_length() -> None:
    table = pd.DataFrame(
        [
            _row(framework="PyTorch (NGC container)"),
            _row(gpu="V100", framework="PyTorch (NGC container)"),
            _row(model="bert_base", seq_len=384, image_size=float("nan"), framework="TensorFlow"),
        ]
    )
    ampere, volta, bert = usable(table)
    assert (ampere.precision, volta.precision, bert.precision) == ("tf32", "fp32", "fp32")
    assert bert.seq_len == 384 and ampere.seq_len == 0


def test_a_prediction_is_the_roofline_of_the_zoo_model(rows: list[Row]) -> None:
    gpu = get_gpu("V100")
    row = Row("vgg16", "V100", "fp16", 32, True, 1.0, "x")
    forward, backward = model_seconds(gpu, gpu.costs, get_model("vgg16").layers, 32, "fp16")
    assert predict(row, gpu.costs) == pytest.approx(sum(forward) + sum(backward))
    inference = Row("vgg16", "V100", "fp16", 32, False, 1.0, "x")
    assert predict(inference, gpu.costs) == pytest.approx(sum(forward))


def test_every_gpu_gets_constants_even_without_rows(rows: list[Row]) -> None:
    only_v100 = [r for r in rows if r.gpu == "V100"]
    costs = fit(only_v100)
    assert set(costs) == set(FITTED_GPUS)
    assert costs["H100"].source == "0 published rows"


def test_a_gpu_of_the_same_die_ships_its_siblings_constants() -> None:
    for gpu, sibling in SAME_DIE.items():
        assert sibling in FITTED_GPUS and get_gpu(gpu).costs == get_gpu(sibling).costs


def test_held_out_error_beats_the_flops_only_model_it_replaced(rows: list[Row], scored: pd.DataFrame) -> None:
    assert set(scored["model"]) == {r.model for r in rows}
    baseline = flops_only_held_out(rows)["error"].abs()
    errors = scored["error"].abs()
    assert errors.median() < 0.5 * baseline.median()
    assert errors.max() < 0.5 * baseline.max()


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


def test_the_documented_error_table_is_what_the_fit_gives(scored: pd.DataFrame) -> None:
    assert_documented(scored, r"\*\*")


def test_the_measured_steps_are_zoo_models_on_catalog_gpus_with_their_provenance() -> None:
    table = compute_fit.measured()
    assert len(table) >= 32 and set(table["implementation"]) == {"eager_pytorch"}
    assert table["source"].str.len().min() > 0 and table["measured"].str.match(r"\d{4}-\d\d-\d\d").all()
    rows = compute_fit.measured_rows()
    for row in rows:
        get_model(row.model), get_gpu(row.gpu)  # known names (raise otherwise)
        assert row.training and row.seconds > 0 and row.precision in ("fp32", "fp16")


def test_the_documented_measured_table_is_what_the_shipped_constants_give() -> None:
    """docs/compute_model.md's table of the shipped constants on the measured steps (not fitted to them)."""
    scored = compute_fit.shipped(compute_fit.measured_rows())
    assert_documented(scored, f"all {len(scored)} measured rows, ")
