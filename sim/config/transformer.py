"""`workload.transformer`: a decoder-only model given by its numbers or by a Hugging Face config.json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, model_validator

from sim.catalog.zoo.llm import DecoderArchitecture
from sim.config.hf_config import read_hf_config
from sim.config.reading import resolved
from sim.config.types import Strict

MAX_BLOCKS = 1_000  # GPT-3 has 96 and the largest published dense models under 200
MAX_WIDTH = 1 << 18  # hidden and MLP widths: 262,144, ten times the widest published
MAX_VOCAB = 10_000_000
MAX_SEQ = 1 << 20  # a million tokens a sample

Blocks = Optional[Annotated[int, Field(ge=1, le=MAX_BLOCKS)]]
Width = Optional[Annotated[int, Field(ge=1, le=MAX_WIDTH)]]
Tokens = Optional[Annotated[int, Field(ge=1, le=MAX_SEQ)]]
ARCHITECTURE = ("layers", "hidden", "heads", "kv_heads", "mlp_width", "vocab", "max_positions")
ARCHITECTURE += ("mlp", "norm", "positions", "tied_embeddings", "bias")
REQUIRED = ("layers", "hidden", "heads", "vocab", "seq_len")


class TransformerConfig(Strict):
    """A decoder-only transformer (`workload.model: transformer`): its numbers, or `hf_config` naming a
    config.json whose keys give them (docs/zoo.md). Numbers given beside `hf_config` must agree with the
    file's, except `seq_len`, the tokens a sample trains on (default: the file's context length)."""

    hf_config: Optional[str] = Field(
        None,
        description="a local Hugging Face config.json (model_type llama, mistral or gpt2) giving the numbers; "
        "a relative path is relative to the config file",
    )
    layers: Blocks = Field(
        None, description="transformer blocks (required unless hf_config gives it, as for hidden, heads, vocab)"
    )
    hidden: Width = Field(None, description="model width (d_model)")
    heads: Width = Field(None, description="attention heads (dividing hidden)")
    kv_heads: Width = Field(
        None, description="key/value heads for grouped-query attention (dividing heads); default: heads"
    )
    mlp_width: Width = Field(
        None,
        description="the MLP's hidden width (each of SwiGLU's gate and up projections); default with gelu: 4 x hidden",
    )
    mlp: Literal["gelu", "swiglu"] = Field(
        "gelu", description="gelu: two linears; swiglu: gate, up and down projections"
    )
    norm: Literal["layernorm", "rmsnorm"] = Field("layernorm", description="the blocks' and the final norm")
    positions: Literal["learned", "rotary"] = Field(
        "learned", description="learned: a position table added to the tokens; rotary: RoPE on Q and K (no parameters)"
    )
    vocab: Optional[Annotated[int, Field(ge=1, le=MAX_VOCAB)]] = Field(None, description="vocabulary size")
    seq_len: Tokens = Field(
        None, description="tokens per sample (one sequence); with hf_config, default: its context length"
    )
    max_positions: Tokens = Field(None, description="rows of a learned position table; default: seq_len")
    tied_embeddings: bool = Field(True, description="the vocabulary head reuses the token table")
    bias: bool = Field(True, description="biases on the attention and MLP projections")

    @model_validator(mode="before")
    @classmethod
    def _numbers_from_the_file(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("hf_config"), str):
            return data
        path = data["hf_config"]
        found = read_hf_config(path)
        disagree = [
            f"{key}: {data[key]!r} disagrees with {path}'s {found[key]!r}; give one of the two"
            for key in ARCHITECTURE
            if key in data and key in found and data[key] != found[key]
        ]
        if disagree:
            raise ValueError("\n".join(disagree))
        return {**found, **data}  # the file's numbers, and seq_len if given

    @model_validator(mode="after")
    def _a_buildable_architecture(self) -> TransformerConfig:
        if missing := [key for key in REQUIRED if getattr(self, key) is None]:
            raise ValueError("\n".join(f"{key}: required (or name a config.json in hf_config)" for key in missing))
        if self.mlp == "swiglu" and self.mlp_width is None:
            raise ValueError("mlp_width: required with mlp swiglu (its gate and up projections' width)")
        self.architecture()  # divisibility and positions: DecoderArchitecture names the field
        return self

    def architecture(self) -> DecoderArchitecture:
        """The numbers as the zoo's builder takes them, defaults filled in."""
        assert self.layers and self.hidden and self.heads and self.vocab and self.seq_len  # validated above
        return DecoderArchitecture(
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads or self.heads,
            mlp_width=self.mlp_width or 4 * self.hidden,
            vocab=self.vocab,
            seq_len=self.seq_len,
            max_positions=self.max_positions or self.seq_len,
            mlp=self.mlp,
            norm=self.norm,
            positions=self.positions,
            tied_embeddings=self.tied_embeddings,
            bias=self.bias,
        )


def hf_config_beside(data: Any, folder: Path) -> Any:
    """`workload.transformer.hf_config` given relative to the config file, made absolute."""
    workload = data.get("workload") if isinstance(data, dict) else None
    block = workload.get("transformer") if isinstance(workload, dict) else None
    path = block.get("hf_config") if isinstance(block, dict) else None
    if not isinstance(path, str) or not path or "\0" in path or Path(path).is_absolute():
        return data  # a NUL is refused by read_hf_config, naming the field
    absolute = str(resolved(folder / path, "workload.transformer.hf_config"))
    return {**data, "workload": {**workload, "transformer": {**block, "hf_config": absolute}}}
