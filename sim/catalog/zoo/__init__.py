"""The model zoo: named models as layer lists with parameter counts and FLOPs.

>>> from sim.catalog.zoo import get_model
>>> get_model("ResNet50").params
25557032
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from sim.catalog.zoo.cnn import resnet32, resnet50, vgg16, wrn26_10
from sim.catalog.zoo.gnmt import gnmt
from sim.catalog.zoo.llm import gpt3_175b, llama3_8b, llama3_70b
from sim.catalog.zoo.recsys import deepfm
from sim.catalog.zoo.spec import Layer, ModelSpec
from sim.catalog.zoo.ssd import ssd300
from sim.catalog.zoo.transformer_xl import transformer_xl, transformer_xl_large
from sim.catalog.zoo.transformers import bert_base, bert_large, gpt2

__all__ = ["Layer", "ModelSpec", "MODEL_NAMES", "TORCH_MODELS", "canonical_name", "get_model"]

_BUILDERS: dict[str, Callable[[], ModelSpec]] = {
    "resnet50": resnet50,
    "vgg16": vgg16,
    "wrn26_10": wrn26_10,
    "resnet32": resnet32,
    "bert_base": bert_base,
    "bert_large": bert_large,
    "gpt2": gpt2,
    "deepfm": deepfm,
    "transformer_xl": transformer_xl,
    "transformer_xl_large": transformer_xl_large,
    "gnmt": gnmt,
    "ssd300": ssd300,
    "llama3_8b": llama3_8b,
    "llama3_70b": llama3_70b,
    "gpt3_175b": gpt3_175b,
}

MODEL_NAMES: tuple[str, ...] = tuple(_BUILDERS)
# The zoo models sim.numerics.zoo_nets builds as torch.nn (what `syncsim real` trains and `syncsim
# profile` measures); the others are layer lists the simulator times, with no module to run.
TORCH_MODELS: tuple[str, ...] = (
    "resnet50",
    "vgg16",
    "wrn26_10",
    "resnet32",
    "bert_base",
    "bert_large",
    "gpt2",
    "deepfm",
)


def canonical_name(name: str) -> str:
    """A model name as the zoo spells it (case-insensitive; '-' and '_' interchangeable)."""
    return name.strip().lower().replace("-", "_")


@cache
def _build(canonical: str) -> ModelSpec:
    # Specs are frozen, so one instance per name can be shared by every caller.
    return _BUILDERS[canonical]()


def get_model(name: str) -> ModelSpec:
    """The model called `name` (case-insensitive; '-' and '_' are interchangeable)."""
    canonical = canonical_name(name) if isinstance(name, str) else None
    if canonical not in _BUILDERS:
        raise ValueError(f"unknown model {name!r}; choose one of: {', '.join(MODEL_NAMES)}")
    return _build(canonical)
