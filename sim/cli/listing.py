"""What `syncsim list --verbose` prints: one line per policy, model and GPU, saying what each is.

A policy's line is its class's `description` attribute where it sets one, else the first sentence of
its module's docstring (built-ins: one scheme per module) or of its class's (plug-ins, whose file may
hold several); a model's, its size, what one sample is and its source (the zoo's own fields); a GPU's,
the catalogue's figures.
"""

from __future__ import annotations

import sys
from typing import Any

WIDTH = 110  # characters of a description before it is cut


def first_sentence(text: str | None) -> str:
    """The first sentence of a docstring's first paragraph, on one line, cut at `WIDTH`."""
    if not text:
        return ""
    paragraph = " ".join(line.strip() for line in text.strip().split("\n\n")[0].splitlines())
    end = paragraph.find(". ")
    sentence = paragraph if end < 0 else paragraph[: end + 1]
    return sentence if len(sentence) <= WIDTH else sentence[: WIDTH - 3].rstrip() + "..."


def policy_line(cls: type, builtin: bool) -> str:
    """What the policy class does, in a line (see the module's docstring for the order looked in)."""
    own = cls.__dict__.get("description")
    if isinstance(own, str) and own.strip():
        return first_sentence(own)
    module = sys.modules.get(cls.__module__)
    docs = [getattr(module, "__doc__", None), cls.__dict__.get("__doc__")]
    for doc in docs if builtin else docs[::-1]:
        if line := first_sentence(doc):
            return line
    return "(no description)"


def policy_lines() -> list[tuple[str, str]]:
    """(name, description) of every registered policy; one that cannot be loaded says why."""
    from policies.registry import BUILTIN, available, resolve

    rows = []
    for name in sorted(available()):
        try:
            rows.append((name, policy_line(resolve(name), name in BUILTIN)))
        except (ValueError, ImportError, AttributeError) as exc:  # an entry point whose package is broken
            rows.append((name, f"(cannot be loaded: {exc})"))
    return rows


def model_lines() -> list[tuple[str, str]]:
    """(name, description) of every zoo model and of the workload kinds that are not zoo models."""
    from sim.catalog.zoo import MODEL_NAMES, get_model

    rows = [("synthetic", "workload.gradient_mb and compute_ms set by hand, split into synthetic_layers")]
    for name in MODEL_NAMES:
        spec = get_model(name)
        size = f"{spec.params / 1e9:.3g}B" if spec.params >= 1e9 else f"{spec.params / 1e6:.3g}M"
        rows.append((name, f"{size} parameters; a sample: {spec.sample}; {_cut(spec.source)}"))
    rows.append(("transformer", "a decoder-only model: workload.transformer's numbers or a Hugging Face config.json"))
    rows.append(("profiled", "your module, its layers and times from `syncsim profile module:factory`"))
    return rows


def gpu_lines() -> list[tuple[str, str]]:
    """(name, the catalogue's figures) of every GPU."""
    from sim.catalog.gpus import GPU_NAMES, get_gpu

    return [(name, gpu_figures(get_gpu(name))) for name in GPU_NAMES]


def gpu_figures(gpu: Any) -> str:
    """A GPU's peak TFLOPS per precision, memory, memory bandwidth and intra-host link."""
    peaks = [("fp32", gpu.fp32_tflops), ("tf32", gpu.tf32_tflops), ("fp16", gpu.fp16_tflops)]
    peaks.append(("bf16", gpu.bf16_tflops))
    tflops = ", ".join(f"{kind} {value:g}" for kind, value in peaks if value)
    sms = f", {gpu.sms} SMs" if gpu.sms else ""
    return (
        f"peak TFLOPS {tflops}; {gpu.memory_gb:g} GB at {gpu.memory_bandwidth_gbs:g} GB/s; "
        f"intra-host link {gpu.intra_host_gbps:g} Gbit/s per direction{sms}"
    )


def verbose_listing() -> str:
    """Every policy, model and GPU with its line, in three sections."""
    out = []
    for title, rows in (("policies", policy_lines()), ("models", model_lines()), ("gpus", gpu_lines())):
        width = max(len(name) for name, _ in rows)
        out.append(f"{title}:")
        out += [f"  {name:<{width}}  {text}" for name, text in rows]
    return "\n".join(out)


def _cut(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 3].rstrip() + "..."
