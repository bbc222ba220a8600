"""The model zoo against published parameter counts and FLOPs, plus the builders' invariants."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.catalog.zoo import MODEL_NAMES, Layer, ModelSpec, get_model
from sim.catalog.zoo.builders import (
    attention_core,
    attention_core_flops,
    conv2d,
    conv_output_size,
    linear,
    transformer_block,
)
from sim.catalog.zoo.cnn import cifar_resnet_layers
from sim.catalog.zoo.recsys import deepfm_layers
from sim.catalog.zoo.transformers import bert_layers, gpt2_layers

# Published parameter counts. Exact where the architecture is exactly known: torchvision's
# model cards (ResNet-50, VGG-16) and the Hugging Face checkpoints (BERT with pooler, GPT-2).
PUBLISHED_PARAMS = {
    "resnet50": 25_557_032,
    "vgg16": 138_357_544,
    "bert_base": 109_482_240,
    "bert_large": 335_141_888,
    "gpt2": 124_439_808,
    # GNMT v2 as NVIDIA's PyTorch code builds it ("a total of 160,671,297 trainable parameters":
    # mlbench/mlbench.github.io@aeed8d3d6b368b7d3558c56c0102029e06a424b6:_posts/2020-10-02-nlp-translation.md;
    # the same count in NVIDIA/apex's distributed-optimizer tests, "MLPerf GNMT has 160671297 parameters")
    "gnmt": 160_671_297,
}
# Zagoruyko & Komodakis report 36.5M for WRN-28-10 (the same network, see docs/zoo.md).
WRN_PUBLISHED_PARAMS = 36.5e6
# Our documented figures (docs/zoo.md), checked against torch.nn re-implementations.
DOCUMENTED_PARAMS = {"wrn26_10": 36_479_194, "resnet32": 466_906, "deepfm": 11_477_602}

# Published multiply-accumulates per forward pass of one sample: torchvision's model cards
# (4.09 and 15.47 G), and 5.25 G commonly reported for WRN-28-10 on 32x32 inputs.
PUBLISHED_GMACS = {"resnet50": 4.09, "vgg16": 15.47, "wrn26_10": 5.25}


def relative_error(value: float, reference: float) -> float:
    return abs(value - reference) / reference


def test_model_names_are_the_documented_set() -> None:
    assert set(MODEL_NAMES) == {
        "resnet50", "vgg16", "wrn26_10", "resnet32", "bert_base", "bert_large", "gpt2", "deepfm",
        "transformer_xl", "transformer_xl_large", "gnmt", "ssd300", "llama3_8b", "llama3_70b", "gpt3_175b",
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_params_match_published_counts_exactly(name: str) -> None:
    assert get_model(name).params == PUBLISHED_PARAMS[name]


def test_wrn_params_match_the_paper_and_the_documented_figure() -> None:
    params = get_model("wrn26_10").params
    assert relative_error(params, WRN_PUBLISHED_PARAMS) < 0.005
    assert params == DOCUMENTED_PARAMS["wrn26_10"]


def test_deepfm_params_follow_from_its_hyper_parameters() -> None:
    features, dim, fields, hidden = 1_000_000, 10, 39, 400
    first_order = features + 1  # one weight per feature id plus the global bias
    table = features * dim
    dnn = (fields * dim * hidden + hidden) + 2 * (hidden * hidden + hidden) + (hidden + 1)
    assert get_model("deepfm").params == first_order + table + dnn
    assert first_order + table + dnn == DOCUMENTED_PARAMS["deepfm"]


def test_deepfm_embedding_table_dominates_and_is_its_own_layer() -> None:
    model = get_model("deepfm")
    table = next(layer for layer in model.layers if layer.name == "embedding")
    assert table.params == 10_000_000
    assert table.params / model.params > 0.85


def test_resnet32_params_follow_from_its_architecture() -> None:
    def block(c: int) -> int:  # two 3x3 convs and two batch norms, c channels throughout
        return 2 * 9 * c * c + 2 * 2 * c

    def first_block(cin: int, c: int) -> int:  # strided: wider second conv, 1x1 projection + norm
        return 9 * cin * c + 9 * c * c + 2 * 2 * c + cin * c + 2 * c

    stem, fc = 9 * 3 * 16 + 2 * 16, 64 * 10 + 10
    stages = 5 * block(16) + first_block(16, 32) + 4 * block(32) + first_block(32, 64) + 4 * block(64)
    assert get_model("resnet32").params == stem + stages + fc == DOCUMENTED_PARAMS["resnet32"]
    # Without the two projections (option A, zero-padded shortcuts) it is the usually quoted 0.46M.
    projections = (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64)
    assert DOCUMENTED_PARAMS["resnet32"] - projections == 464_154


def test_resnet32_has_32_weighted_layers_and_two_projections() -> None:
    names = [layer.name for layer in get_model("resnet32").layers]
    assert names[:3] == ["conv1", "bn1", "layer1.0.conv1"] and names[-1] == "fc"
    convs = [n for n in names if n.split(".")[-1].startswith("conv")]
    assert len(convs) + 1 == 32  # 6n + 1 3x3 convs plus the classifier; 1x1 shortcuts not counted
    assert [n for n in names if "downsample" in n] == [
        "layer2.0.downsample.0", "layer2.0.downsample.1", "layer3.0.downsample.0", "layer3.0.downsample.1",
    ]  # fmt: skip


def test_resnet32_conv_flops_match_the_formula() -> None:
    layers = {layer.name: layer for layer in get_model("resnet32").layers}
    # 2 * cout * cin * k^2 * output area: a stride-1 conv at 32x32, then the strided one at 16x16.
    assert layers["layer1.0.conv1"].forward_flops == 2 * 16 * 16 * 9 * 32 * 32
    assert layers["layer2.0.conv1"].forward_flops == 2 * 32 * 16 * 9 * 16 * 16
    assert layers["layer2.0.downsample.0"].forward_flops == 2 * 32 * 16 * 16 * 16


def test_resnet32_forward_flops_in_closed_form() -> None:
    # Every 3x3 conv inside the stages costs 9 * 16^2 * 32^2 MACs (channels double as the area
    # quarters) except the two strided ones, which cost half.
    full = 9 * 16 * 16 * 32 * 32
    macs = 9 * 3 * 16 * 32 * 32 + 28 * full + 2 * full // 2 + 2 * 16 * 32 * 16 * 16 + 64 * 10
    assert macs == 69_124_736
    # Element-wise work per output element: batch norm + ReLU 5, the residual add 1, a projection's
    # batch norm 4; then global average pooling (1 per input) and the classifier's bias.
    maps = {16: 16 * 32 * 32, 32: 32 * 16 * 16, 64: 64 * 8 * 8}  # elements of each stage's maps
    elementwise = 5 * maps[16] + sum(5 * 11 * e for e in maps.values()) + 4 * (maps[32] + maps[64])
    elementwise += maps[64] + 10
    assert get_model("resnet32").forward_flops == 2 * macs + elementwise


def test_cifar_resnet_depth_must_be_6n_plus_2() -> None:
    assert len(cifar_resnet_layers(20)) == len(cifar_resnet_layers(32)) - 2 * 3 * 4
    for depth in (2, 31):
        with pytest.raises(ValueError, match="6n"):
            cifar_resnet_layers(depth)


@pytest.mark.parametrize("name", sorted(PUBLISHED_GMACS))
def test_cnn_flops_match_published_macs(name: str) -> None:
    # Published figures count conv/linear multiply-adds only; our element-wise extras add ~1%.
    gmacs = get_model(name).forward_flops / 2 / 1e9
    assert relative_error(gmacs, PUBLISHED_GMACS[name]) < 0.03


def megatron_forward_flops(seq: int, layers: int, hidden: int, vocab: int = 0) -> float:
    """Forward FLOPs of one sequence after Narayanan et al. 2021 (SC'21), appendix.

    Per layer 24*s*h^2 for the projections and MLP plus 4*s^2*h for attention scores and
    context, and 2*s*h*V for the logits when there is an LM head.
    """
    return 24.0 * seq * layers * hidden**2 * (1 + seq / (6 * hidden)) + 2.0 * seq * hidden * vocab


@pytest.mark.parametrize(
    ("name", "seq", "layers", "hidden", "vocab"),
    [
        ("bert_base", 128, 12, 768, 30522),  # the masked-LM decoder over every token
        ("bert_large", 128, 24, 1024, 30522),
        ("gpt2", 1024, 12, 768, 50257),
    ],
)
def test_transformer_flops_match_closed_form(name: str, seq: int, layers: int, hidden: int, vocab: int) -> None:
    expected = megatron_forward_flops(seq, layers, hidden, vocab)
    # Our extras (biases, norms, softmax, GELU) add under 0.5%; halving attention at BERT's
    # 128 tokens would move the total by 1.4%, so 1% still catches a missing product.
    assert relative_error(get_model(name).forward_flops, expected) < 0.01


def test_transformer_flops_include_attention_beyond_two_flops_per_parameter() -> None:
    model = get_model("gpt2")
    embeddings = 50257 * 768 + 1024 * 768
    dense_only = 2 * (model.params - embeddings) * 1024 + 2 * 768 * 50257 * 1024
    attention = 12 * 4 * 1024 * 1024 * 768
    assert model.forward_flops > dense_only + 0.95 * attention


def test_attention_cost_grows_quadratically_with_sequence_length() -> None:
    short = sum(layer.forward_flops for layer in gpt2_layers(seq_len=512))
    long = sum(layer.forward_flops for layer in gpt2_layers(seq_len=1024))
    # Doubling the length doubles the linear work and quadruples the attention core.
    assert long - 2 * short == pytest.approx(12 * 2 * attention_core_flops(512, 768, 12))


def test_bert_depends_on_sequence_length_but_not_its_parameters() -> None:
    at_128 = bert_layers(n_layers=2, d_model=64, n_heads=4, seq_len=128)
    at_512 = bert_layers(n_layers=2, d_model=64, n_heads=4, seq_len=512)
    assert sum(x.params for x in at_128) == sum(x.params for x in at_512)
    assert sum(x.forward_flops for x in at_512) > 4 * sum(x.forward_flops for x in at_128)


def test_gpt2_head_is_tied_and_counted_once() -> None:
    names = [layer.name for layer in get_model("gpt2").layers]
    assert "lm_head" not in names and names.count("wte") == 1


def _moved(layers: tuple[Layer, ...]) -> float:
    return sum(op.moved for layer in layers for op in layer.ops)


def test_fused_attention_never_moves_the_scores_and_the_reference_does() -> None:
    seq, d, heads = 512, 64, 4
    fused = attention_core(linear("qkv", d, 3 * d, tokens=seq), seq, d, heads, "fused")
    explicit = attention_core(linear("qkv", d, 3 * d, tokens=seq), seq, d, heads, "explicit")
    assert fused.forward_flops == pytest.approx(explicit.forward_flops)  # the same arithmetic
    scores = heads * seq * seq
    assert _moved((explicit,)) - _moved((fused,)) > 10 * scores  # written, softmaxed, read back
    assert _moved((fused,)) < scores  # Q, K, V in, the context out
    with pytest.raises(ValueError, match="attention 'flash'; allowed: fused, explicit"):
        attention_core(linear("qkv", d, 3 * d, tokens=seq), seq, d, heads, "flash")


def test_the_zoo_bert_trains_through_its_tied_decoder_and_the_reference_through_its_pooler() -> None:
    zoo = bert_layers(n_layers=2, d_model=64, n_heads=4)
    reference = bert_layers(n_layers=2, d_model=64, n_heads=4, reference=True)
    assert [x.params for x in zoo] == [x.params for x in reference]  # the same parameters
    decoder, pooler = zoo[-1], reference[-1]
    assert decoder.name == pooler.name == "pooler"
    assert decoder.ops[0].flops == 2 * 64 * 30522 * 128 and not decoder.ops[0].aligned  # 30,522 tokens
    assert decoder.ops[-1].full_precision  # the loss over the vocabulary runs in FP32
    assert pooler.forward_flops < 1e6 and all(op.aligned for x in reference for op in x.ops)


def test_autocast_keeps_layer_norms_in_fp32_but_not_apex_o2s_references() -> None:
    """The zoo's modules and nanoGPT ran under torch.autocast (nn.LayerNorm and softmax in FP32);
    NVIDIA's BERT under Apex O2 with fused half-precision layer norms and softmax."""
    zoo = [x for x in gpt2_layers(n_layers=1) if x.name.endswith(("ln1", "ln2"))]
    nanogpt = gpt2_layers(n_layers=1, reference=True)
    apex = bert_layers(n_layers=1, d_model=64, n_heads=2, reference=True)
    assert all(op.full_precision for x in zoo for op in x.ops)
    assert all(op.full_precision for x in nanogpt if x.name.endswith(("ln1", "ln2")) for op in x.ops)
    assert not any(op.full_precision for x in apex if x.name.endswith(("ln1", "ln2")) for op in x.ops)
    softmax = [op for x in nanogpt if x.name.endswith("attn.qkv") for op in x.ops if op.full_precision]
    assert len(softmax) == 1 and not any(op.full_precision for x in apex if x.name.endswith("attn.qkv") for op in x.ops)


def test_a_convolution_with_bias_adds_it_in_a_pass_of_its_own() -> None:
    plain = conv2d("c", 64, 64, 3, 56)
    biased = conv2d("c", 64, 64, 3, 56, bias=True)
    assert len(plain.ops) == 1 and len(biased.ops) == 2 and biased.bias and not plain.bias
    assert biased.ops[1].moved == 2 * 64 * 56 * 56 and biased.forward_flops == plain.forward_flops + 64 * 56 * 56


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_every_layer_is_trainable_and_uniquely_named(name: str) -> None:
    model = get_model(name)
    assert isinstance(model, ModelSpec) and model.name == name
    assert all(isinstance(layer, Layer) and layer.params > 0 for layer in model.layers)
    assert all(layer.forward_flops >= 0 for layer in model.layers)
    names = [layer.name for layer in model.layers]
    assert len(names) == len(set(names))
    assert model.source and model.sample
    assert model.training_flops == pytest.approx(3 * model.forward_flops)


def test_resnet_layers_follow_torchvision_order() -> None:
    names = [layer.name for layer in get_model("resnet50").layers]
    assert names[:3] == ["conv1", "bn1", "layer1.0.conv1"]
    assert names[-1] == "fc"
    assert names.index("layer1.0.downsample.0") == names.index("layer1.0.bn3") + 1


@pytest.mark.parametrize("alias", ["ResNet50", "BERT-BASE", " gpt2 ", "WRN26-10", "ResNet32", "DeepFM"])
def test_names_are_case_and_dash_insensitive(alias: str) -> None:
    assert get_model(alias).name == alias.strip().lower().replace("-", "_")


def test_specs_are_cached() -> None:
    assert get_model("vgg16") is get_model("VGG16")


@given(st.text(max_size=12))
def test_unknown_names_list_the_valid_ones(name: str) -> None:
    if name.strip().lower().replace("-", "_") in MODEL_NAMES:
        return
    with pytest.raises(ValueError) as info:
        get_model(name)
    message = str(info.value)
    assert message.startswith(f"unknown model {name!r}; choose one of: ")
    assert all(valid in message for valid in MODEL_NAMES)


def test_non_string_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        get_model(50)  # type: ignore[arg-type]


# --- builders -------------------------------------------------------------------------------


@given(
    st.integers(1, 512), st.integers(1, 512), st.sampled_from([1, 3, 5, 7]),
    st.integers(1, 64), st.booleans(),
)  # fmt: skip
def test_conv2d_counts(cin: int, cout: int, kernel: int, size: int, bias: bool) -> None:
    layer = conv2d("c", cin, cout, kernel, size, bias=bias)
    assert layer.params == cout * cin * kernel * kernel + (cout if bias else 0)
    macs = cout * cin * kernel * kernel * size * size
    assert layer.forward_flops == 2 * macs + (cout * size * size if bias else 0)


def test_grouped_conv_divides_weights() -> None:
    assert conv2d("dw", 32, 32, 3, 8, groups=32).params == 32 * 9
    with pytest.raises(ValueError, match="groups"):
        conv2d("bad", 30, 32, 3, 8, groups=4)


@given(st.integers(1, 300), st.integers(1, 7), st.integers(1, 3), st.integers(0, 3))
def test_conv_output_size_matches_the_standard_formula(size: int, k: int, s: int, p: int) -> None:
    if size + 2 * p < k:
        return
    assert conv_output_size(size, k, s, p) == (size + 2 * p - k) // s + 1


@given(st.integers(1, 2048), st.integers(1, 2048), st.integers(1, 512), st.booleans())
def test_linear_flops_scale_with_tokens(fin: int, fout: int, tokens: int, bias: bool) -> None:
    one = linear("l", fin, fout, bias=bias)
    many = linear("l", fin, fout, tokens=tokens, bias=bias)
    assert many.params == one.params == fin * fout + (fout if bias else 0)
    assert many.forward_flops == pytest.approx(tokens * one.forward_flops)


@given(st.sampled_from([(64, 4), (128, 8), (768, 12)]), st.integers(1, 256))
def test_block_norm_placement_changes_only_the_order(shape: tuple[int, int], seq: int) -> None:
    d, heads = shape
    pre = transformer_block("b", d_model=d, n_heads=heads, d_ff=4 * d, seq_len=seq, pre_norm=True)
    post = transformer_block("b", d_model=d, n_heads=heads, d_ff=4 * d, seq_len=seq, pre_norm=False)
    assert sorted(pre, key=lambda x: x.name) == sorted(post, key=lambda x: x.name)
    assert sum(x.params for x in pre) == 12 * d * d + 13 * d
    assert [x.name for x in pre][0].endswith("ln1") and [x.name for x in post][0].endswith("qkv")


def test_block_rejects_heads_that_do_not_divide_width() -> None:
    with pytest.raises(ValueError, match="n_heads"):
        transformer_block("b", d_model=100, n_heads=3, d_ff=400, seq_len=8, pre_norm=True)


def test_deepfm_builder_scales_with_vocabulary() -> None:
    small = sum(x.params for x in deepfm_layers(features=1000))
    large = sum(x.params for x in deepfm_layers(features=2000))
    assert large - small == 1000 * (10 + 1)


# Transformer-XL: Dai et al. 2019 (arXiv:1901.02860) Table 1 give 151M for their WikiText-103 base
# model (d_model 410, 10 heads of 41, d_inner 2,100); NVIDIA's base widens it (wt103_base.yaml), so
# the published figure is checked on the paper's sizes and NVIDIA's on the closed form below.
TXL_PAPER_BASE_PARAMS = 151e6


def txl_params(n_layers: int, d: int, heads: int, d_head: int, d_inner: int, div_val: int) -> int:
    """Transformer-XL's parameters by hand (NVIDIA mem_transformer.py, proj_adaptive_softmax.py, wt103
    cutoffs 19,997 / 39,997 / 199,997 of 267,735 words): per layer QKV, position keys, output, two
    layer norms and the MLP; the two shared position biases; the adaptive input (per cluster a table
    of d / div_val^i and, for div_val > 1, its projection to d); the softmax's cluster vectors and
    biases, its output biases and, for div_val > 1, the head's own projection."""
    inner = heads * d_head
    per_layer = 3 * d * inner + d * inner + inner * d + 2 * d + (d * d_inner + d_inner) + (d_inner * d + d) + 2 * d
    sizes = [19997, 20000, 160000, 267735 - 199997]
    dims = [d // div_val**i for i in range(4)] if div_val > 1 else [d] * 4
    embedding = sum(s * e for s, e in zip(sizes, dims)) + (sum(d * e for e in dims) if div_val > 1 else 0)
    softmax = 3 * d + 3 + 267735 + (d * d if div_val > 1 else 0)
    return n_layers * per_layer + 2 * inner + embedding + softmax


def test_transformer_xl_on_the_papers_base_sizes_has_the_papers_151m() -> None:
    from sim.catalog.zoo.transformer_xl import TxlSize, transformer_xl_layers

    paper = transformer_xl_layers(TxlSize(16, 410, 10, 41, 2100, div_val=1, dropatt=False, seq_len=150))
    assert relative_error(sum(layer.params for layer in paper), TXL_PAPER_BASE_PARAMS) < 0.005


@pytest.mark.parametrize(
    ("name", "sizes"),
    [("transformer_xl", (16, 512, 8, 64, 2048, 1)), ("transformer_xl_large", (18, 1024, 16, 64, 4096, 4))],
)
def test_transformer_xl_params_follow_from_nvidias_configs(name: str, sizes: tuple[int, ...]) -> None:
    # 191,950,298 and 285,167,482. The paper's 257M for the large model is not what its architecture
    # adds up to (the reference code's count is this one), so the large model has no published check.
    assert get_model(name).params == txl_params(*sizes)


def test_transformer_xl_base_segment_costs_its_products_and_adaptive_softmax() -> None:
    from sim.catalog.zoo.transformer_xl import cluster_shares

    q, k, d, d_inner, layers = 192, 384, 512, 2048, 16
    # Zipf(1) over ranks: the head holds H(19,997) / H(267,735) of the tokens (~80%)
    assert cluster_shares()[0] == pytest.approx(
        sum(1 / r for r in range(1, 19998)) / sum(1 / r for r in range(1, 267736))
    )
    tails = sum(p * n for p, n in zip(cluster_shares()[1:], (20000, 160000, 67738)))
    products = layers * (
        2 * k * d * 3 * d  # QKV over memory and segment
        + 3 * 2 * q * k * d  # AC, BD, context
        + 2 * q * d * d  # output projection
        + 2 * 2 * q * d * d_inner  # MLP
    ) + 2 * q * d * (20000 + tails)  # head (19,997 words + 3 clusters) and the tails' tokens
    flops = get_model("transformer_xl").forward_flops
    # what the products leave out: biases, softmax, ReLU, residuals, layer norms (~2.5% here)
    assert 1.0 < flops / products < 1.04


def test_gnmt_lstm_products_follow_from_its_shapes() -> None:
    h, t = 1024, 50
    lstm_inputs = [h, 2 * h, h, h] + [h, 2 * h, 2 * h, 2 * h]  # encoder, then decoder layers
    directions = [2, 1, 1, 1] + [1, 1, 1, 1]
    lstm = sum(2 * t * d * 4 * h * (i + h) for i, d in zip(lstm_inputs, directions))
    layers = {layer.name: layer for layer in get_model("gnmt").layers}
    counted = sum(
        sum(op.flops for op in layer.ops if op.kind == "matmul")
        for name, layer in layers.items()
        if "rnn_layers" in name or name.endswith(".rnn")
    )
    assert counted == lstm
    # each step of each direction is a kernel of its own: 50 steps, the first layer both ways
    assert sum(op.kernels for op in layers["encoder.rnn_layers.0"].ops) > 2 * t


def test_ssd300_maps_give_the_papers_8732_default_boxes_and_params_add_up() -> None:
    from sim.catalog.zoo.ssd import default_boxes, ssd300_layers

    layers, sides = ssd300_layers()
    assert sides == [38, 19, 10, 5, 3, 1]  # ssd/model.py L125
    assert default_boxes(sides) == 8732  # Liu et al. 2016, section 3: 8,732 boxes per class for SSD300
    # ResNet-50 up to conv4_x: torchvision's 25,557,032 less conv5_x (layer4) and the classifier
    backbone = PUBLISHED_PARAMS["resnet50"] - sum(
        layer.params for layer in get_model("resnet50").layers if layer.name.startswith(("layer4", "fc"))
    )
    extras = sum(
        cin * w + 2 * w + w * 9 * cout + 2 * cout
        for cin, w, cout in zip((1024, 512, 512, 256, 256), (256, 256, 128, 128, 128), (512, 512, 256, 256, 256))
    )
    heads = sum(
        c * 9 * n * (4 + 81) + n * (4 + 81) for c, n in zip((1024, 512, 512, 256, 256, 256), (4, 6, 6, 6, 4, 4))
    )
    assert get_model("ssd300").params == backbone + extras + heads == 22_894_902


def test_sequence_lengths_are_those_of_the_published_pytorch_rows() -> None:
    import pandas as pd

    from sim.catalog.zoo.transformers import SEQUENCE_LENGTHS
    from sim.experiments.scaling import table

    rows: pd.DataFrame = table()
    for name in ("transformer_xl", "transformer_xl_large"):
        lengths = set(rows[(rows["model"] == name) & rows["framework"].str.startswith("PyTorch")]["seq_len"])
        assert lengths == {SEQUENCE_LENGTHS[name]}, name


def test_products_carry_their_smaller_dimension_as_a_matrix_product() -> None:
    """A convolution is a product of output channels by input channels times the kernel's area; a
    linear layer of its two widths; attention's products of a head's width (768 / 12 = 64)."""
    assert conv2d("c", 64, 256, 1, 56).ops[0].width == 64  # 1x1: 64 input channels
    assert conv2d("c", 256, 64, 3, 56).ops[0].width == 64  # 3x3: 64 outputs < 256 * 9
    assert conv2d("c", 3, 64, 7, 112, stride=2).ops[0].width == 64  # 3 * 49 = 147 > 64 outputs
    assert conv2d("c", 8, 512, 3, 7).ops[0].width == 72  # 8 * 9
    assert linear("fc", 768, 3072).ops[0].width == 768
    for attention in ("fused", "explicit"):
        layer = attention_core(linear("qkv", 768, 3 * 768, tokens=128), 128, 768, 12, attention)
        products = [op for op in layer.ops[1:] if op.kind == "matmul"]
        assert products and all(op.width == 64 for op in products)
