"""Zoo layers' tensor shapes: present for every layer, summing to its parameters, and equal to the
shapes torch.nn modules give the same layers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sim.catalog.zoo import MODEL_NAMES, TORCH_MODELS, get_model
from sim.catalog.zoo.gnmt import GNMT_HIDDEN, GNMT_VOCAB
from sim.catalog.zoo.spec import Layer, ModelSpec
from sim.catalog.zoo.ssd import SSD_CLASSES, SSD_DEFAULT_BOXES, SSD_EXTRA_WIDTHS, SSD_MAP_CHANNELS
from sim.catalog.zoo.transformer_xl import TXL_CUTOFFS, TXL_SIZES, TXL_VOCAB


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_layer_of_every_model_has_shapes_that_hold_its_parameters(name: str) -> None:
    for layer in get_model(name).layers:
        assert layer.shapes, f"{name}: layer {layer.name} has no shapes"
        assert all(len(shape) >= 1 and all(d >= 1 for d in shape) for shape in layer.shapes), layer.name
        assert sum(math.prod(shape) for shape in layer.shapes) == layer.params, layer.name


def test_shapes_that_do_not_hold_the_parameters_are_refused_naming_the_layer() -> None:
    with pytest.raises(ValueError, match=r"layer 'fc': shapes \(\(10, 3\),\) hold 30 values, but params is 33"):
        Layer("fc", 33, 0.0, shapes=((10, 3),))
    with pytest.raises(ValueError, match="layer 'fc': shapes .* positive integer dimensions"):
        Layer("fc", 0, 0.0, shapes=((0, 3),))
    assert Layer("fc", 33, 0.0, shapes=((10, 3), (3,))).shaped
    assert not Layer("fc", 33, 0.0).shaped and Layer("empty", 0, 0.0).shaped


def _module_shapes(module: Any, spec: ModelSpec) -> list[tuple[tuple[int, ...], ...]]:
    """Per zoo layer, the shapes of the module's parameters that belong to it, in named_parameters order."""
    from sim.numerics.zoo_nets import flat_layout

    params = dict(module.named_parameters())
    return [tuple(tuple(params[n].shape) for n in names) for _, names in flat_layout(module, spec)]


@pytest.mark.parametrize("name", TORCH_MODELS)
def test_torch_modules_hold_the_zoo_shapes_layer_by_layer(name: str) -> None:
    """The project's torch.nn zoo (sim.numerics.zoo_nets), built on the meta device (no memory):
    each zoo layer's tensors in named_parameters order have exactly the zoo's shapes."""
    torch = pytest.importorskip("torch")
    from sim.numerics.zoo_nets import build_zoo_module

    spec = get_model(name)
    with torch.device("meta"):
        module = build_zoo_module(name)
    assert _module_shapes(module, spec) == [layer.shapes for layer in spec.layers]


def _shapes(module: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(p.shape) for p in module.parameters())


