"""GNMT v2 (Wu et al. 2016, arXiv:1609.08144, with NVIDIA's attention) on WMT16 English-German.

As NVIDIA's PyTorch code builds it (`_GNMT` below, cited file by file): a shared 1,024-wide embedding
of the 32,320-token BPE vocabulary, a 4-layer LSTM encoder whose first layer is bidirectional, a
4-layer LSTM decoder whose first layer feeds a normalised Bahdanau attention, the context then
concatenated to the input of every later decoder layer, residual connections from the third layer
on, and a classifier over the vocabulary trained with label smoothing.

A sample is one sentence pair, both sides at the training maximum of 50 tokens (BOS and EOS
included): the published rows give no sequence length, and the sampler batches sentences of
similar length, so a batch pads little beyond its longest pair.
"""

from __future__ import annotations

from sim.catalog.zoo.builders import (
    SOFTMAX_FLOPS,
    TOKEN_ZIPF_S,
    cross_entropy,
    embedding,
    linear,
    lstm,
    plus_flops,
)
from sim.catalog.zoo.spec import Layer, Lookup, ModelSpec, Op

_DLE = "NVIDIA/DeepLearningExamples@729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"
_GNMT = f"{_DLE}:PyTorch/Translation/GNMT"

# 32,000 BPE merges (scripts/wmt16_en_de.sh L171) give a vocabulary that TF32 and FP16 runs pad to a
# multiple of 8 for tensor cores (train.py L426-L427, seq2seq/utils.py L294-L299; FP32 runs keep the
# few rows less): 32,320 tokens, the synthetic vocabulary's default that mirrors it (README.md L690-L691).
GNMT_VOCAB = 32320
# hidden size and layers (seq2seq/models/gnmt.py L34; README.md L88-L105)
GNMT_HIDDEN = 1024
GNMT_LAYERS = 4
# --train-max-length, BOS and EOS included (train.py L208; README.md L567-L569)
GNMT_SEQ_LEN = 50


def bahdanau_attention(prefix: str, *, hidden: int, queries: int, keys: int) -> Layer:
    """BahdanauAttention with normalisation (seq2seq/models/attention.py L30-L185) for `queries`
    decoder positions over `keys` encoder positions: both projected, their sum over every pair
    (queries x keys x hidden values written out), the bias, tanh and the product with the
    normalised attention vector, masked softmax, then the context."""
    pairs = float(queries * keys)
    ops = (
        Op("matmul", 2.0 * queries * hidden * hidden, 2.0 * queries * hidden),  # linear_q
        Op("matmul", 2.0 * keys * hidden * hidden, 2.0 * keys * hidden),  # linear_k
        Op("elementwise", pairs * hidden, (queries + keys + pairs) * hidden),  # the expanded sum
        Op("elementwise", pairs * hidden, 2 * pairs * hidden),  # + normalize_bias
        Op("elementwise", 3 * pairs * hidden, 2 * pairs * hidden),  # tanh
        Op("matmul", 2 * pairs * hidden, pairs * hidden + pairs, aligned=False),  # x linear_att (a vector)
        Op("elementwise", SOFTMAX_FLOPS * pairs, 4 * pairs, 2),  # mask, softmax
        Op("matmul", 2 * pairs * hidden, pairs + (keys + queries) * hidden),  # context
    )
    # linear_q, linear_k, linear_att, normalize_scalar, normalize_bias (attention.py L55-L66)
    params = 2 * hidden * hidden + hidden + 1 + hidden
    # in named_parameters order: the module's own vectors (linear_att, normalize_scalar, normalize_bias)
    # come before its two bias-free nn.Linear children (linear_q, linear_k)
    shapes = ((hidden,), (1,), (hidden,), (hidden, hidden), (hidden, hidden))
    return Layer(prefix, params, sum(op.flops for op in ops), ops=ops, shapes=shapes)


def gnmt_layers(
    *, seq_len: int = GNMT_SEQ_LEN, hidden: int = GNMT_HIDDEN, n_layers: int = GNMT_LAYERS
) -> tuple[Layer, ...]:
    """GNMT (seq2seq/models/gnmt.py) for one pair of `seq_len`-token sentences, in forward order:
    the shared embedding, the encoder (seq2seq/models/encoder.py L40-L117), the decoder
    (seq2seq/models/decoder.py L113-L244) and its classifier with the label-smoothed loss
    (seq2seq/train/smoothing.py)."""
    src = tgt = seq_len
    h = hidden
    # One table for both sides (share_embedding, gnmt.py L52-L55): source and target tokens looked up,
    # only those rows get a gradient.
    words = Lookup(per_sample=src + tgt, zipf_s=TOKEN_ZIPF_S, hot_rows="first", source=f"{src} + {tgt} tokens per pair")
    layers: list[Layer] = [embedding("encoder.embedder", GNMT_VOCAB, h, words)]
    dropout = {"moved": 2.0 * src * h}  # on each LSTM layer's input (encoder.py L99-L113)
    first = plus_flops(lstm("encoder.rnn_layers.0", h, h, src, bidirectional=True), 0.0, **dropout)
    layers.append(plus_flops(first, 0.0, moved=2.0 * src * h + 4.0 * src * h, kernels=2))  # pack, pad back
    layers.append(plus_flops(lstm("encoder.rnn_layers.1", 2 * h, h, src), 0.0, moved=4.0 * src * h))
    for i in range(2, n_layers):
        layer = plus_flops(lstm(f"encoder.rnn_layers.{i}", h, h, src), 0.0, **dropout)
        layers.append(plus_flops(layer, src * h, moved=3.0 * src * h))  # residual
    layers.append(plus_flops(lstm("decoder.att_rnn.rnn", h, h, tgt), 0.0, moved=2.0 * tgt * h))
    layers.append(bahdanau_attention("decoder.att_rnn.attn", hidden=h, queries=tgt, keys=src))
    for i in range(n_layers - 1):
        # the context concatenated to the input, then dropout (decoder.py L228-L239)
        layer = plus_flops(lstm(f"decoder.rnn_layers.{i}", 2 * h, h, tgt), 0.0, moved=8.0 * tgt * h, kernels=2)
        layers.append(plus_flops(layer, tgt * h, moved=3.0 * tgt * h) if i else layer)  # residual from the 3rd
    classifier = linear("decoder.classifier.classifier", h, GNMT_VOCAB, tokens=tgt)
    # log-softmax in FP32, the target's log-probability gathered, and the smoothing term's mean over
    # the vocabulary (a second read of the log-probabilities)
    loss = cross_entropy(classifier, GNMT_VOCAB, tgt)
    layers.append(plus_flops(loss, float(GNMT_VOCAB * tgt), moved=float(GNMT_VOCAB * tgt), full_precision=True))
    return tuple(layers)


def gnmt() -> ModelSpec:
    return ModelSpec(
        name="gnmt",
        layers=gnmt_layers(),
        source=f"Wu et al. 2016 (arXiv:1609.08144), GNMT v2 as {_GNMT} builds it (4 + 4 LSTM layers of 1,024)",
        sample=f"one English-German sentence pair, {GNMT_SEQ_LEN} tokens a side",
    )
