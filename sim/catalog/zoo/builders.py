"""Functions that turn architecture hyper-parameters into `Layer`s.

Conventions (shared by every model in the zoo):

- A multiply-add is 2 FLOPs; a bias add, a comparison or an element-wise add is 1.
- Parameter-free operations (activations, pooling, residual adds, softmax, attention score and
  context products) are not layers of their own: their FLOPs are folded into a neighbouring layer
  with `plus_flops`, because the simulator only needs layers that produce gradients.
- The per-element costs of normalisation and activations below are rough but documented; they
  move a model's total by 1-2% at most, next to the matrix products that dominate it.
- Dropout and the loss are not counted in FLOPs.
- Each layer lists its trainable tensors' shapes (`Layer.shapes`) as the PyTorch module it stands for
  holds them: weight then bias; a fused group's tensors sub-layer by sub-layer.
- Each layer also lists its forward pass as the GPU runs it (`Layer.ops`: the kind of arithmetic,
  activation values read plus written, kernels launched), which sim/compute/roofline.py times op by op.
  Folded neighbours are ops of their own; dropout appears there (it costs memory traffic and a
  kernel, not FLOPs), as do the head reshapes of attention.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from sim.catalog.zoo.spec import Layer, Lookup, Op

# Batch norm in training: mean and variance (about 2 FLOPs per element) plus one fused
# scale-and-shift (a multiply-add, 2 FLOPs).
BATCH_NORM_FLOPS = 4
# Layer norm: the same statistics and scale-and-shift as batch norm, plus a subtraction of the
# mean that is not fused away.
LAYER_NORM_FLOPS = 5
RELU_FLOPS = 1
# GELU's tanh approximation costs a handful of multiplies and adds around one tanh.
GELU_FLOPS = 8
# Softmax per score: scale, max, subtract-and-exp, sum, divide.
SOFTMAX_FLOPS = 5
# An LSTM cell per hidden unit and step: three sigmoids and two tanh (about 3 FLOPs each, as
# GELU's tanh is counted below its neighbours), three products, a sum, and the two bias adds of each
# of its four gate inputs.
LSTM_CELL_FLOPS = 27
# Zipf's law: a token's frequency falls about as 1 / its frequency rank. WordPiece and BPE number
# tokens roughly by frequency (and word vocabularies are sorted by it), so the popular rows come first.
TOKEN_ZIPF_S = 1.0

Size = int | tuple[int, int]


def _area(size: Size) -> int:
    if isinstance(size, int):
        return size * size
    height, width = size
    return height * width


def conv_output_size(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Spatial size of a convolution's (or pooling's) output along one axis."""
    return (size + 2 * padding - kernel) // stride + 1


def plus_flops(
    layer: Layer,
    flops: float,
    *,
    moved: float,
    kernels: int = 1,
    kind: str = "elementwise",
    aligned: bool = True,
    full_precision: bool = False,
    epilogue: bool = False,
    width: float = 0.0,
) -> Layer:
    """The same layer with a parameter-free neighbour folded in: its FLOPs, the activation values
    it reads plus writes, and the kernels it launches (sim/compute/roofline.py times each op on its own)."""
    op = Op(
        kind,
        float(flops),
        float(moved),
        kernels,
        aligned=aligned,
        full_precision=full_precision,
        epilogue=epilogue,
        width=width,
    )
    return replace(layer, forward_flops=layer.forward_flops + flops, ops=layer.ops + (op,))


