"""The decoder-only transformer `workload.transformer` describes, as eager torch.nn (`numerics.model: transformer`).

Built from the zoo's `DecoderArchitecture` (sim/catalog/zoo/llm.py), with Hugging Face's `LlamaForCausalLM`
module names, so every parameter starts with the name of the zoo layer it belongs to and
`zoo_nets.flat_layout` lays the flat vector out in the zoo's layer order (tests/test_decoder_net.py checks
it layer by layer). The forward pass is the one `llm.saved_per_token` counts: a norm (fused LayerNorm, or
`F.rms_norm`), Q/K/V projections, rotary embedding on Q and K, `repeat_kv` (K and V expanded to every head,
a copy), causal `F.scaled_dot_product_attention`, the heads merged into the output projection, a GELU or
SwiGLU MLP, residual adds, the final norm and a head tied to the token table or not. Merging the heads is a
copy the zoo counts; on the CPU the kernel writes its output token-major, so it is a view of what the kernel
keeps (tests/test_decoder_net.py). The loss
(`ZooTask`'s token loss) is fp32 cross-entropy over the vocabulary.

On the CPU `F.rms_norm` is not one fused kernel: its pieces keep the input, the normalised values and a
value per token, about twice what the zoo counts for a norm (its input); LayerNorm is fused and keeps its
input and two values per token.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from sim.catalog.zoo.llm import DecoderArchitecture
from sim.config.numerics import rotary_problem
from sim.numerics.zoo_nets import _init_transformer

ROPE_BASE = 10_000.0  # Su et al. 2021 (arXiv:2104.09864), section 3.2.2: theta_i = 10000^(-2i/d)
NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, used for RMSNorm too


def check_buildable(arch: DecoderArchitecture) -> None:
    """ValueError naming the field where `arch` has no eager module here (rotary needs an even head size)."""
    if problem := rotary_problem(arch):
        raise ValueError(problem)


def _norm(arch: DecoderArchitecture) -> nn.Module:
    if arch.norm == "layernorm":
        return nn.LayerNorm(arch.hidden, eps=NORM_EPS)
    return nn.RMSNorm(arch.hidden, eps=NORM_EPS)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of `x` (n, heads, tokens, head_dim), halves paired as Hugging Face's `rotate_half`."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def repeat_kv(x: torch.Tensor, repeats: int) -> torch.Tensor:
    """K or V of `kv_heads` heads expanded to every query head (a copy, as Hugging Face's `repeat_kv`)."""
    if repeats == 1:
        return x
    n, kv, t, hd = x.shape
    return x[:, :, None].expand(n, kv, repeats, t, hd).reshape(n, kv * repeats, t, hd)


class SelfAttention(nn.Module):
    def __init__(self, arch: DecoderArchitecture) -> None:
        super().__init__()
        d, kv = arch.hidden, arch.kv_width
        self.heads, self.kv_heads, self.head_dim = arch.heads, arch.kv_heads, arch.head_dim
        self.q_proj, self.k_proj = nn.Linear(d, d, bias=arch.bias), nn.Linear(d, kv, bias=arch.bias)
        self.v_proj, self.o_proj = nn.Linear(d, kv, bias=arch.bias), nn.Linear(d, d, bias=arch.bias)

    def forward(self, x: torch.Tensor, rope: Optional[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        n, t, d = x.shape
        q = self.q_proj(x).view(n, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(n, t, self.kv_heads, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = rotate(q, *rope), rotate(k, *rope)
        repeats = self.heads // self.kv_heads
        y = F.scaled_dot_product_attention(q, repeat_kv(k, repeats), repeat_kv(v, repeats), is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(n, t, d))


class FeedForward(nn.Module):
    def __init__(self, arch: DecoderArchitecture) -> None:
        super().__init__()
        d, ff = arch.hidden, arch.mlp_width
        self.swiglu = arch.mlp == "swiglu"
        if self.swiglu:
            self.gate_proj = nn.Linear(d, ff, bias=arch.bias)
        self.up_proj, self.down_proj = nn.Linear(d, ff, bias=arch.bias), nn.Linear(ff, d, bias=arch.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.swiglu:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        return self.down_proj(F.gelu(self.up_proj(x)))


class Block(nn.Module):
    """A pre-norm block: norm, attention, residual; norm, MLP, residual."""

    def __init__(self, arch: DecoderArchitecture) -> None:
        super().__init__()
        self.input_layernorm, self.self_attn = _norm(arch), SelfAttention(arch)
        self.post_attention_layernorm, self.mlp = _norm(arch), FeedForward(arch)

    def forward(self, x: torch.Tensor, rope: Optional[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderLM(nn.Module):
    """Token ids (n, t) to next-token logits (n, t, vocab)."""

    def __init__(self, arch: DecoderArchitecture) -> None:
        super().__init__()
        check_buildable(arch)
        self.arch = arch
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(arch.vocab, arch.hidden)
        if arch.positions == "learned":
            self.model.embed_positions = nn.Embedding(arch.max_positions, arch.hidden)
        self.model.layers = nn.ModuleList(Block(arch) for _ in range(arch.layers))
        self.model.norm = _norm(arch)
        self.lm_head = None if arch.tied_embeddings else nn.Linear(arch.hidden, arch.vocab, bias=False)
        _init_transformer(self)

    def _rope(self, t: int, like: torch.Tensor) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        if self.arch.positions != "rotary":
            return None
        hd = self.arch.head_dim
        inverse = ROPE_BASE ** -(torch.arange(0, hd, 2, dtype=torch.float32, device=like.device) / hd)
        angles = torch.outer(torch.arange(t, dtype=torch.float32, device=like.device), inverse)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos(), angles.sin()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        x = self.model.embed_tokens(tokens)
        if self.arch.positions == "learned":
            x = x + self.model.embed_positions.weight[:t]
        rope = self._rope(t, x)
        for block in self.model.layers:
            x = block(x, rope)
        h = self.model.norm(x)
        return h @ self.model.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(h)
