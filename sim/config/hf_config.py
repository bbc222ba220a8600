"""A Hugging Face-style `config.json` read as a decoder-only architecture (`workload.transformer.hf_config`).

Two key sets are understood, as the files Hugging Face's `LlamaConfig` (model_type llama or mistral)
and `GPT2Config` (gpt2) write: a Llama-style file is SwiGLU, RMSNorm, rotary positions, untied and
bias-free unless it says otherwise (those classes' defaults); a GPT-2 file is GELU, LayerNorm, learned
positions, biases and a tied head. Every key is either read, or known not to change the tensors or the
FLOPs (token ids, dropout, initialisation, dtype); any other key is refused by name, so that a file of a
kind this reader does not model (mixture of experts, sliding-window attention) is not silently misread.
Nothing is downloaded: the file is local.
"""

from __future__ import annotations

import json
from typing import Any

from sim.config.reading import read_bounded

MAX_BYTES = 1_000_000  # a config.json is a few kB
MODEL_TYPES = ("llama", "mistral", "gpt2")
# keys that do not change the tensors or the FLOPs of a training step
IGNORED = (
    "_name_or_path",
    "architectures",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "model_type",
    "torch_dtype",
    "transformers_version",
    "use_cache",
)
LLAMA_KEYS = {
    "num_hidden_layers": "layers",
    "hidden_size": "hidden",
    "num_attention_heads": "heads",
    "num_key_value_heads": "kv_heads",
    "intermediate_size": "mlp_width",
    "vocab_size": "vocab",
    "max_position_embeddings": "max_positions",
    "tie_word_embeddings": "tied_embeddings",
}
LLAMA_OTHER = (
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "mlp_bias",
    "head_dim",
    "sliding_window",
    "rope_theta",  # where rotary positions start their frequencies: no change to FLOPs
    "rope_scaling",
    "attention_dropout",
    "pretraining_tp",  # splits Llama 2's projections for pre-training: the same products
)
GPT2_KEYS = {
    "n_layer": "layers",
    "n_embd": "hidden",
    "n_head": "heads",
    "n_inner": "mlp_width",
    "vocab_size": "vocab",
    "n_positions": "max_positions",
    "tie_word_embeddings": "tied_embeddings",
}
GPT2_OTHER = (
    "activation_function",
    "layer_norm_epsilon",
    "n_ctx",  # the context length the tokenizer assumed; n_positions sizes the table
    "attn_pdrop",
    "embd_pdrop",
    "resid_pdrop",
    "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx",
    "reorder_and_upcast_attn",
    "summary_activation",
    "summary_first_dropout",
    "summary_proj_to_labels",
    "summary_type",
    "summary_use_proj",
    "task_specific_params",
)
GELU_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast")


def read_hf_config(path: str) -> dict[str, Any]:
    """The architecture (`DecoderArchitecture`'s fields, less `seq_len`) that the config.json at `path`
    describes; ValueError naming `hf_config` and the key for a file that cannot be read, a missing key,
    an unknown one or a value this builder cannot represent."""
    if "\0" in path:  # no file name holds one (os.open would raise an unworded ValueError)
        raise ValueError("hf_config: the path holds a NUL character; name a local config.json")
    try:
        raw = read_bounded(path, "hf_config", MAX_BYTES, "a config.json")
        data = json.loads(raw)
    except OSError as exc:
        raise ValueError(f"hf_config: cannot read {path} ({exc.strerror or exc}); name a local config.json") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"hf_config: {path} is not JSON ({exc}); name a Hugging Face config.json") from None
    if not isinstance(data, dict):
        raise ValueError(f"hf_config: {path} holds a JSON {type(data).__name__}; a config.json is one object")
    kind = data.get("model_type", "gpt2" if "n_layer" in data else "llama")
    if kind not in MODEL_TYPES:
        raise ValueError(f"hf_config: {path}: model_type {kind!r}; allowed: {', '.join(MODEL_TYPES)}")
    keys, other = (GPT2_KEYS, GPT2_OTHER) if kind == "gpt2" else (LLAMA_KEYS, LLAMA_OTHER)
    unknown = sorted(set(data) - set(keys) - set(other) - set(IGNORED))
    if unknown:
        known = ", ".join([*keys, *other])
        raise ValueError(f"hf_config: {path}: unknown keys {', '.join(unknown)}; allowed for {kind}: {known}")
    required = [key for key in keys if keys[key] in ("layers", "hidden", "heads", "vocab", "max_positions")]
    if kind != "gpt2":
        required.append("intermediate_size")  # LlamaConfig's default (11,008) belongs to one model only
    if missing := [key for key in required if data.get(key) is None]:
        raise ValueError(f"hf_config: {path}: missing keys {', '.join(missing)}; a {kind} config.json has them")
    arch: dict[str, Any] = {}
    for key, field in keys.items():
        value = data.get(key)
        if value is None:
            continue
        wanted = bool if field == "tied_embeddings" else int
        if type(value) is not wanted:
            raise ValueError(
                f"hf_config: {path}: {key}: {value!r}; allowed: {'true or false' if wanted is bool else 'an integer'}"
            )
        arch[field] = value
    arch.setdefault("kv_heads", arch["heads"])
    arch["seq_len"] = arch["max_positions"]
    if kind == "gpt2":
        return {**arch, **_gpt2(data, path), "mlp_width": arch.get("mlp_width", 4 * arch["hidden"])}
    return {**arch, **_llama(data, path, arch)}


def _gpt2(data: dict[str, Any], path: str) -> dict[str, Any]:
    act = data.get("activation_function", "gelu_new")  # GPT2Config's default
    if act not in GELU_ACTS:
        raise ValueError(f"hf_config: {path}: activation_function {act!r}; allowed for gpt2: {', '.join(GELU_ACTS)}")
    tied = data.get("tie_word_embeddings", True)  # PretrainedConfig's default
    return {"mlp": "gelu", "norm": "layernorm", "positions": "learned", "bias": True, "tied_embeddings": tied}


def _llama(data: dict[str, Any], path: str, arch: dict[str, Any]) -> dict[str, Any]:
    act = data.get("hidden_act", "silu")  # LlamaConfig's default
    if act != "silu":
        raise ValueError(
            f"hf_config: {path}: hidden_act {act!r}; allowed for a {data.get('model_type', 'llama')}: silu"
        )
    bias = data.get("attention_bias", False)
    for key in ("attention_bias", "mlp_bias"):
        if key in data and type(data[key]) is not bool:
            raise ValueError(f"hf_config: {path}: {key}: {data[key]!r}; allowed: true or false")
    if data.get("mlp_bias", bias) != bias:
        raise ValueError(
            f"hf_config: {path}: attention_bias {bias} and mlp_bias {data['mlp_bias']} differ; "
            "allowed: equal (the builder takes one bias setting)"
        )
    head_dim = data.get("head_dim")
    if head_dim is not None and head_dim * arch["heads"] != arch["hidden"]:
        raise ValueError(
            f"hf_config: {path}: head_dim {head_dim} is not hidden_size / num_attention_heads "
            f"({arch['hidden']} / {arch['heads']}); allowed: that quotient"
        )
    if data.get("sliding_window") is not None:
        raise ValueError(f"hf_config: {path}: sliding_window {data['sliding_window']}; allowed: null (full attention)")
    tied = data.get("tie_word_embeddings", False)  # LlamaConfig's default
    return {"mlp": "swiglu", "norm": "rmsnorm", "positions": "rotary", "bias": bias, "tied_embeddings": tied}
