"""Transformer language models: BERT-base, BERT-large and GPT-2 small (124M).

A sample is one sequence. BERT is taken at 128 tokens, the length of the first (and longest) phase
of its pre-training (Devlin et al. 2019, section A.2); GPT-2 at its full 1,024-token context.

The zoo's layers run as this project's torch.nn modules do (sim.numerics.zoo_nets, what `syncsim
real` trains): fused attention (`scaled_dot_product_attention`), no dropout, BERT trained as a
masked language model through its tied word embedding, GPT-2 through its tied head, each with the
cross-entropy over the vocabulary. `reference=True` builds them as the published figures ran them
(Hugging Face's and NVIDIA's BERT fine-tuning, nanoGPT's first GPT-2): explicit attention and
dropout, and BERT with its pooler instead of a vocabulary head.
"""

from __future__ import annotations

from dataclasses import replace

from sim.catalog.zoo.builders import (
    TOKEN_ZIPF_S,
    aligned,
    cross_entropy,
    embedding,
    layer_norm,
    linear,
    plus_flops,
    transformer_block,
)
from sim.catalog.zoo.gnmt import GNMT_SEQ_LEN, gnmt_layers
from sim.catalog.zoo.spec import Layer, Lookup, ModelSpec, Op
from sim.catalog.zoo.transformer_xl import TXL_SIZES, transformer_xl_layers

BERT_VOCAB = 30522
BERT_POSITIONS = 512
BERT_TOKEN_TYPES = 2
BERT_SEQ_LEN = 128

GPT2_VOCAB = 50257
GPT2_POSITIONS = 1024
GPT2_SEQ_LEN = 1024
# tokens per sample each model's FLOPs are counted for (timing runs and profiles train at these);
# Transformer-XL's segments and GNMT's sentences (a side) at the lengths of their published rows
SEQUENCE_LENGTHS = {
    "bert_base": BERT_SEQ_LEN,
    "bert_large": BERT_SEQ_LEN,
    "gpt2": GPT2_SEQ_LEN,
    "transformer_xl": TXL_SIZES["transformer_xl"].seq_len,
    "transformer_xl_large": TXL_SIZES["transformer_xl_large"].seq_len,
    "gnmt": GNMT_SEQ_LEN,
}


def bert_layers(
    *, n_layers: int, d_model: int, n_heads: int, seq_len: int = BERT_SEQ_LEN, reference: bool = False
) -> tuple[Layer, ...]:
    """BERT's embeddings, encoder and pooler (Hugging Face `BertModel`'s parameters). The zoo's
    module ends in the masked-LM decoder tied to the word embedding (logits over the vocabulary for
    every token, then the loss), in the pooler's place, which it leaves unused; `reference`: as
    Hugging Face's and NVIDIA's fine-tuning code runs it (explicit attention, dropout, the pooler)."""
    tokens = seq_len
    words = Lookup(per_sample=seq_len, zipf_s=TOKEN_ZIPF_S, hot_rows="first", source=f"{seq_len} tokens per sequence")
    positions = Lookup(per_sample=seq_len, space=seq_len, source=f"positions 0..{seq_len - 1} of every sequence")
    width = tokens * d_model
    layers = [
        embedding("embeddings.word", BERT_VOCAB, d_model, words),
        embedding("embeddings.position", BERT_POSITIONS, d_model, positions),
        embedding("embeddings.token_type", BERT_TOKEN_TYPES, d_model, reads=seq_len),
        # Summing the three embeddings (2 adds per element) is folded into the layer norm (the
        # reference's dropout after it is an op of its own).
        plus_flops(
            layer_norm("embeddings.ln", d_model, tokens, full_precision=not reference),
            2 * width,
            moved=6 * width,
            kernels=2,
        ),
    ]
    if reference:
        layers[-1] = plus_flops(layers[-1], 0, moved=2 * width)
    for i in range(n_layers):
        layers += transformer_block(
            f"encoder.{i}",
            d_model=d_model,
            n_heads=n_heads,
            d_ff=4 * d_model,
            seq_len=seq_len,
            pre_norm=False,
            reference=reference,
        )
    pooler = linear("pooler", d_model, d_model)
    if reference:  # the pooler reads the first token only; its tanh is folded in
        layers.append(plus_flops(pooler, d_model, moved=2 * d_model))
    else:  # the decoder's logits (a d_model x vocab product per token) and the loss
        flops = 2.0 * d_model * BERT_VOCAB * tokens
        decoder = Op("matmul", flops, tokens * (d_model + BERT_VOCAB), aligned=aligned(d_model, BERT_VOCAB))
        head = replace(pooler, forward_flops=decoder.flops, ops=(decoder,))
        layers.append(cross_entropy(head, BERT_VOCAB, tokens))
    return tuple(layers)


