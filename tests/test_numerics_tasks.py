"""The numerics task's data: the held-out split by the config's counts, and a split that would leave no
training sample refused at validation, naming the field (once an IndexError in the task builder)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.config import parse_config
from sim.config.numerics import DIGITS_SAMPLES, NumericsConfig
from sim.errors import ConfigError
from sim.numerics.tasks import Task, load_dataset


def test_digits_split_counts_by_hand() -> None:
    """1797 digits, 20% held out: round(359.4) = 359 held out, 1438 to train."""
    from sklearn.datasets import load_digits

    assert len(load_digits().target) == DIGITS_SAMPLES == 1797
    cfg = NumericsConfig(model="logreg")
    data = load_dataset(cfg, seed=0)
    assert (len(data.y_train), len(data.y_test)) == cfg.split == (1438, 359)


def test_one_training_sample_is_enough_to_build_the_task() -> None:
    """10 samples at 0.94: round(9.4) = 9 held out, 1 to train (the edge that still runs)."""
    cfg = NumericsConfig(model="logreg", dataset="synthetic", synthetic={"samples": 10}, test_fraction=0.94)
    task = Task(cfg, seed=0)
    assert (len(task.data.y_train), len(task.data.y_test)) == (1, 9)


QUICKSTART = Path(__file__).parent.parent / "configs" / "quickstart.yaml"


def refusal(numerics: dict) -> str:
    """The one-line error `parse_config` gives a quickstart config with this numerics section."""
    config = {**yaml.safe_load(QUICKSTART.read_text()), "numerics": numerics}
    with pytest.raises(ConfigError) as caught:
        parse_config(config)
    return str(caught.value)


@pytest.mark.parametrize(
    "numerics, line",
    [
        (
            {"dataset": "synthetic", "synthetic": {"samples": 10}, "test_fraction": 0.96},  # round(9.6) = 10
            "numerics.test_fraction: 0.96 of 10 samples holds out 10 and leaves no training sample; "
            "lower test_fraction or raise synthetic.samples",
        ),
        (
            {"dataset": "synthetic", "synthetic": {"samples": 1}},  # at least one sample is held out
            "numerics.test_fraction: 0.2 of 1 samples holds out 1 and leaves no training sample; "
            "lower test_fraction or raise synthetic.samples",
        ),
        (
            {"model": "resnet32", "dataset": "synthetic", "zoo": {"samples": 2}, "test_fraction": 0.8},
            "numerics.test_fraction: 0.8 of 2 samples holds out 2 and leaves no training sample; "
            "lower test_fraction or raise zoo.samples",
        ),
        (
            {"model": "mlp", "test_fraction": 0.9999},  # round(1796.8) = 1797 digits
            "numerics.test_fraction: 0.9999 of 1797 samples holds out 1797 and leaves no training sample; "
            "lower test_fraction",
        ),
    ],
)
def test_a_split_with_no_training_sample_is_refused_naming_the_field(numerics: dict, line: str) -> None:
    assert line in refusal(numerics).splitlines()


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_the_gradient_written_in_place_is_a_flat_leafs_bit_for_bit(model: str) -> None:
    """A leaf per tensor accumulating into its slice of `out` gives exactly the values of one flat leaf cut into
    tensors (the former way, whose slices each handed back a model-length vector); `out` is the tensor returned."""
    import torch
    from torch.nn import functional as F

    task = Task(NumericsConfig(model=model, hidden=[32, 16]), seed=0)
    flat = task.initial + 0.01 * torch.randn(task.size, generator=torch.Generator().manual_seed(0))
    x, y = task.data.x_train[:16], task.data.y_train[:16]
    leaf = flat.detach().requires_grad_(True)
    (expected,) = torch.autograd.grad(F.cross_entropy(task.forward(leaf, x), y), leaf)
    out = torch.full((task.size,), float("nan"))
    grad, loss = task.gradient(flat, x, y, out=out)
    assert grad is out and torch.equal(out, expected)
    scaled, _ = task.gradient(flat, x, y, loss_scale=1024.0)  # fp16's loss scaling: scaled, then divided back
    assert torch.allclose(scaled, expected, rtol=1e-6, atol=1e-9) and scaled is not out
