"""Transformer-XL (Dai et al. 2019, arXiv:1901.02860) on WikiText-103, as NVIDIA's PyTorch code trains it.

A sample is one segment of `tgt_len` tokens, attending to itself and to the `mem_len` hidden states
cached from the previous segment (no gradient flows into them). Relative positional attention
(`attn_type` 0), post-norm layers, an adaptive input embedding tied to an adaptive softmax over the
267,735-word vocabulary. NVIDIA's base model is not the paper's: it widens d_model 410 to 512, 10
heads of 41 to 8 of 64, d_inner 2,100 to 2,048 and segments of 150 to 192 tokens for tensor cores;
its large model is the paper's. The figures below are those of the code that published the
throughputs in sim/catalog/published_scaling.csv (`_TXL` below), cited file by file.

The layers run as that code runs them: explicit attention (score products, relative shift, softmax),
dropout, layer norms in half precision (Apex AMP's O2), the softmax's tail clusters evaluated only
for the tokens that fall in them.
"""

from __future__ import annotations

from functools import cache
from typing import NamedTuple

from sim.catalog.zoo.builders import (
    RELU_FLOPS,
    SOFTMAX_FLOPS,
    TOKEN_ZIPF_S,
    aligned,
    layer_norm,
    linear,
    plus_flops,
)
from sim.catalog.zoo.spec import Layer, ModelSpec, Op

_DLE = "NVIDIA/DeepLearningExamples@729963dd47e7c8bd462ad10bfac7a7b0b604e6dd"
_TXL = f"{_DLE}:PyTorch/LanguageModeling/Transformer-XL/pytorch"

# WikiText-103's word vocabulary (wt103_base.yaml L52, `manual_config`), numbered by frequency
# (utils/vocabulary.py builds it from a counter's most common words).
TXL_VOCAB = 267735
# The adaptive softmax's cluster ends for wt103 (train.py L807-L812): a head of the 19,997 most
# frequent words and three tail clusters.
TXL_CUTOFFS = (19997, 39997, 199997)
# Segment and memory lengths: base wt103_base.yaml L22-L23, large wt103_large.yaml L22-L23 (also
# the README's hyper-parameter table, README.md L155-L156); the published rows used these (their seq_len).
TXL_BASE_SEQ_LEN = 192
TXL_LARGE_SEQ_LEN = 384


class TxlSize(NamedTuple):
    """One Transformer-XL configuration (`dropatt`: dropout on the attention probabilities)."""

    n_layers: int
    d_model: int
    n_heads: int
    d_head: int
    d_inner: int
    div_val: int
    dropatt: bool
    seq_len: int


# Base: wt103_base.yaml L9-L15 (div_val 1: train.py's default, L161, as the manual_config L52 says);
# large: wt103_large.yaml L9-L15 and L32.
TXL_SIZES = {
    "transformer_xl": TxlSize(16, 512, 8, 64, 2048, div_val=1, dropatt=False, seq_len=TXL_BASE_SEQ_LEN),
    "transformer_xl_large": TxlSize(18, 1024, 16, 64, 4096, div_val=4, dropatt=True, seq_len=TXL_LARGE_SEQ_LEN),
}


@cache
def cluster_shares(
    vocab: int = TXL_VOCAB, cutoffs: tuple[int, ...] = TXL_CUTOFFS, zipf_s: float = TOKEN_ZIPF_S
) -> tuple[float, ...]:
    """The share of tokens in the head and in each tail cluster, the vocabulary's ranks drawn from a
    Zipf law (exponent 1 by default: a cluster [a, b) holds (H_b - H_a) / H_vocab of the tokens)."""
    ends = (0, *cutoffs, vocab)
    weights = [sum(1.0 / (rank**zipf_s) for rank in range(a + 1, b + 1)) for a, b in zip(ends, ends[1:])]
    return tuple(w / sum(weights) for w in weights)


