"""Decoder-only language models described by their architecture: Llama-style and GPT-style stacks.

One builder covers the family: grouped-query attention (K and V projections of `kv_heads` heads),
a GELU MLP (two linears) or a SwiGLU one (gate, up and down projections), LayerNorm or RMSNorm,
learned or rotary positions, a vocabulary head tied to the token table or not, biases on or off.
A sample is one sequence of `seq_len` tokens, trained on next-token prediction.

Layers are the parameterised modules in forward order, named as Hugging Face's `LlamaForCausalLM`
names them (`model.layers.{i}.self_attn.q_proj`, ...), one `nn.Linear` or norm each; the parameter-free
work is folded into the layer before it (docs/zoo.md, builders.py): rotary embedding into the Q and K
projections, fused attention into the V projection, SiLU and the gate product into the gate and up
projections, each residual add into the projection that ends its sub-block, the loss into the head.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sim.catalog.zoo.builders import (
    GELU_FLOPS,
    TOKEN_ZIPF_S,
    aligned,
    attention_core_flops,
    cross_entropy,
    embedding,
    layer_norm,
    linear,
    plus_flops,
)
from sim.catalog.zoo.spec import Layer, Lookup, ModelSpec, Op

MLP_KINDS = ("gelu", "swiglu")
NORM_KINDS = ("layernorm", "rmsnorm")
POSITION_KINDS = ("learned", "rotary")
# RMSNorm per element: square, sum, scale by the reciprocal root, multiply by the gain (no mean to subtract).
RMS_NORM_FLOPS = 4
# SiLU x * sigmoid(x): an exponential, an add and a divide for the sigmoid, then the product.
SILU_FLOPS = 4
# Rotary embedding per element of Q or K: x * cos + rotate_half(x) * sin, two products and a sum.
ROPE_FLOPS = 3
# ... and as Hugging Face's apply_rotary_pos_emb runs it: rotate_half's negation and concatenation,
# the two products and the sum, five kernels that read and write about ten values per element.
ROPE_MOVED, ROPE_KERNELS = 10, 5


@dataclass(frozen=True, kw_only=True)
class DecoderArchitecture:
    """The numbers that fix a decoder-only transformer's tensors and its forward pass for one sequence.

    `mlp_width` is the hidden width of the MLP (SwiGLU's gate and up projections each have it);
    `max_positions` the rows of a learned position table (unused by rotary positions, which have no
    parameters); `seq_len` the tokens per training sample.
    """

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    mlp_width: int
    vocab: int
    seq_len: int
    max_positions: int
    mlp: str = "gelu"
    norm: str = "layernorm"
    positions: str = "learned"
    tied_embeddings: bool = True
    bias: bool = True

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "kv_heads", "mlp_width", "vocab", "seq_len", "max_positions"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{field}: {value!r}; allowed: an integer >= 1")
        for field, kinds in (("mlp", MLP_KINDS), ("norm", NORM_KINDS), ("positions", POSITION_KINDS)):
            if getattr(self, field) not in kinds:
                raise ValueError(f"{field}: {getattr(self, field)!r}; allowed: {', '.join(kinds)}")
        if self.hidden % self.heads:
            raise ValueError(f"heads: {self.heads} does not divide hidden {self.hidden}; allowed: a divisor of it")
        if self.heads % self.kv_heads:
            raise ValueError(f"kv_heads: {self.kv_heads} does not divide heads {self.heads}; allowed: a divisor of it")
        if self.positions == "learned" and self.seq_len > self.max_positions:
            raise ValueError(
                f"seq_len: {self.seq_len} is longer than the learned position table (max_positions "
                f"{self.max_positions}); allowed: 1 to {self.max_positions}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        """Outputs of the K (and of the V) projection: kv_heads heads of head_dim."""
        return self.kv_heads * self.head_dim


def norm(name: str, arch: DecoderArchitecture) -> Layer:
    """The block's norm over one sequence: LayerNorm (gain and bias) or RMSNorm (gain only). Both run
    in FP32 under autocast (nn.LayerNorm by autocast's op list, Hugging Face's LlamaRMSNorm by an explicit
    upcast)."""
    if arch.norm == "layernorm":
        return layer_norm(name, arch.hidden, arch.seq_len)
    values = arch.hidden * arch.seq_len
    op = Op("elementwise", float(RMS_NORM_FLOPS * values), 2.0 * values, full_precision=True)
    return Layer(name, arch.hidden, op.flops, ops=(op,), shapes=((arch.hidden,),))


def _rotary(layer: Layer, width: int, arch: DecoderArchitecture) -> Layer:
    """`layer` (the Q or K projection) with rotary embedding of its `width` outputs folded in."""
    if arch.positions != "rotary":
        return layer
    values = width * arch.seq_len
    return plus_flops(layer, ROPE_FLOPS * values, moved=ROPE_MOVED * values, kernels=ROPE_KERNELS)


def attention_layers(prefix: str, arch: DecoderArchitecture) -> tuple[Layer, ...]:
    """Q, K, V and output projections with rotary positions and fused causal attention folded in.

    The attention kernel (`scaled_dot_product_attention`, FlashAttention) reads Q, and K and V at their
    grouped-query width, writes the context and each row's softmax statistics; its FLOPs are the full
    score square (builders.attention_core_flops: Q·K^T and P·V over every head), as published FLOP counts
    take it. The heads are then merged (a copy) before the output projection, whose residual add
    follows it.
    """
    d, kv, tokens = arch.hidden, arch.kv_width, arch.seq_len
    width = float(tokens * d)
    q = _rotary(linear(f"{prefix}.q_proj", d, d, tokens=tokens, bias=arch.bias), d, arch)
    k = _rotary(linear(f"{prefix}.k_proj", d, kv, tokens=tokens, bias=arch.bias), kv, arch)
    v = linear(f"{prefix}.v_proj", d, kv, tokens=tokens, bias=arch.bias)
    core = attention_core_flops(tokens, d, arch.heads)
    moved = 2 * width + 2.0 * tokens * kv + arch.heads * tokens  # Q, K, V in; context, statistics out
    v = plus_flops(v, core, moved=moved, kind="matmul", width=arch.head_dim)
    v = plus_flops(v, 0.0, moved=2 * width)  # merge heads
    o = linear(f"{prefix}.o_proj", d, d, tokens=tokens, bias=arch.bias)
    o = plus_flops(o, width, moved=3 * width)  # residual add: two reads, a write
    return (q, k, v, o)


def mlp_layers(prefix: str, arch: DecoderArchitecture) -> tuple[Layer, ...]:
    """GELU: up projection with the activation, down projection with the residual add. SwiGLU: gate
    projection with SiLU, up projection with the product of the two, down projection with the add."""
    d, ff, tokens = arch.hidden, arch.mlp_width, arch.seq_len
    inner = float(tokens * ff)
    up = linear(f"{prefix}.up_proj", d, ff, tokens=tokens, bias=arch.bias)
    if arch.mlp == "gelu":
        first: tuple[Layer, ...] = (plus_flops(up, GELU_FLOPS * inner, moved=2 * inner),)
    else:
        gate = linear(f"{prefix}.gate_proj", d, ff, tokens=tokens, bias=arch.bias)
        gate = plus_flops(gate, SILU_FLOPS * inner, moved=2 * inner)
        first = (gate, plus_flops(up, inner, moved=3 * inner))  # act(gate) * up: two reads, a write
    down = linear(f"{prefix}.down_proj", ff, d, tokens=tokens, bias=arch.bias)
    width = float(tokens * d)
    return first + (plus_flops(down, width, moved=3 * width),)


def saved_per_token(name: str, arch: DecoderArchitecture) -> float:
    """Values autograd keeps per token for the backward of the layer called `name` (its last part), as
    PyTorch's eager modules save them under fused attention: each norm and projection keeps its input
    (K and V read the tensor Q keeps), the attention kernel its Q, its K and V expanded to every head
    (Hugging Face's and torchtitan's `repeat_kv`) and its output, the merged heads are a copy the output
    projection keeps, SiLU (GELU) keeps its input and the gate product both factors. Per layer 9 d + 4
    mlp_width under SwiGLU, 9 d + 2 mlp_width under GELU: Korthikanti et al. 2022 (arXiv:2205.05198,
    section 4.1) count 16 d values less dropout and with the attention scores that fused kernels never keep."""
    d, ff = arch.hidden, arch.mlp_width
    swiglu = arch.mlp == "swiglu"
    per_part = {
        "input_layernorm": d,
        "q_proj": d,
        "k_proj": 0,
        "v_proj": 4 * d,
        "o_proj": d,
        "post_attention_layernorm": d,
        "gate_proj": d + ff,
        "up_proj": 2 * ff if swiglu else d + ff,
        "down_proj": ff,
    }
    return float(per_part[name.rsplit(".", 1)[-1]])


def selective_per_token(name: str, arch: DecoderArchitecture) -> tuple[float, bool]:
    """Values kept per token, and whether backward recomputes the layer, under torchtitan's op-level selective
    checkpointing of a block (torchtitan's `_save_list` and its policy: the outputs of the attention kernel and
    of every other matrix product, counted in forward order from the block's first, are kept; everything else
    is recomputed). The block's input is kept where it enters, on the first norm."""
    d, kv, ff = arch.hidden, arch.kv_width, arch.mlp_width
    products = ["q_proj", "k_proj", "v_proj", "o_proj", *(["gate_proj"] if arch.mlp == "swiglu" else []), "up_proj"]
    products.append("down_proj")
    outputs = {"q_proj": d, "k_proj": kv, "v_proj": kv, "o_proj": d, "gate_proj": ff, "up_proj": ff, "down_proj": d}
    part = name.rsplit(".", 1)[-1]
    if part not in products:  # a norm: recomputed; the first keeps the block's input
        return (float(d) if part == "input_layernorm" else 0.0), True
    kept = products.index(part) % 2 == 0  # the 1st, 3rd, ... product of the block
    attention = d if part == "v_proj" else 0  # the attention kernel's output, folded into the V projection
    return float(outputs[part] * kept + attention), not kept


def _saving(layer: Layer, arch: DecoderArchitecture, block: int) -> Layer:
    kept, recompute = selective_per_token(layer.name, arch)
    return replace(
        layer,
        saved=arch.seq_len * saved_per_token(layer.name, arch),
        block=block,
        selective_saved=arch.seq_len * kept,
        selective_recompute=recompute,
    )


def _head_saving(layer: Layer, arch: DecoderArchitecture, inputs: int) -> Layer:
    """The final norm or head: `inputs` tensors of width d kept, and, when the loss is folded in, its
    log-probabilities (a value per token and word of the vocabulary, in FP32 under autocast, as Hugging Face's
    and torchtitan's losses cast the logits) and its backward's two gradients of that size (with respect to
    the log-probabilities, then to the logits), alive with them at once."""
    loss = layer.name == "lm_head" or arch.tied_embeddings
    log_probabilities = float(arch.vocab * arch.seq_len) * loss
    return replace(
        layer,
        saved=float(inputs * arch.hidden * arch.seq_len),
        saved_fp32=log_probabilities,
        backward_fp32=2 * log_probabilities,
    )


def decoder_layers(arch: DecoderArchitecture) -> tuple[Layer, ...]:
    """Every trainable layer of the model in forward order, with the loss over the vocabulary."""
    tokens, d = arch.seq_len, arch.hidden
    # an untied token table's gradient holds only the rows a batch looked up (as BERT's word table); a
    # tied one is also the head, whose gradient touches every row (as GPT-2's wte)
    words = None
    if not arch.tied_embeddings:
        words = Lookup(per_sample=tokens, zipf_s=TOKEN_ZIPF_S, hot_rows="first", source=f"{tokens} tokens a sequence")
    # a lookup keeps only the token ids for its backward, and adding positions keeps nothing
    layers = [replace(embedding("model.embed_tokens", arch.vocab, d, words, reads=tokens), saved=0.0)]
    if arch.positions == "learned":
        where = Lookup(per_sample=tokens, space=tokens, source=f"positions 0..{tokens - 1} of every sequence")
        table = embedding("model.embed_positions", arch.max_positions, d, where)
        layers.append(replace(plus_flops(table, tokens * d, moved=3.0 * tokens * d), saved=0.0))  # added to the tokens
    for i in range(arch.layers):
        prefix = f"model.layers.{i}"
        block = (
            norm(f"{prefix}.input_layernorm", arch),
            *attention_layers(f"{prefix}.self_attn", arch),
            norm(f"{prefix}.post_attention_layernorm", arch),
            *mlp_layers(f"{prefix}.mlp", arch),
        )
        layers += [_saving(layer, arch, i) for layer in block]
    head_flops = 2.0 * d * arch.vocab * tokens
    if arch.tied_embeddings:  # the head reuses the token table: its product is folded into the final norm
        final = plus_flops(
            norm("model.norm", arch),
            head_flops,
            moved=float(tokens * (d + arch.vocab)),
            kind="matmul",
            aligned=aligned(d, arch.vocab),
            width=float(d),
        )
        layers.append(_head_saving(cross_entropy(final, arch.vocab, tokens), arch, inputs=2))
    else:
        layers.append(_head_saving(norm("model.norm", arch), arch, inputs=1))
        head = cross_entropy(linear("lm_head", d, arch.vocab, tokens=tokens, bias=False), arch.vocab, tokens)
        layers.append(_head_saving(head, arch, inputs=1))
    return tuple(layers)


def decoder_model(name: str, arch: DecoderArchitecture, source: str) -> ModelSpec:
    """`arch` as a zoo model called `name`."""
    return ModelSpec(name, decoder_layers(arch), source=source, sample=f"one {arch.seq_len:,}-token sequence")


def llama3(hidden: int, layers: int, heads: int, mlp_width: int) -> DecoderArchitecture:
    """Llama 3 at the given size (Llama Team 2024, arXiv:2407.21783, Table 3): 8 KV heads, SwiGLU,
    RMSNorm, rotary positions, untied head, no biases, pre-trained at 8,192 tokens (its section 3.4.1);
    the vocabulary is Meta's released config.json's 128,256 (the paper's 128K tokens and 256 reserved)."""
    return DecoderArchitecture(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=8,
        mlp_width=mlp_width,
        vocab=128_256,
        seq_len=8192,
        max_positions=8192,
        mlp="swiglu",
        norm="rmsnorm",
        positions="rotary",
        tied_embeddings=False,
        bias=False,
    )


# Brown et al. 2020 (arXiv:2005.14165) Table 2.1's largest row and section 2.1: GPT-2's architecture
# (learned positions, pre-norm LayerNorm, GELU MLP of 4 x d_model, biases, head tied to the token table)
# with 96 layers of d_model 12,288 and 96 heads over a 2,048-token context and GPT-2's 50,257 tokens.
GPT3_175B = DecoderArchitecture(
    layers=96,
    hidden=12288,
    heads=96,
    kv_heads=96,
    mlp_width=4 * 12288,
    vocab=50257,
    seq_len=2048,
    max_positions=2048,
)
LLAMA3_8B = llama3(hidden=4096, layers=32, heads=32, mlp_width=14336)
LLAMA3_70B = llama3(hidden=8192, layers=80, heads=64, mlp_width=28672)
_LLAMA3_SOURCE = "Llama Team 2024 (arXiv:2407.21783), Table 3; Meta's model card"


def llama3_8b() -> ModelSpec:
    return decoder_model("llama3_8b", LLAMA3_8B, f"{_LLAMA3_SOURCE}: 8B (32 layers, d=4096, 8 KV heads)")


def llama3_70b() -> ModelSpec:
    return decoder_model("llama3_70b", LLAMA3_70B, f"{_LLAMA3_SOURCE}: 70B (80 layers, d=8192, 8 KV heads)")


def gpt3_175b() -> ModelSpec:
    return decoder_model(
        "gpt3_175b", GPT3_175B, "Brown et al. 2020 (arXiv:2005.14165), Table 2.1: 175B (96 layers, d=12288)"
    )
