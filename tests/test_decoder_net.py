"""sim/numerics/decoder_net.py: the decoder workload.transformer describes, as torch.nn: the zoo's parameters layer
by layer, what autograd keeps per layer (by hand), and `numerics.model: transformer` end to end."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from real.saved_activations import saved_bytes  # noqa: E402
from sim.catalog.zoo.llm import DecoderArchitecture, decoder_model  # noqa: E402
from sim.config import parse_config  # noqa: E402
from sim.errors import ConfigError  # noqa: E402
from sim.numerics.decoder_net import DecoderLM, repeat_kv  # noqa: E402
from sim.numerics.zoo_nets import flat_layout  # noqa: E402
from sim.numerics.zoo_task import ZooTask, numerics_architecture  # noqa: E402

# d = 16, 4 heads of 4, 2 KV heads, SwiGLU of 24, 32 words, 8 tokens
TINY: dict[str, Any] = dict(
    layers=2, hidden=16, heads=4, kv_heads=2, mlp_width=24, vocab=32, seq_len=8, max_positions=8, mlp="swiglu"
)


def arch(**changes: Any) -> DecoderArchitecture:
    return DecoderArchitecture(**{**TINY, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"norm": "rmsnorm", "positions": "rotary", "tied_embeddings": False, "bias": False},
        {"mlp": "gelu", "mlp_width": 64, "kv_heads": 4},
    ],
)
def test_every_zoo_layer_has_its_parameter_count_in_the_zoos_order(changes: dict[str, Any]) -> None:
    a = arch(**changes)
    module, spec = DecoderLM(a), decoder_model("transformer", a, "test")
    params = dict(module.named_parameters())
    layout = flat_layout(module, spec)
    assert [name for name, _ in layout] == [layer.name for layer in spec.layers]
    for (name, names), layer in zip(layout, spec.layers):
        assert names and sum(params[n].numel() for n in names) == layer.params, name
    assert sum(p.numel() for p in module.parameters()) == spec.params


def test_grouped_query_projections_and_heads_by_hand() -> None:
    """K and V project d = 16 to 2 heads of 4 (8 outputs); repeat_kv copies each KV head to the 2 query heads
    it serves, in order."""
    module = DecoderLM(arch(bias=False))
    attention = module.model.layers[0].self_attn
    assert attention.k_proj.weight.shape == (8, 16) and attention.q_proj.weight.shape == (16, 16)
    kv = torch.arange(2 * 2 * 3 * 4, dtype=torch.float32).view(2, 2, 3, 4)
    expanded = repeat_kv(kv, 2)
    assert expanded.shape == (2, 4, 3, 4)
    assert torch.equal(expanded[:, 0], kv[:, 0]) and torch.equal(expanded[:, 1], kv[:, 0])
    assert torch.equal(expanded[:, 3], kv[:, 1])
    assert module(torch.zeros(2, 8, dtype=torch.int64)).shape == (2, 8, 32)


def test_the_head_is_the_token_table_when_tied() -> None:
    """Tied: word 31's logits move with its row of the token table even where no input token is 31."""
    torch.manual_seed(0)
    module = DecoderLM(arch())
    assert module.lm_head is None and DecoderLM(arch(tied_embeddings=False)).lm_head is not None
    tokens = torch.zeros(1, 8, dtype=torch.int64)
    with torch.no_grad():
        before = module(tokens)
        module.model.embed_tokens.weight[31] *= 3.0  # the head's row for word 31: its logits triple
        after = module(tokens)
    assert torch.allclose(after[..., 31], 3 * before[..., 31], rtol=1e-5, atol=1e-7)
    assert not torch.allclose(before[..., 31], after[..., 31]) and torch.equal(before[..., :31], after[..., :31])


