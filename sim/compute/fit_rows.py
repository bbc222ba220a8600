"""The rows the compute model is fitted to and scored on (sim/compute/fit.py).

Two kinds. Published: sim/catalog/zoo/published_throughput.csv, one row per published training or
inference throughput of a zoo model on one GPU type at one batch size and precision, with its
citation; each is timed as the code that produced it ran (eager PyTorch or a step issued ahead,
`_implementation`; the transformers as their reference code built them, sim.catalog.zoo.transformers).
Measured: sim/catalog/zoo/measured_steps.csv, this project's own eager PyTorch steps of the zoo's
torch.nn modules, what `syncsim real` runs. A row is one figure as seconds per step of one GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import pandas as pd

from sim.catalog.gpus import FITTED_GPUS, MEMORY_VARIANTS, get_gpu
from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS
from sim.compute.roofline import check_implementation

IMAGE_SIZES = {"resnet50": 224, "vgg16": 224, "wrn26_10": 32, "resnet32": 32, "ssd300": 300}


@dataclass(frozen=True)
class Row:
    """One published figure, as a time per iteration (training) or per forward pass (inference)."""

    model: str
    gpu: str
    precision: str
    batch: int
    training: bool
    seconds: float
    source: str
    seq_len: int = 0  # a transformer's sequence length (0: the zoo's)
    implementation: str = "tuned"  # how the step was issued (sim.compute.roofline.IMPLEMENTATIONS)
    reference: bool = False  # a transformer as the published code built it (sim.catalog.zoo.transformers)
    kind: str = "published"  # or "measured" (this project's own steps)
    memory_gb: int = 0  # the module's memory where the row names another than the catalog's (A100 40GB)


def published() -> pd.DataFrame:
    """The bundled table of published throughputs, as written."""
    with resources.files("sim.catalog.zoo").joinpath("published_throughput.csv").open() as f:
        return pd.read_csv(f, comment="#")


def usable(table: pd.DataFrame) -> list[Row]:
    """The rows that time a zoo model on one GPU of sim.catalog.gpus (at the zoo's image size; a transformer
    at any sequence length), turned into seconds per step of that GPU."""
    rows = []
    for r in table.itertuples(index=False):
        model = r.model if isinstance(r.model, str) else ""
        if not model or not _matches(model, r) or r.gpu not in FITTED_GPUS or _pcie(r) or _dgx2h(r) or _pretraining(r):
            continue
        if str(r.source).startswith("syncsim"):
            continue  # this project's own steps, bundled exactly in measured_steps.csv
        if pd.isna(r.batch_per_gpu) or (not pd.isna(r.gpus) and int(r.gpus) != 1):
            continue  # per-GPU batch unknown, or several GPUs (their time includes communication)
        batch = int(r.batch_per_gpu)
        if not pd.isna(r.samples_per_s):
            seconds = batch / float(r.samples_per_s)
        elif not pd.isna(r.latency_ms):
            seconds = float(r.latency_ms) / 1e3
        else:
            continue
        seq_len = int(r.seq_len) if model in SEQUENCE_LENGTHS and not pd.isna(r.seq_len) else 0
        precision = _precision(r)
        reference = model in SEQUENCE_LENGTHS  # BERT fine-tuning code, nanoGPT (zoo.transformers)
        training = r.phase == "training"
        row = Row(
            model,
            r.gpu,
            precision,
            batch,
            training,
            seconds,
            str(r.source),
            seq_len,
            _implementation(r),
            reference,
            memory_gb=_memory_gb(r),
        )
        rows.append(row)
    return rows


def measured() -> pd.DataFrame:
    """The bundled table of this project's measured training steps, as written."""
    with resources.files("sim.catalog.zoo").joinpath("measured_steps.csv").open() as f:
        return pd.read_csv(f, comment="#")


def measured_rows() -> list[Row]:
    """The measured steps as rows (forward + backward of one step, as the table's implementation)."""
    return [
        Row(
            r.model,
            r.gpu,
            r.precision,
            int(r.batch_per_gpu),
            True,
            float(r.step_s),
            f"{r.source}, {r.measured}",
            implementation=check_implementation(r.implementation),
            kind="measured",
        )
        for r in measured().itertuples(index=False)
    ]


def _matches(model: str, r: Any) -> bool:
    size = r.image_size
    return not (model in IMAGE_SIZES and not pd.isna(size) and int(size) != IMAGE_SIZES[model])


def _pcie(r: Any) -> bool:
    """An A100 or H100 PCIe card: lower clocks and power than the SXM modules sim.catalog.gpus describes."""
    return r.gpu in ("A100", "H100") and "PCIe" in str(r.note)


def _dgx2h(r: Any) -> bool:
    """A V100 of a DGX-2H: the 450 W SXM3 module, clocked above the 300 W SXM2 V100 sim.catalog.gpus
    describes (its peaks are not the catalog's)."""
    return r.gpu == "V100" and "DGX-2H" in f"{r.table} {r.note}"


def _memory_gb(r: Any) -> int:
    """The module's memory where the row names one with a bandwidth of its own (sim.catalog.gpus.
    MEMORY_VARIANTS: an A100 40GB, in the table's title or the note); 0: the catalog's module."""
    text = f"{r.table} {r.note}".replace(" GB", "GB")
    return next((memory for name, memory in MEMORY_VARIANTS if r.gpu == name and f"{memory}GB" in text), 0)


def _implementation(r: Any) -> str:
    """PyTorch issues each kernel from Python as it goes (eager) unless compiled; TensorFlow's graphs
    issue the step ahead (tuned); torch.compile (Inductor), NVIDIA's MXNet and PaddlePaddle scripts
    and TensorFlow under XLA also fuse element-wise work into its neighbours (fused)."""
    framework = str(r.framework)
    if framework.startswith(("MXNet", "PaddlePaddle")) or _xla(r) or "compile" in framework:
        return "fused"
    return "eager" if framework.startswith("PyTorch") else "tuned"


def _xla(r: Any) -> bool:
    """TensorFlow compiled by XLA, which fuses each batch norm's element-wise tail into it (the note
    says XLA is on; "no XLA" says the log shows none)."""
    note = str(r.note)
    return str(r.framework).startswith("TensorFlow") and "XLA" in note and "no XLA" not in note


def _pretraining(r: Any) -> bool:
    """BERT pre-training: its masked-LM and next-sentence heads are not in the zoo's BERT (and
    NVIDIA's pre-training scripts skip the padding), so the network differs from the zoo's."""
    return "pre-training" in str(r.table).lower()


def _precision(r: Any) -> str:
    """NVIDIA's NGC PyTorch containers turn on TF32 matrix products (TORCH_ALLOW_TF32_CUBLAS_OVERRIDE),
    so their "FP32" on a GPU with TF32 is the `tf32` precision."""
    framework = str(r.framework)
    ngc_pytorch = "PyTorch" in framework and "NGC" in framework
    tf32 = r.precision == "fp32" and ngc_pytorch and get_gpu(r.gpu).tf32_tflops > 0
    return "tf32" if tf32 else str(r.precision)


def training_rows() -> list[Row]:
    """The bundled published training figures (what the simulator predicts: forward + backward of
    one iteration)."""
    return [r for r in usable(published()) if r.training]


def fitted_rows() -> list[Row]:
    """Every row the shipped constants are fitted to: the published training figures and the
    measured steps."""
    return training_rows() + measured_rows()