def conv2d(
    name: str,
    in_channels: int,
    out_channels: int,
    kernel: int,
    out_size: Size,
    *,
    bias: bool = False,
    groups: int = 1,
    stride: int = 1,
) -> Layer:
    """A 2-D convolution; `out_size` is the output's spatial size (an int for a square map) and
    `stride` (only used for the input's size, which the activations moved count) its stride."""
    if in_channels % groups or out_channels % groups:
        raise ValueError(f"conv {name!r}: channels must be divisible by groups={groups}")
    weights = out_channels * (in_channels // groups) * kernel * kernel
    outputs = out_channels * _area(out_size)
    flops = 2.0 * weights * _area(out_size) + (outputs if bias else 0)
    moved = in_channels * _area(out_size) * stride * stride + outputs
    # as a matrix product: output channels by input channels times the kernel's area
    narrow = min(out_channels, in_channels // groups * kernel * kernel)
    winograd = kernel == 3 and stride == 1 and groups == 1
    op = Op("conv", flops - (outputs if bias else 0), moved, winograd=winograd, width=narrow)
    # PyTorch adds a convolution's bias in a pass of its own over the output (a read, a write)
    ops = (op, Op("elementwise", float(outputs), 2.0 * outputs)) if bias else (op,)
    # nn.Conv2d: weight (out, in / groups, k, k), then bias (out,)
    shapes = ((out_channels, in_channels // groups, kernel, kernel),) + (((out_channels,),) if bias else ())
    return Layer(name, weights + (out_channels if bias else 0), flops, ops=ops, bias=bias, shapes=shapes)


def batch_norm(name: str, channels: int, size: Size, *, relu: bool = False) -> Layer:
    """A batch norm over a `size` feature map (optionally followed by a ReLU)."""
    elements = channels * _area(size)
    # training batch norm reads its input twice (statistics, then normalise) and writes it once;
    # the ReLU is a kernel of its own that reads and writes the map again
    ops = (Op("elementwise", float(BATCH_NORM_FLOPS * elements), 3.0 * elements, 2),)
    if relu:
        ops += (Op("elementwise", float(RELU_FLOPS * elements), 2.0 * elements, epilogue=True),)
    return Layer(name, 2 * channels, sum(op.flops for op in ops), ops=ops, shapes=((channels,), (channels,)))


def linear(
    name: str,
    in_features: int,
    out_features: int,
    *,
    tokens: int = 1,
    bias: bool = True,
) -> Layer:
    """A fully-connected layer applied to `tokens` positions of one sample."""
    weights = in_features * out_features
    flops = tokens * (2.0 * weights + (out_features if bias else 0))
    moved = float(tokens * (in_features + out_features))
    op = Op("matmul", flops, moved, aligned=aligned(in_features, out_features), width=min(in_features, out_features))
    shapes = ((out_features, in_features),) + (((out_features,),) if bias else ())  # nn.Linear
    return Layer(name, weights + (out_features if bias else 0), flops, ops=(op,), bias=bias, shapes=shapes)


def aligned(*dimensions: int) -> bool:
    """Whether a matrix product of these dimensions suits tensor cores (each a multiple of 8)."""
    return all(d % 8 == 0 for d in dimensions)


def embedding(
    name: str, num_embeddings: int, dim: int, lookup: Optional[Lookup] = None, *, reads: float = 0.0
) -> Layer:
    """An embedding table: a lookup costs no arithmetic, but every row is a trainable parameter.
    `lookup`: how batches read it, when only the rows read get a gradient (docs/sparse.md);
    `reads`: rows read per sample (default: the lookup's, else none)."""
    reads = reads or (lookup.per_sample if lookup is not None else 0.0)
    op = Op("lookup", 0.0, 2.0 * reads * dim)  # gather the rows, write them out
    return Layer(
        name, num_embeddings * dim, 0.0, rows=num_embeddings, lookup=lookup, ops=(op,), shapes=((num_embeddings, dim),)
    )


def lstm(name: str, input_size: int, hidden: int, steps: int, *, bidirectional: bool = False) -> Layer:
    """One `nn.LSTM` layer (both biases, as PyTorch keeps them) over `steps` positions of one sample.

    cuDNN runs the input projection of every step as one matrix product, then per step and
    direction a small product of the hidden state and the fused gate arithmetic: one kernel each,
    `steps` times over, which is why recurrent layers launch so many more kernels than FLOPs suggest.
    """
    directions = 2 if bidirectional else 1
    gates = 4 * hidden
    params = directions * (gates * (input_size + hidden) + 2 * gates)
    ops = (
        Op(
            "matmul",
            2.0 * steps * directions * gates * input_size,
            float(steps * (input_size + directions * gates)),
            directions,
        ),
        Op(
            "matmul",
            2.0 * steps * directions * gates * hidden,
            float(steps * directions * (hidden + gates)),
            steps * directions,
        ),
        # reads the four gate inputs and the cell state, writes the cell and hidden states
        Op(
            "elementwise",
            float(LSTM_CELL_FLOPS * steps * directions * hidden),
            float(steps * directions * (gates + 3 * hidden)),
            steps * directions,
        ),
    )
    # nn.LSTM, per direction: weight_ih (4h, in), weight_hh (4h, h), bias_ih (4h,), bias_hh (4h,)
    shapes = ((gates, input_size), (gates, hidden), (gates,), (gates,)) * directions
    return Layer(name, params, sum(op.flops for op in ops), ops=ops, bias=True, shapes=shapes)


def layer_norm(name: str, dim: int, tokens: int, *, full_precision: bool = True) -> Layer:
    """A layer norm (with gain and bias) over `tokens` vectors of width `dim`; `full_precision`:
    in FP32 under autocast (PyTorch's `nn.LayerNorm`; fused implementations keep half precision)."""
    flops = float(LAYER_NORM_FLOPS * dim * tokens)
    op = Op("elementwise", flops, 2.0 * dim * tokens, full_precision=full_precision)
    return Layer(name, 2 * dim, flops, ops=(op,), shapes=((dim,), (dim,)))


def attention_core_flops(seq_len: int, d_model: int, n_heads: int) -> float:
    """FLOPs of scaled dot-product attention after the projections, for one sequence.

    Scores Q·K^T and context P·V are each seq_len^2 * d_model multiply-adds (summed over heads);
    the softmax touches n_heads * seq_len^2 scores. Implementations compute the full square even
    under a causal mask, so no saving is taken for GPT-2.
    """
    products = 2 * (2.0 * seq_len * seq_len * d_model)
    return products + SOFTMAX_FLOPS * n_heads * seq_len * seq_len


ATTENTION = ("fused", "explicit")


def attention_core(
    qkv: Layer, seq_len: int, d_model: int, n_heads: int, attention: str = "fused", *, autocast: bool = False
) -> Layer:
    """The QKV projection with scaled dot-product attention folded in, op by op.

    `fused` is PyTorch's `scaled_dot_product_attention` (what the zoo's torch.nn modules call): one
    kernel reads Q, K and V straight from the projection's output and writes the context and each
    row's softmax statistics, never the seq_len^2 scores; then the heads are merged (one copy).
    `explicit` is how Hugging Face's and NVIDIA's BERT ran it: the heads split out (three copies),
    scores Q·K^T written out, scale, mask, softmax and dropout over them, context P·V, heads merged.
    `autocast`: the explicit softmax ran under torch.autocast, which runs softmax in FP32 (PyTorch's
    autocast op reference), so it and the dropout after it move FP32 values (Apex's O2, as NVIDIA's
    code ran, keeps them in half precision).
    """
    if attention not in ATTENTION:
        raise ValueError(f"attention {attention!r}; allowed: {', '.join(ATTENTION)}")
    scores = float(n_heads * seq_len * seq_len)
    width = float(seq_len * d_model)
    products = 2.0 * seq_len * seq_len * d_model  # each of Q·K^T and P·V
    head = d_model / n_heads  # both products are per head: Q·K^T reduces over it, P·V outputs it
    softmax = attention_core_flops(seq_len, d_model, n_heads) - 2 * products
    if attention == "fused":
        layer = plus_flops(qkv, 2 * products + softmax, moved=4 * width + n_heads * seq_len, kind="matmul", width=head)
        return plus_flops(layer, 0.0, moved=2 * width)  # merge heads
    layer = plus_flops(qkv, 0.0, moved=6 * width, kernels=3)  # split heads: q, k, v made contiguous
    layer = plus_flops(layer, products, moved=2 * width + scores, kind="matmul", width=head)  # Q·K^T
    if autocast:
        layer = plus_flops(layer, 0.0, moved=4 * scores, kernels=2)  # scale, mask
        layer = plus_flops(layer, softmax, moved=4 * scores, kernels=2, full_precision=True)  # softmax, dropout
    else:
        layer = plus_flops(layer, softmax, moved=8 * scores, kernels=4)  # scale, mask, softmax, dropout
    layer = plus_flops(layer, products, moved=scores + 2 * width, kind="matmul", width=head)  # P·V
    return plus_flops(layer, 0.0, moved=2 * width)  # merge heads


def cross_entropy(layer: Layer, classes: int, tokens: int) -> Layer:
    """`layer` with the loss over its `classes` logits per token folded in: log-softmax reads the
    logits and writes their log-probabilities, the loss gathers one per token (its backward writes
    the logits' gradient). Memory-bound work a FLOP count misses when the classes are a vocabulary."""
    logits = float(classes * tokens)
    # not counted in FLOPs (above)
    return plus_flops(layer, 0.0, moved=2 * logits + 2 * tokens, kernels=2, full_precision=True)


def transformer_block(
    prefix: str,
    *,
    d_model: int,
    n_heads: int,
    d_ff: int,
    seq_len: int,
    pre_norm: bool,
    reference: bool = False,
    autocast: bool = False,
) -> tuple[Layer, ...]:
    """One encoder/decoder block: attention then a GELU MLP, each with a residual and a layer norm.

    Q, K and V are one fused projection (3 * d_model outputs: one nn.Linear, whose weight and bias are
    the layer's two tensors, as the zoo's torch.nn module holds them); the attention core is folded into
    it, the GELU into the MLP's first linear, and each residual add into the linear before it.
    `pre_norm` orders the layer norms as GPT-2 does (before each sub-block) instead of as BERT
    does (after each residual). The block runs as the zoo's torch.nn modules run it (fused
    attention, no dropout, layer norms in FP32 under autocast), or with `reference` as the
    published implementations did (explicit attention, dropout before each residual add, layer
    norms fused in half precision); with `autocast` too, as code under torch.autocast ran it (softmax
    and layer norms in FP32).
    """
    if d_model % n_heads:
        raise ValueError(f"block {prefix!r}: d_model={d_model} not divisible by n_heads={n_heads}")
    tokens = seq_len
    residual = float(tokens * d_model)
    qkv = linear(f"{prefix}.attn.qkv", d_model, 3 * d_model, tokens=tokens)
    qkv = attention_core(qkv, seq_len, d_model, n_heads, "explicit" if reference else "fused", autocast=autocast)
    # residual add (two reads, a write), after a dropout (a read, a write)
    add = {"moved": 5 * residual, "kernels": 2} if reference else {"moved": 3 * residual, "kernels": 1}
    attn_out = plus_flops(linear(f"{prefix}.attn.out", d_model, d_model, tokens=tokens), residual, **add)
    ln1 = layer_norm(f"{prefix}.ln1", d_model, tokens, full_precision=autocast or not reference)
    fc = plus_flops(
        linear(f"{prefix}.mlp.fc", d_model, d_ff, tokens=tokens), GELU_FLOPS * tokens * d_ff, moved=2.0 * tokens * d_ff
    )
    proj = plus_flops(linear(f"{prefix}.mlp.proj", d_ff, d_model, tokens=tokens), residual, **add)
    ln2 = layer_norm(f"{prefix}.ln2", d_model, tokens, full_precision=autocast or not reference)
    if pre_norm:
        return (ln1, qkv, attn_out, ln2, fc, proj)
    return (qkv, attn_out, ln1, fc, proj, ln2)