def test_causal_attention_ignores_later_tokens() -> None:
    module = DecoderLM(arch(positions="rotary"))
    tokens = torch.randint(32, (1, 8), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[0, 5:] = (changed[0, 5:] + 1) % 32
    with torch.no_grad():
        a, b = module(tokens), module(changed)
    assert torch.allclose(a[0, :5], b[0, :5], atol=1e-6) and not torch.allclose(a[0, 5:], b[0, 5:])


def test_what_autograd_keeps_per_layer_by_hand() -> None:
    """2 sequences of 8 tokens (n t = 16), fp32, rotary, LayerNorm, SwiGLU, untied head, no biases. By hand, bytes
    per layer: the token ids (int64); each LayerNorm its input and its mean and reciprocal deviation per token;
    Q its input (K and V read the same tensor); the attention kernel its rotated Q, K and V repeated to 4 heads,
    its output and a log-sum-exp per head and token, and the first block's rotary cos and sin (8 x 4 each, shared
    by both blocks); the output projection nothing of its own (the CPU kernel writes its output token-major, so
    merging the heads is a view of what the kernel kept); the gate its input and output, the up projection its
    output and the SiLU's, the down projection the product; the head its input, the fp32 log-probabilities, the
    int64 targets and the loss's total weight. sim/catalog/zoo/llm.py counts d a token more for the output
    projection and none of the small terms."""
    a = arch(positions="rotary", tied_embeddings=False, bias=False)
    module, spec = DecoderLM(a), decoder_model("transformer", a, "test")
    layout = flat_layout(module, spec)
    tokens = torch.randint(32, (2, 8), generator=torch.Generator().manual_seed(1))
    targets = torch.randint(32, (2, 8), generator=torch.Generator().manual_seed(2))

    def loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())

    measured = dict(zip((n for n, _ in layout), saved_bytes(module, [tokens], targets, loss, layout, "fp32", "cpu")))
    nt, d, ff, f = 16, 16, 24, 4
    norm = nt * (d + 2) * f
    attention = 4 * nt * d * f + 4 * nt * f  # q, k, v, output; log-sum-exp of 4 heads
    rope = 2 * 8 * 4 * f
    block = {
        "input_layernorm": norm,
        "self_attn.q_proj": nt * d * f,
        "self_attn.k_proj": 0,
        "self_attn.o_proj": 0,
        "post_attention_layernorm": norm,
        "mlp.gate_proj": nt * (d + ff) * f,
        "mlp.up_proj": nt * 2 * ff * f,
        "mlp.down_proj": nt * ff * f,
    }
    expected = {"model.embed_tokens": nt * 8, "model.norm": norm, "lm_head": nt * d * f + nt * 32 * f + nt * 8 + 4}
    for i in range(2):
        expected |= {f"model.layers.{i}.{name}": value for name, value in block.items()}
        expected[f"model.layers.{i}.self_attn.v_proj"] = attention + (rope if i == 0 else 0)
    assert measured == expected


def decoder_config(**numerics: Any) -> dict[str, Any]:
    transformer = {**TINY, "seq_len": 16, "max_positions": 16}
    return {
        "cluster": {"topology": "star", "hosts": 2, "gpus_per_host": 1, "nic_gbps": 10},
        "workload": {"model": "transformer", "transformer": transformer, "batch_size": 2},
        "numerics": {
            "dataset": "synthetic",
            "model": "transformer",
            "zoo": {"samples": 20, "classes": 8, "sequence": 8},
            "global_batch": 4,
            "optimizer": {"name": "adam", "lr": 0.01},
            **numerics,
        },
        "policies": [{"name": "ring"}],
        "iterations": 2,
    }


def test_numerics_trains_workload_transformers_architecture_at_its_own_sequence() -> None:
    config = parse_config(decoder_config())
    a = numerics_architecture(config.workload.transformer.architecture(), config.numerics)
    assert (a.seq_len, a.max_positions, a.vocab) == (8, 16, 32)
    task = ZooTask(config.numerics, config.seed, a)
    assert task.size == decoder_model("transformer", a, "test").params
    x, y = task.data.x_train, task.data.y_train
    assert x.shape == (16, 8) and torch.equal(x[:, 1:], y[:, :-1])  # next-token prediction
    assert int(x.max()) < 8 and int(x.min()) >= 0  # symbols 0..classes-1 of the vocabulary
    grad, loss = task.gradient(task.initial, x[:4], y[:4])
    assert abs(loss - torch.log(torch.tensor(32.0)).item()) < 0.05  # N(0, 0.02) weights: near-uniform logits
    # the flat gradient, cut at the zoo's layers, is the one autograd gives the module's own parameters
    module = task.module
    module.zero_grad()
    task.loss(module(x[:4]), y[:4]).backward()
    for name, lo, hi, _ in task.slices:
        assert torch.allclose(grad[lo:hi], dict(module.named_parameters())[name].grad.reshape(-1), atol=1e-6)


@pytest.mark.parametrize(
    ("numerics", "workload", "field"),
    [
        ({"zoo": {"classes": 40, "sequence": 8}}, {}, "numerics.zoo.classes"),
        ({"zoo": {"classes": 8, "sequence": 32}}, {}, "numerics.zoo.sequence"),
        ({}, {"positions": "rotary", "hidden": 12, "heads": 4, "kv_heads": 4}, "workload.transformer.heads"),
    ],
)
def test_a_decoder_that_does_not_fit_is_refused_naming_the_field(
    numerics: dict[str, Any], workload: dict[str, Any], field: str
) -> None:
    cfg = decoder_config(**numerics)
    cfg["workload"]["transformer"] |= workload
    with pytest.raises(ConfigError, match=field):
        parse_config(cfg)


def test_numerics_transformer_needs_workload_transformer() -> None:
    cfg = decoder_config()
    cfg["workload"] = {"model": "gpt2", "batch_size": 2}
    with pytest.raises(ConfigError, match="workload.model must be the same model"):
        parse_config(cfg)
