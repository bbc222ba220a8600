"""The rows the compute model is fitted to (sim/compute/fit_rows.py): published figures as seconds per
step of one GPU, timed as their code ran, and this project's measured steps."""

from __future__ import annotations

import pandas as pd
import pytest

from sim.catalog.gpus import get_gpu
from sim.catalog.zoo import get_model
from sim.compute import fit_rows
from sim.compute.fit_rows import usable


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
            _row(gpu="V100", table="Training throughput: NVIDIA DGX-2H (16x V100 32GB)"),  # 450 W SXM3
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


def test_a_row_naming_the_a100_40gb_is_timed_at_its_bandwidth() -> None:
    table = pd.DataFrame(
        [
            _row(table="Training performance: NVIDIA DGX A100 (8x A100 40GB)"),
            _row(note="1x A100 40 GB"),
            _row(table="NVIDIA DGX A100 (8x A100 80GB)"),
            _row(gpu="V100", note="DGX-1 16GB"),  # no V100 variant: the catalog's
        ]
    )
    assert [r.memory_gb for r in usable(table)] == [40, 40, 0, 0]


def test_each_published_row_is_timed_as_its_code_ran() -> None:
    frameworks = {
        "PyTorch (NGC container, Lambda benchmark v1)": "eager",
        "PyTorch 2.0 nightly (Dec 2022), torch.compile": "fused",  # Inductor fuses element-wise work
        "TensorFlow 1.15 (20.06-py3 NGC)": "tuned",
        "MXNet (mxnet-20.12-py3 NGC)": "fused",  # batch norm with its add and ReLU (BatchNormAddRelu)
        "PaddlePaddle (NGC container)": "fused",  # fuse_bn_act_ops, fuse_bn_add_act_ops
    }
    table = pd.DataFrame([_row(framework=f) for f in frameworks])
    assert [r.implementation for r in usable(table)] == list(frameworks.values())
    # XLA fuses each batch norm's element-wise tail into it; a log without XLA stays tuned
    notes = {"8x A100 40GB; AMP + XLA": "fused", "XLA auto-jit on (log)": "fused", "no XLA compilation": "tuned"}
    table = pd.DataFrame([_row(framework="TensorFlow 1.15", note=note) for note in notes])
    assert [r.implementation for r in usable(table)] == list(notes.values())
    assert usable(pd.DataFrame([_row(note="XLA on")]))[0].implementation == "eager"  # PyTorch: no XLA
    bert = usable(pd.DataFrame([_row(model="bert_large", seq_len=384, image_size=float("nan"))]))[0]
    assert bert.reference and not usable(pd.DataFrame([_row()]))[0].reference


def test_the_measured_steps_are_zoo_models_on_catalog_gpus_with_their_provenance() -> None:
    table = fit_rows.measured()
    assert len(table) >= 32 and set(table["implementation"]) == {"eager"}
    assert table["source"].str.len().min() > 0 and table["measured"].str.match(r"\d{4}-\d\d-\d\d").all()
    rows = fit_rows.measured_rows()
    for row in rows:
        get_model(row.model), get_gpu(row.gpu)  # known names (raise otherwise)
        assert row.training and row.seconds > 0 and row.precision in ("fp32", "fp16")
        assert row.kind == "measured" and row.implementation == "eager" and not row.reference