_BERT_SOURCE = (
    "Devlin et al. 2019 (arXiv:1810.04805), parameters as Hugging Face BertModel, trained as a masked LM"
    " through the tied word embedding"
)


def bert_base() -> ModelSpec:
    return ModelSpec(
        name="bert_base",
        layers=bert_layers(**_SIZES["bert_base"]),
        source=_BERT_SOURCE,
        sample=f"one {BERT_SEQ_LEN}-token sequence",
    )


def bert_large() -> ModelSpec:
    return ModelSpec(
        name="bert_large",
        layers=bert_layers(**_SIZES["bert_large"]),
        source=_BERT_SOURCE,
        sample=f"one {BERT_SEQ_LEN}-token sequence",
    )


def gpt2_layers(
    *, n_layers: int = 12, d_model: int = 768, n_heads: int = 12, seq_len: int = GPT2_SEQ_LEN, reference: bool = False
) -> tuple[Layer, ...]:
    """GPT-2: pre-norm decoder blocks, a final layer norm, an LM head tied to the token table and
    the loss over its logits (run as the zoo's module runs it: fused attention, no dropout).
    `reference`: as nanoGPT's first version ran it (explicit attention, dropout; under torch.autocast,
    so its nn.LayerNorm and softmax run in FP32: karpathy/nanoGPT@5a725d9 model.py L55, L83-L85,
    L115; train.py L246)."""
    tokens = seq_len
    # `wte` is also the LM head, whose gradient touches every row: it is dense, not a lookup table.
    width = tokens * d_model
    layers = [
        embedding("wte", GPT2_VOCAB, d_model, reads=seq_len),
        # Adding position to token embeddings (one add per element); the reference's dropout after it.
        plus_flops(embedding("wpe", GPT2_POSITIONS, d_model, reads=seq_len), width, moved=3 * width),
    ]
    if reference:
        layers[-1] = plus_flops(layers[-1], 0, moved=2 * width)
    for i in range(n_layers):
        layers += transformer_block(
            f"h.{i}",
            d_model=d_model,
            n_heads=n_heads,
            d_ff=4 * d_model,
            seq_len=seq_len,
            pre_norm=True,
            reference=reference,
            autocast=reference,
        )
    # The LM head reuses `wte`'s weights, so it adds no parameters and is not a layer of its own;
    # its logits (a d_model x vocab product per token) are folded into the final layer norm,
    # which is where its work happens in the forward and backward order.
    head_flops = 2.0 * d_model * GPT2_VOCAB * tokens
    # the head reads the table once per batch, which the per-sample count leaves out
    head = plus_flops(
        layer_norm("ln_f", d_model, tokens),  # nn.LayerNorm: FP32 under autocast, the zoo's and nanoGPT's
        head_flops,
        moved=tokens * (d_model + GPT2_VOCAB),
        kind="matmul",
        aligned=aligned(d_model, GPT2_VOCAB),
    )
    layers.append(cross_entropy(head, GPT2_VOCAB, tokens))
    return tuple(layers)


def gpt2() -> ModelSpec:
    return ModelSpec(
        name="gpt2",
        layers=gpt2_layers(),
        source="Radford et al. 2019, 124M configuration (12 layers, d=768), tied LM head",
        sample=f"one {GPT2_SEQ_LEN}-token sequence",
    )


_SIZES = {
    "bert_base": {"n_layers": 12, "d_model": 768, "n_heads": 12},
    "bert_large": {"n_layers": 24, "d_model": 1024, "n_heads": 16},
    "gpt2": {"n_layers": 12, "d_model": 768, "n_heads": 12},
}


def layers_at_sequence_length(name: str, seq_len: int, *, reference: bool = False) -> tuple[Layer, ...]:
    """The layers of the zoo sequence model `name` for sequences of `seq_len` tokens (published
    benchmarks use other lengths than the zoo's sample); `reference`: as the published code runs
    it (`bert_layers`, `gpt2_layers`; Transformer-XL and GNMT are always built so)."""
    if name in TXL_SIZES:
        return transformer_xl_layers(TXL_SIZES[name], seq_len)
    if name == "gnmt":
        return gnmt_layers(seq_len=seq_len)
    if name not in _SIZES:
        raise ValueError(f"model {name!r} has no sequence length; sequence models: {', '.join(SEQUENCE_LENGTHS)}")
    build = gpt2_layers if name == "gpt2" else bert_layers
    return build(**_SIZES[name], seq_len=seq_len, reference=reference)
