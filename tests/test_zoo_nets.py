"""The torch.nn zoo models have the zoo's parameters, layer by layer, in the zoo's order."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from sim.catalog.zoo import MODEL_NAMES, TORCH_MODELS, get_model  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.numerics.zoo_nets import BUILDERS, build_zoo_module, flat_layout  # noqa: E402

TIMED_ONLY = [name for name in MODEL_NAMES if name not in TORCH_MODELS]


def test_the_zoo_lists_exactly_the_models_built_here() -> None:
    assert list(BUILDERS) == list(TORCH_MODELS)
    assert set(TIMED_ONLY) == {
        "transformer_xl", "transformer_xl_large", "gnmt", "ssd300", "llama3_8b", "llama3_70b", "gpt3_175b",
    }  # fmt: skip


@pytest.mark.parametrize("name", TIMED_ONLY)
def test_a_model_without_a_module_is_refused_naming_the_buildable_ones(name: str) -> None:
    with pytest.raises(ValueError, match=f"model '{name}' has no torch.nn version") as error:
        build_zoo_module(name)
    assert all(built in str(error.value) for built in TORCH_MODELS)
    with pytest.raises(ValueError, match=f"{name} has no torch.nn version to train"):
        NumericsConfig(model=name, dataset="synthetic")


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_every_zoo_layer_has_its_parameter_count(name: str) -> None:
    module, spec = build_zoo_module(name), get_model(name)
    params = dict(module.named_parameters())
    layout = flat_layout(module, spec)
    assert [layer for layer, _ in layout] == [layer.name for layer in spec.layers]
    for (layer, names), expected in zip(layout, spec.layers):
        assert names, f"{name}: zoo layer {layer} has no parameters in the module"
        assert sum(params[n].numel() for n in names) == expected.params, layer
    assert sum(p.numel() for p in module.parameters()) == spec.params


def test_resnet32_trains_on_a_batch_of_two_and_its_products_match_the_zoo() -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    module, spec = build_zoo_module("resnet32"), get_model("resnet32")
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([3, 7])
    with FlopCounterMode(display=False) as counter:
        logits = module(x)
    assert logits.shape == (2, 10)
    torch.nn.functional.cross_entropy(logits, y).backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in module.parameters())
    # torch counts conv and linear products only; the zoo adds ~1.2% of element-wise work on top.
    products = counter.get_total_flops() / 2  # per sample
    assert 1.0 < spec.forward_flops / products < 1.02