def _cluster_dims(d_model: int, div_val: int, clusters: int) -> list[int]:
    # adaptive input and softmax: cluster i's vectors have d_embed // div_val**i values
    # (mem_transformer.py L480, utils/proj_adaptive_softmax.py L92; d_embed = d_model, train.py L262-L263)
    return [d_model // div_val**i for i in range(clusters)]


def _sizes(vocab: int, cutoffs: tuple[int, ...]) -> list[int]:
    ends = (0, *cutoffs, vocab)
    return [b - a for a, b in zip(ends, ends[1:])]


def adaptive_input(seq_len: int, d_model: int, div_val: int) -> list[Layer]:
    """The word embedding (mem_transformer.py L453-L513): one table (div_val 1) or one per cluster with
    its projection up to d_model, then scaled by sqrt(d_model) and dropped out. Tied to the softmax,
    so every row gets a gradient: a dense table, as GPT-2's (no lookup pattern)."""
    sizes, shares = _sizes(TXL_VOCAB, TXL_CUTOFFS), cluster_shares()
    dims = _cluster_dims(d_model, div_val, len(sizes)) if div_val > 1 else [d_model] * len(sizes)
    width = float(seq_len * d_model)
    read = sum(2.0 * seq_len * share * dim for share, dim in zip(shares, dims))
    if div_val == 1:  # one nn.Embedding and, d_embed being d_model, no projection
        table = Layer(
            "word_emb.emb_layers",
            TXL_VOCAB * d_model,
            0.0,
            rows=TXL_VOCAB,
            ops=(Op("lookup", 0.0, read),),
            shapes=((TXL_VOCAB, d_model),),
        )
        return [plus_flops(table, width, moved=4 * width, kernels=2)]  # scale, dropout
    # per cluster: a mask, its indices, their gather, the lookup, the projection, the copy back
    ops = (Op("lookup", 0.0, read + 4.0 * seq_len * len(sizes), 4 * len(sizes)),)
    # per cluster an nn.Embedding (size, dim) and a projection (d_model, dim) (AdaptiveEmbedding in mem_transformer.py)
    tables = Layer(
        "word_emb.emb_layers",
        sum(s * d for s, d in zip(sizes, dims)),
        0.0,
        rows=TXL_VOCAB,
        ops=ops,
        shapes=tuple(zip(sizes, dims)),
    )
    flops = sum(2.0 * seq_len * share * dim * d_model for share, dim in zip(shares, dims))
    moved = sum(seq_len * share * (dim + 3 * d_model) for share, dim in zip(shares, dims))  # product, index_copy
    product = Op("matmul", flops, moved, 2 * len(sizes), aligned=False)  # 16-wide clusters
    projections = Layer(
        "word_emb.emb_projs",
        sum(d * d_model for d in dims),
        flops,
        ops=(product,),
        shapes=tuple((d_model, d) for d in dims),
    )
    return [tables, plus_flops(projections, width, moved=5 * width, kernels=3)]  # zero fill, scale, dropout


def relative_attention(
    prefix: str, *, seq_len: int, mem_len: int, d_model: int, n_heads: int, d_head: int, dropatt: bool
) -> list[Layer]:
    """RelPartialLearnableMultiHeadAttn (mem_transformer.py L229-L305): Q, K, V of the memory and the
    segment in one product and the content scores AC; the position keys (one product per batch of the
    k sinusoid encodings every segment shares: 2 k d_model n_heads d_head FLOPs, under 1/batch of the
    QKV product's, left out per sample) with the position scores BD, the relative shift, softmax and
    the context; the output projection, dropout, residual and layer norm. The adds of r_w_bias and
    r_r_bias to the queries are on those layers (`bias_adds`)."""
    q, k, inner = seq_len, seq_len + mem_len, n_heads * d_head
    scores = float(n_heads * q * k)
    product = 2.0 * q * k * inner  # each of AC, BD and the context
    qkv = linear(f"{prefix}.qkv_net", d_model, 3 * inner, tokens=k, bias=False)
    qkv = plus_flops(qkv, 0.0, moved=2.0 * k * d_model)  # cat(memory, segment)
    qkv = plus_flops(qkv, product, moved=q * inner + k * inner + scores, kind="matmul")  # AC
    ops = [
        Op("matmul", product, q * inner + k * inner + scores),  # BD
        Op("elementwise", 0.0, 2.0 * scores + n_heads * q),  # relative shift: pad and view
        Op("elementwise", 2.0 * scores, 3.0 * scores),  # add_and_scale (one TorchScript kernel)
        Op("elementwise", 0.0, 2.0 * scores),  # causal mask
        Op("elementwise", SOFTMAX_FLOPS * scores, 2.0 * scores),
        *([Op("elementwise", 0.0, 3.0 * scores)] if dropatt else []),
        Op("matmul", product, scores + k * inner + q * inner),  # context
        Op("elementwise", 0.0, 2.0 * q * inner),  # heads merged (contiguous)
    ]
    # r_net: a bias-free nn.Linear(d_model, inner)
    r_net = Layer(
        f"{prefix}.r_net", d_model * inner, sum(op.flops for op in ops), ops=tuple(ops), shapes=((inner, d_model),)
    )
    residual = float(q * d_model)
    out = linear(f"{prefix}.o_net", inner, d_model, tokens=q, bias=False)
    out = plus_flops(out, residual, moved=5 * residual, kernels=2)  # dropout, residual add
    return [qkv, r_net, out, layer_norm(f"{prefix}.layer_norm", d_model, q, full_precision=False)]


def bias_adds(name: str, *, seq_len: int, n_heads: int, d_head: int, n_layers: int) -> Layer:
    """r_w_bias or r_r_bias (mem_transformer.py L614-L615, L266, L269): one vector per head that every
    layer adds to its queries. Its gradient sums all layers' and is complete after the first layer's
    backward, where it stands in the order; the adds themselves (tiny) are counted here."""
    inner = n_heads * d_head
    add = Op("elementwise", float(n_layers * seq_len * inner), 2.0 * n_layers * seq_len * inner, n_layers)
    return Layer(name, inner, add.flops, ops=(add,), shapes=((n_heads, d_head),))  # (n_head, d_head)


def feed_forward(prefix: str, *, seq_len: int, d_model: int, d_inner: int) -> list[Layer]:
    """PositionwiseFF (mem_transformer.py L48-L81): linear, ReLU, dropout, linear, dropout, residual, layer norm."""
    hidden, residual = float(seq_len * d_inner), float(seq_len * d_model)
    fc = linear(f"{prefix}.CoreNet.0", d_model, d_inner, tokens=seq_len)
    fc = plus_flops(plus_flops(fc, RELU_FLOPS * hidden, moved=2 * hidden), 0.0, moved=2 * hidden)
    proj = plus_flops(
        linear(f"{prefix}.CoreNet.3", d_inner, d_model, tokens=seq_len), residual, moved=5 * residual, kernels=2
    )
    return [fc, proj, layer_norm(f"{prefix}.layer_norm", d_model, seq_len, full_precision=False)]


def adaptive_softmax(seq_len: int, d_model: int, div_val: int, n_layers: int) -> Layer:
    """ProjectedAdaptiveLogSoftmax (utils/proj_adaptive_softmax.py L34-L200) with its own parameters (the
    cluster vectors and biases, the output biases, and for div_val > 1 the head's projection; the
    weights are the embedding's): head logits over 19,997 words and 3 cluster entries for every token,
    each tail cluster's logits for the tokens in it. The output's dropout and the memory update (the
    n_layers cached inputs stacked) that end the forward pass are folded in."""
    sizes, shares = _sizes(TXL_VOCAB, TXL_CUTOFFS), cluster_shares()
    dims = _cluster_dims(d_model, div_val, len(sizes)) if div_val > 1 else [d_model] * len(sizes)
    clusters = len(sizes) - 1
    head = sizes[0] + clusters
    params = clusters * d_model + clusters + TXL_VOCAB + (d_model * d_model if div_val > 1 else 0)
    # in named_parameters order (ProjectedAdaptiveLogSoftmax.__init__): cluster_weight, cluster_bias, the
    # output biases (one over the vocabulary, or one per cluster), the head's projection (d_proj, d_embed)
    biases = ((TXL_VOCAB,),) if div_val == 1 else tuple((size,) for size in sizes)
    shapes = ((clusters, d_model), (clusters,), *biases, *(((d_model, d_model),) if div_val > 1 else ()))
    q = float(seq_len)
    ops = []
    # head: (hidden x proj) x weights^T for div_val > 1 (einsum contracts the small side first)
    proj = 2.0 * q * d_model * d_model if div_val > 1 else 0.0
    ops.append(Op("matmul", proj + 2.0 * q * dims[0] * head, q * (d_model + head), aligned=aligned(dims[0], head)))
    ops.append(Op("elementwise", SOFTMAX_FLOPS * q * head, 2.0 * q * head))  # log-softmax
    ops.append(Op("elementwise", 0.0, 2.0 * q * head + 4.0 * q * len(sizes), 4 * len(sizes)))  # rows per cluster
    for size, share, dim in zip(sizes[1:], shares[1:], dims[1:]):
        n = q * share
        flops = 2.0 * n * (d_model * dim if div_val > 1 else 0.0) + 2.0 * n * dim * size
        ops.append(Op("matmul", flops, n * (2 * d_model + size), aligned=aligned(dim, size)))
        ops.append(Op("elementwise", SOFTMAX_FLOPS * n * size, 2.0 * n * size + 2 * n, 2))  # log-softmax, gather
    width = q * d_model
    ops.append(Op("elementwise", 0.0, 2.0 * width))  # dropout of the last layer's output
    ops.append(Op("elementwise", 0.0, 2.0 * n_layers * width))  # memory: the layers' inputs stacked
    return Layer("crit", params, sum(op.flops for op in ops), ops=tuple(ops), bias=True, shapes=shapes)


def transformer_xl_layers(size: TxlSize, seq_len: int | None = None, mem_len: int | None = None) -> tuple[Layer, ...]:
    """MemTransformerLM (mem_transformer.py L516-L800) for one segment of `seq_len` tokens (default:
    the size's) with `mem_len` cached positions (default: as many, as both configs train), in forward
    order. The two relative position biases every layer shares (r_w_bias, r_r_bias) are layers of their own."""
    seq_len = size.seq_len if seq_len is None else seq_len
    mem_len = seq_len if mem_len is None else mem_len
    d_model = size.d_model
    layers = adaptive_input(seq_len, d_model, size.div_val)
    layers += [
        bias_adds(name, seq_len=seq_len, n_heads=size.n_heads, d_head=size.d_head, n_layers=size.n_layers)
        for name in ("r_w_bias", "r_r_bias")
    ]
    for i in range(size.n_layers):
        layers += relative_attention(
            f"layers.{i}.dec_attn",
            seq_len=seq_len,
            mem_len=mem_len,
            d_model=d_model,
            n_heads=size.n_heads,
            d_head=size.d_head,
            dropatt=size.dropatt,
        )
        layers += feed_forward(f"layers.{i}.pos_ff", seq_len=seq_len, d_model=d_model, d_inner=size.d_inner)
    layers.append(adaptive_softmax(seq_len, d_model, size.div_val, size.n_layers))
    return tuple(layers)


def _spec(name: str, label: str) -> ModelSpec:
    size = TXL_SIZES[name]
    return ModelSpec(
        name=name,
        layers=transformer_xl_layers(size),
        source=f"Dai et al. 2019 (arXiv:1901.02860), {label} as {_TXL} trains it on WikiText-103",
        sample=f"one {size.seq_len}-token segment (with {size.seq_len} cached positions)",
    )


def transformer_xl() -> ModelSpec:
    return _spec("transformer_xl", "NVIDIA's base model (d_model 512, wt103_base.yaml)")


def transformer_xl_large() -> ModelSpec:
    return _spec("transformer_xl_large", "the large model (wt103_large.yaml)")
