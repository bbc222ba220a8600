"""Decoder-only transformers built from their architecture, against published totals and closed forms."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sim.catalog.zoo import get_model
from sim.catalog.zoo.builders import attention_core_flops
from sim.catalog.zoo.llm import GPT3_175B, LLAMA3_8B, DecoderArchitecture, decoder_layers
from sim.catalog.zoo.spec import shape_values

# Published totals: Llama 3 8B and 70B (Meta's model card, "8B" and "70B"; Hugging Face lists 8.03B
# and 70.6B for the released checkpoints), GPT-3 (Brown et al. 2020, Table 2.1, "175.0B").
PUBLISHED = {"llama3_8b": 8.03e9, "llama3_70b": 70.6e9, "gpt3_175b": 175.0e9}
SMALL = DecoderArchitecture(
    layers=2, hidden=64, heads=8, kv_heads=8, mlp_width=256, vocab=1000, seq_len=32, max_positions=32, bias=False
)


def relative_error(value: float, reference: float) -> float:
    return abs(value - reference) / reference


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameters_from_the_shapes_match_the_published_totals(name: str) -> None:
    model = get_model(name)
    from_shapes = sum(shape_values(layer.shapes) for layer in model.layers)
    assert from_shapes == model.params
    assert relative_error(from_shapes, PUBLISHED[name]) < 0.01


def test_llama3_8b_parameters_in_closed_form() -> None:
    # per block: Q and O 4096^2 each, K and V 4096 x (8 heads x 128), gate, up and down 4096 x 14336,
    # two RMSNorm gains; untied token table and head of 128,256 x 4096; the final norm
    block = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    total = 32 * block + 2 * 128256 * 4096 + 4096
    assert total == 8_030_261_248  # 16,060,522,496 bytes in bf16: Meta's checkpoint index gives that size
    assert get_model("llama3_8b").params == total


def test_gpt3_parameters_in_closed_form() -> None:
    # per block 12 d^2 of weights plus the biases (QKV 3d, output d, MLP 4d and d) and two LayerNorms
    # (2d each): 13d; a tied 50,257-token table, a 2,048-row position table and the final LayerNorm
    d = 12288
    total = 96 * (12 * d * d + 13 * d) + 50257 * d + 2048 * d + 2 * d
    assert get_model("gpt3_175b").params == total


def matrix_weights(layers: int, d: int, kv: int, ff: int, vocab: int, gated: bool) -> int:
    """Weights that enter matrix products each token: the projections, the MLP and the head (the token
    table's lookups and the position table are not products)."""
    return layers * (2 * d * d + 2 * d * kv + (3 if gated else 2) * d * ff) + d * vocab


@pytest.mark.parametrize(
    ("name", "layers", "d", "kv", "ff", "vocab", "seq", "gated"),
    [
        ("llama3_8b", 32, 4096, 1024, 14336, 128256, 8192, True),
        ("llama3_70b", 80, 8192, 1024, 28672, 128256, 8192, True),
        ("gpt3_175b", 96, 12288, 12288, 4 * 12288, 50257, 2048, False),
    ],
)
def test_training_flops_per_token_are_6n_plus_the_attention_term(
    name: str, layers: int, d: int, kv: int, ff: int, vocab: int, seq: int, gated: bool
) -> None:
    """6N (Kaplan et al. 2020, arXiv:2001.08361, section 2.1) for the weights in matrix products, plus
    12 * layers * d * seq for attention's score and context products forward and backward (Chowdhery et
    al. 2022, PaLM, arXiv:2204.02311, Appendix B: 12 L H Q T with H Q = d)."""
    expected = 6 * matrix_weights(layers, d, kv, ff, vocab, gated) + 12 * layers * d * seq
    per_token = get_model(name).training_flops / seq
    # norms, activations, softmax, rotary and residual adds are the rest: under 0.5% here; leaving out the
    # attention term would be 4% (GPT-3) to 22% (Llama 3 8B) short, the head 1% to 7%
    assert per_token >= expected
    assert relative_error(per_token, expected) < 0.01


def test_grouped_query_attention_shrinks_k_and_v_but_not_the_attention_products() -> None:
    full, grouped = SMALL, replace(SMALL, kv_heads=2)
    layers = {layer.name: layer for layer in decoder_layers(grouped)}
    assert layers["model.layers.0.self_attn.q_proj"].shapes == ((64, 64),)
    assert layers["model.layers.0.self_attn.k_proj"].shapes == ((16, 64),)  # 2 heads of 64 / 8
    assert layers["model.layers.0.self_attn.v_proj"].shapes == ((16, 64),)
    saved = sum(x.forward_flops for x in decoder_layers(full)) - sum(x.forward_flops for x in decoder_layers(grouped))
    # only K's and V's products shrink, from 64 to 16 outputs: 2 layers x 2 projections x 2 x 32 x 64 x 48
    assert saved == 2 * 2 * 2 * 32 * 64 * (64 - 16)


def test_the_attention_term_grows_with_the_square_of_the_sequence() -> None:
    short, long = replace(SMALL, max_positions=64), replace(SMALL, seq_len=64, max_positions=64)
    forward = [sum(x.forward_flops for x in decoder_layers(a)) for a in (short, long)]
    # everything else is linear in the tokens; the score square quadruples
    assert forward[1] - 2 * forward[0] == pytest.approx(2 * 2 * attention_core_flops(32, 64, 8))
    assert attention_core_flops(32, 64, 8) == 4 * 32 * 32 * 64 + 5 * 8 * 32 * 32


def test_swiglu_has_three_mlp_projections_and_gelu_two() -> None:
    gelu = {x.name: x for x in decoder_layers(SMALL)}
    swiglu = {x.name: x for x in decoder_layers(replace(SMALL, mlp="swiglu"))}
    mlp = "model.layers.0.mlp."
    assert [n.removeprefix(mlp) for n in gelu if n.startswith(mlp)] == ["up_proj", "down_proj"]
    assert [n.removeprefix(mlp) for n in swiglu if n.startswith(mlp)] == ["gate_proj", "up_proj", "down_proj"]
    assert swiglu[mlp + "gate_proj"].shapes == swiglu[mlp + "up_proj"].shapes == ((256, 64),)
    assert swiglu[mlp + "down_proj"].shapes == ((64, 256),)


def test_norm_kinds_hold_a_gain_or_a_gain_and_a_bias() -> None:
    name = "model.layers.1.post_attention_layernorm"
    layer = {x.name: x for x in decoder_layers(SMALL)}[name]
    rms = {x.name: x for x in decoder_layers(replace(SMALL, norm="rmsnorm"))}[name]
    assert layer.shapes == ((64,), (64,)) and rms.shapes == ((64,),)


def test_biases_add_a_vector_to_every_projection() -> None:
    with_bias = {x.name: x for x in decoder_layers(replace(SMALL, bias=True))}
    assert with_bias["model.layers.0.self_attn.k_proj"].shapes == ((64, 64), (64,))
    assert with_bias["model.layers.0.mlp.down_proj"].shapes == ((64, 256), (64,))
    extra = sum(x.params for x in with_bias.values()) - sum(x.params for x in decoder_layers(SMALL))
    assert extra == 2 * (4 * 64 + 256 + 64)  # Q, K, V, O; up; down


def test_a_tied_head_is_the_token_table_and_an_untied_one_a_layer_of_its_own() -> None:
    tied = decoder_layers(SMALL)
    untied = decoder_layers(replace(SMALL, tied_embeddings=False))
    assert "lm_head" not in [x.name for x in tied]
    assert untied[-1].name == "lm_head" and untied[-1].shapes == ((1000, 64),)
    assert sum(x.params for x in untied) - sum(x.params for x in tied) == 1000 * 64
    # the head's product is there either way
    assert sum(x.forward_flops for x in untied) == pytest.approx(sum(x.forward_flops for x in tied))
    # only an untied table's gradient is the looked-up rows alone
    assert tied[0].lookup is None and untied[0].lookup is not None


def test_llama_layers_follow_hugging_faces_names_in_forward_order() -> None:
    names = [layer.name for layer in decoder_layers(replace(LLAMA3_8B, layers=1))]
    block = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"]
    block += ["post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
    assert names == ["model.embed_tokens", *(f"model.layers.0.{n}" for n in block), "model.norm", "lm_head"]


def test_rotary_positions_have_no_table_and_learned_ones_do() -> None:
    rotary = [x.name for x in decoder_layers(replace(SMALL, positions="rotary"))]
    learned = {x.name: x for x in decoder_layers(SMALL)}
    assert "model.embed_positions" not in rotary
    assert learned["model.embed_positions"].shapes == ((32, 64),)
    assert GPT3_175B.positions == "learned" and LLAMA3_8B.positions == "rotary"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": 6}, "heads: 6 does not divide hidden 64; allowed: a divisor of it"),
        ({"kv_heads": 3}, "kv_heads: 3 does not divide heads 8; allowed: a divisor of it"),
        ({"layers": 0}, "layers: 0; allowed: an integer >= 1"),
        ({"mlp": "relu"}, "mlp: 'relu'; allowed: gelu, swiglu"),
        ({"norm": "batchnorm"}, "norm: 'batchnorm'; allowed: layernorm, rmsnorm"),
        (
            {"seq_len": 33},
            r"seq_len: 33 is longer than the learned position table \(max_positions 32\); allowed: 1 to 32",
        ),
    ],
)
def test_an_impossible_architecture_is_refused_naming_the_field(change: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        replace(SMALL, **change)
