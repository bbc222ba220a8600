"""Zoo models as numerics tasks: flat layout, gradients, learning, config checks, bucket alignment."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sim.catalog.zoo import get_model  # noqa: E402
from sim.compute.workload import compute_plan  # noqa: E402
from sim.config import parse_config  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.numerics.replica import bucket_ranges  # noqa: E402
from sim.numerics.zoo_task import ZooTask  # noqa: E402

SMALL = {
    "resnet50": {"samples": 24, "image_size": 64, "classes": 4},
    "wrn26_10": {"samples": 24, "classes": 4},
    "resnet32": {"samples": 24, "classes": 4},
    "bert_base": {"samples": 24, "sequence": 8},
    "gpt2": {"samples": 24, "sequence": 8},
    "deepfm": {"samples": 64},
}


def task_for(model: str, seed: int = 0) -> ZooTask:
    return ZooTask(NumericsConfig(dataset="synthetic", model=model, zoo=SMALL[model]), seed)


@pytest.mark.parametrize("model", sorted(SMALL))
def test_gradient_matches_the_modules_autograd_and_one_step_lowers_the_loss(model: str) -> None:
    torch.set_num_threads(1)
    task = task_for(model)
    x, y = task.data.x_train[:4], task.data.y_train[:4]
    grad, loss = task.gradient(task.initial, x, y)
    assert grad.shape == (get_model(model).params,) and np.isfinite(loss)
    # the flat gradient, cut at the zoo's layers, is what autograd gives the nn.Module's parameters
    module = task.module
    module.zero_grad()
    task.loss(module(x), y).backward()
    named = dict(module.named_parameters())
    for name, a, b, _ in task.slices:
        expected = named[name].grad
        got = grad[a:b]
        if expected is None:  # BERT's pooler: not on the masked-language-model path
            assert torch.count_nonzero(got) == 0
        else:
            torch.testing.assert_close(got, expected.reshape(-1), rtol=1e-4, atol=1e-6)
    lr = 0.5 if model == "deepfm" else 0.01
    _, after = task.gradient(task.initial - lr * grad, x, y)
    assert after < loss


def test_same_seed_same_data_and_initial_parameters_other_seed_differs() -> None:
    a, b, c = task_for("deepfm", 3), task_for("deepfm", 3), task_for("deepfm", 4)
    assert torch.equal(a.initial, b.initial) and torch.equal(a.data.x_train, b.data.x_train)
    assert not torch.equal(a.data.x_train, c.data.x_train)


def test_buckets_cut_the_flat_vector_at_zoo_layer_ends() -> None:
    """The simulator's buckets for a zoo workload split the real flat vector on layer boundaries."""
    from sim.catalog.gpus import get_gpu

    spec = get_model("resnet50")
    plan = compute_plan(parse_config(_config("resnet50")).workload, get_gpu("V100"))
    ends = set(np.cumsum([layer.params for layer in spec.layers]).tolist()) | {0}
    for a, b in bucket_ranges(spec.params, [bucket.nbytes for bucket in plan.buckets]):
        assert a in ends and b in ends


def _config(model: str, workload_model: str | None = None, **numerics: object) -> dict:
    return {
        "cluster": {"topology": "two_tier", "racks": 1, "hosts_per_rack": 2, "gpus_per_host": 1},
        "workload": {"model": workload_model or model, "batch_size": 2},
        "numerics": {"dataset": "synthetic", "model": model, "global_batch": 4, **numerics},
        "policies": [{"name": "ring"}],
    }


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (_config("resnet50", workload_model="vgg16"), "numerics.model"),
        (_config("alexnet"), "numerics.model"),
        (_config("gpt2", zoo={"sequence": 2048}), "zoo.sequence"),
        (_config("wrn26_10", zoo={"classes": 100}), "zoo.classes"),
        ({**_config("resnet50"), "numerics": {"dataset": "digits", "model": "resnet50"}}, "dataset"),
    ],
)
def test_bad_zoo_numerics_are_named(config: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config(config)
