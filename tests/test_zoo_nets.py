"""The torch.nn zoo models have the zoo's parameters, layer by layer, in the zoo's order."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from sim.numerics.zoo_nets import build_zoo_module, flat_layout  # noqa: E402
from sim.zoo import MODEL_NAMES, get_model  # noqa: E402


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_zoo_layer_has_its_parameter_count(name: str) -> None:
    module, spec = build_zoo_module(name), get_model(name)
    params = dict(module.named_parameters())
    layout = flat_layout(module, spec)
    assert [layer for layer, _ in layout] == [layer.name for layer in spec.layers]
    for (layer, names), expected in zip(layout, spec.layers):
        assert names, f"{name}: zoo layer {layer} has no parameters in the module"
        assert sum(params[n].numel() for n in names) == expected.params, layer
    assert sum(p.numel() for p in module.parameters()) == spec.params