def test_gnmt_shapes_are_those_of_its_torch_modules() -> None:
    """nn.LSTM per direction (weight_ih, weight_hh, bias_ih, bias_hh), the shared nn.Embedding, the
    classifier's nn.Linear, and Bahdanau attention registered as NVIDIA's BahdanauAttention does
    (two bias-free linears, then the attention vector, the scalar and the bias: named_parameters
    puts a module's own tensors before its children's)."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    h = GNMT_HIDDEN
    layers = {layer.name: layer.shapes for layer in get_model("gnmt").layers}

    class Bahdanau(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear_q, self.linear_k = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
            self.linear_att = nn.Parameter(torch.empty(h))
            self.normalize_scalar, self.normalize_bias = nn.Parameter(torch.empty(1)), nn.Parameter(torch.empty(h))

    with torch.device("meta"):
        expected = {
            "encoder.embedder": _shapes(nn.Embedding(GNMT_VOCAB, h)),
            "encoder.rnn_layers.0": _shapes(nn.LSTM(h, h, bidirectional=True)),
            "encoder.rnn_layers.1": _shapes(nn.LSTM(2 * h, h)),
            "encoder.rnn_layers.2": _shapes(nn.LSTM(h, h)),
            "decoder.att_rnn.rnn": _shapes(nn.LSTM(h, h)),
            "decoder.att_rnn.attn": _shapes(Bahdanau()),
            "decoder.rnn_layers.0": _shapes(nn.LSTM(2 * h, h)),
            "decoder.classifier.classifier": _shapes(nn.Linear(h, GNMT_VOCAB)),
        }
    assert {name: layers[name] for name in expected} == expected
    assert expected["decoder.att_rnn.attn"][:3] == ((h,), (1,), (h,))  # own tensors first


def test_transformer_xl_large_shapes_are_those_of_its_torch_modules() -> None:
    """NVIDIA's MemTransformerLM with div_val 4: per cluster an nn.Embedding of d_model / 4^i values a
    row and a (d_model, d_i) projection; per layer bias-free qkv_net, r_net and o_net linears, layer
    norms and the feed-forward linears; r_w_bias (n_head, d_head); the softmax's cluster weight and
    bias, a bias per cluster and the head's own (d_model, d_model) projection."""
    torch = pytest.importorskip("torch")
    nn = torch.nn
    size = TXL_SIZES["transformer_xl_large"]
    d, inner = size.d_model, size.n_heads * size.d_head
    ends = (0, *TXL_CUTOFFS, TXL_VOCAB)
    clusters = [(b - a, d // 4**i) for i, (a, b) in enumerate(zip(ends, ends[1:]))]
    layers = {layer.name: layer.shapes for layer in get_model("transformer_xl_large").layers}
    with torch.device("meta"):
        expected = {
            "word_emb.emb_layers": sum((_shapes(nn.Embedding(n, dim)) for n, dim in clusters), ()),
            "word_emb.emb_projs": tuple((d, dim) for _, dim in clusters),
            "r_w_bias": ((size.n_heads, size.d_head),),
            "layers.0.dec_attn.qkv_net": _shapes(nn.Linear(d, 3 * inner, bias=False)),
            "layers.0.dec_attn.r_net": _shapes(nn.Linear(d, inner, bias=False)),
            "layers.0.dec_attn.o_net": _shapes(nn.Linear(inner, d, bias=False)),
            "layers.0.dec_attn.layer_norm": _shapes(nn.LayerNorm(d)),
            "layers.0.pos_ff.CoreNet.0": _shapes(nn.Linear(d, size.d_inner)),
            "layers.0.pos_ff.CoreNet.3": _shapes(nn.Linear(size.d_inner, d)),
            "crit": ((3, d), (3,), *((n,) for n, _ in clusters), (d, d)),
        }
    assert {name: layers[name] for name in expected} == expected
    assert get_model("transformer_xl").layers[-1].shapes == ((3, 512), (3,), (TXL_VOCAB,))  # div_val 1: one bias


def test_ssd300_heads_and_extra_blocks_are_torch_convolutions() -> None:
    torch = pytest.importorskip("torch")
    nn = torch.nn
    layers = {layer.name: layer.shapes for layer in get_model("ssd300").layers}
    with torch.device("meta"):
        for i, (channels, per) in enumerate(zip(SSD_MAP_CHANNELS, SSD_DEFAULT_BOXES)):
            assert layers[f"loc.{i}"] == _shapes(nn.Conv2d(channels, per * 4, 3, padding=1))
            assert layers[f"conf.{i}"] == _shapes(nn.Conv2d(channels, per * SSD_CLASSES, 3, padding=1))
        for i, width in enumerate(SSD_EXTRA_WIDTHS):
            assert layers[f"additional_blocks.{i}.0"] == _shapes(nn.Conv2d(SSD_MAP_CHANNELS[i], width, 1, bias=False))
            assert layers[f"additional_blocks.{i}.1"] == _shapes(nn.BatchNorm2d(width))
            conv = nn.Conv2d(width, SSD_MAP_CHANNELS[i + 1], 3, bias=False)
            assert layers[f"additional_blocks.{i}.3"] == _shapes(conv)
