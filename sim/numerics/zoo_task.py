"""A zoo model (`sim.numerics.zoo_nets`) as a numerics task: flat parameters, seeded synthetic data.

Same interface as `sim.numerics.tasks.Task` (`data`, `initial`, `size`, `gradient`, `evaluate`), so
numerics mode and the real backend train it unchanged. The flat vector holds the parameters in the
zoo's layer order, so the simulator's gradient buckets cut it where the zoo's layers end.

The data are learnable but synthetic, drawn from the config's seed (`numerics.zoo`):
- image models: a random pattern per class plus unit noise; cross-entropy over `classes`;
- BERT: token sequences from a noisy recurrence over `classes` symbols, 15% of positions masked,
  predicted through the tied word embedding (masked-language modelling);
- GPT-2: the same sequences, next-token prediction through the tied head;
- `transformer` (the decoder `workload.transformer` describes, `sim.numerics.decoder_net`, at
  `zoo.sequence` tokens): the same sequences over symbols 0..classes-1, next-token prediction;
- DeepFM: one hashed id per field, labelled by a random linear teacher; logistic loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Optional

import torch
from torch.func import functional_call
from torch.nn import functional as F

from sim.catalog.zoo import get_model
from sim.catalog.zoo.llm import DecoderArchitecture, decoder_model
from sim.catalog.zoo.recsys import CRITEO_HASHED_FEATURES
from sim.config.numerics import NumericsConfig
from sim.numerics.decoder_net import DecoderLM
from sim.numerics.tasks import Dataset, accumulate_gradient
from sim.numerics.zoo_nets import FIELDS, build_zoo_module, flat_layout

IMAGE_MODELS = {"resnet50": 224, "vgg16": 224, "wrn26_10": 32, "resnet32": 32}
MASK_TOKEN, FIRST_SYMBOL, MASKED_SHARE = 103, 1000, 0.15
IGNORE = -100
EVAL_CHUNK = 64
DECODER = "transformer"  # numerics.model: the decoder workload.transformer describes
SHIFTED = ("gpt2", DECODER)  # next-token prediction


def numerics_architecture(workload_arch: DecoderArchitecture, cfg: NumericsConfig) -> DecoderArchitecture:
    """`workload.transformer`'s architecture at the numerics sequence length (`zoo.sequence`)."""
    return replace(workload_arch, seq_len=cfg.zoo.sequence)


class ZooTask:
    """`architecture`: the decoder's, for `numerics.model: transformer` (`numerics_architecture`)."""

    gradient_in_place = True  # `gradient` writes into `out` (sim.numerics.replica)

    def __init__(self, cfg: NumericsConfig, seed: int, architecture: Optional[DecoderArchitecture] = None) -> None:
        self.cfg, self.name = cfg, cfg.model
        if (self.name == DECODER) != (architecture is not None):
            raise ValueError("architecture: given for numerics.model transformer, and for it only")
        self.architecture = architecture
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.module = DecoderLM(architecture) if architecture else build_zoo_module(self.name, cfg.zoo.features)
        spec = decoder_model(DECODER, architecture, "workload.transformer") if architecture else get_model(self.name)
        self.spec = spec
        params = dict(self.module.named_parameters())
        self.slices: list[tuple[str, int, int, torch.Size]] = []
        offset = 0
        for _, names in flat_layout(self.module, spec):
            for name in names:
                n = params[name].numel()
                self.slices.append((name, offset, offset + n, params[name].shape))
                offset += n
        self.size = offset
        self.tensor_sizes = [b - a for _, a, b, _ in self.slices]  # in flat order
        self.tensor_shapes = [tuple(int(d) for d in shape) for *_, shape in self.slices]  # in flat order
        self.initial = torch.cat([params[name].detach().reshape(-1) for name, *_ in self.slices]).clone()
        self.data = _synthetic(self.name, cfg, seed)
        self.loss, self._correct = objective(self.name)

    def forward(self, flat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self._call(self._unflatten(flat), x)

    def gradient(
        self,
        flat: torch.Tensor,
        x: torch.Tensor,
        y: torch.Tensor,
        loss_scale: float = 1.0,
        out: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, float]:
        """One leaf per parameter (a single flat leaf would make autograd add every parameter's
        gradient into a zeroed copy of the whole vector: hundreds of full-size writes), each
        accumulating into its slice of the flat gradient (`out`, or a new vector; `accumulate_gradient`).
        `loss_scale`: as `Task.gradient`'s."""
        leaves = {k: v.detach().requires_grad_(True) for k, v in self._unflatten(flat).items()}
        grad = torch.empty_like(flat) if out is None else out
        loss = self.loss(self._call(leaves, x), y)
        accumulate_gradient(loss, list(leaves.values()), grad, list(self._unflatten(grad).values()), loss_scale)
        return grad, float(loss.detach())

    def _unflatten(self, flat: torch.Tensor) -> dict[str, torch.Tensor]:
        return {name: flat[a:b].view(shape) for name, a, b, shape in self.slices}

    def _call(self, params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return functional_call(self.module, params, (x,))

    @torch.no_grad()
    def evaluate(self, flat: torch.Tensor) -> tuple[float, float]:
        """(loss, accuracy) on the held-out split, in chunks."""
        x, y = self.data.x_test, self.data.y_test
        loss = correct = counted = 0.0
        for i in range(0, len(y), EVAL_CHUNK):
            out, target = self.forward(flat, x[i : i + EVAL_CHUNK]), y[i : i + EVAL_CHUNK]
            hits, n = self._correct(out, target)
            loss += float(self.loss(out, target)) * n
            correct, counted = correct + hits, counted + n
        return loss / max(counted, 1), correct / max(counted, 1)


Objective = tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], Callable[..., tuple[float, float]]]


def objective(name: str) -> Objective:
    if name == "deepfm":
        return (
            lambda out, y: F.binary_cross_entropy_with_logits(out, y),
            lambda out, y: (float(((out > 0).float() == y).sum()), float(len(y))),
        )
    if name in IMAGE_MODELS:
        return F.cross_entropy, lambda out, y: (float((out.argmax(1) == y).sum()), float(len(y)))

    def token_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out.flatten(0, 1), y.flatten(), ignore_index=IGNORE)

    def token_hits(out: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        scored = y != IGNORE
        return float((out.argmax(-1)[scored] == y[scored]).sum()), float(scored.sum())

    return token_loss, token_hits


def _synthetic(name: str, cfg: NumericsConfig, seed: int) -> Dataset:
    z = cfg.zoo
    g = torch.Generator().manual_seed(seed)
    n = z.samples
    if name in IMAGE_MODELS:
        size = z.image_size or IMAGE_MODELS[name]
        patterns = torch.randn(z.classes, 3, size, size, generator=g)
        y = torch.randint(z.classes, (n,), generator=g)
        x = 0.5 * patterns[y] + torch.randn(n, 3, size, size, generator=g)
    elif name == "deepfm":
        fields, features = FIELDS, z.features or CRITEO_HASHED_FEATURES
        block = features // fields
        x = torch.arange(fields) * block + torch.randint(block, (n, fields), generator=g)
        teacher = torch.randn(features, generator=g)
        y = (teacher[x].sum(1) > 0).float()
    else:
        x, y = token_sequences(name, z.sequence, z.classes, n, g, 0 if name == DECODER else FIRST_SYMBOL)
    test = cfg.split[1]  # validated to leave a training sample
    return Dataset(x[test:], y[test:], x[:test], y[:test], z.classes)


def token_sequences(
    name: str, length: int, symbols: int, n: int, g: torch.Generator, first: int = FIRST_SYMBOL
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token sequences of ids `first`.. where each symbol follows from the previous one (3s + 1 mod symbols)
    80% of the time; BERT gets them masked, GPT-2 and the decoder shifted by one."""
    steps = length + (1 if name in SHIFTED else 0)
    seq = torch.empty(n, steps, dtype=torch.int64)
    seq[:, 0] = torch.randint(symbols, (n,), generator=g)
    for t in range(1, steps):
        follow = torch.rand(n, generator=g) < 0.8
        seq[:, t] = torch.where(follow, (3 * seq[:, t - 1] + 1) % symbols, torch.randint(symbols, (n,), generator=g))
    seq += first
    if name in SHIFTED:
        return seq[:, :-1].clone(), seq[:, 1:].clone()
    masked = torch.rand(n, length, generator=g) < MASKED_SHARE
    masked[:, 0] |= ~masked.any(1)  # at least one masked position per sample
    return torch.where(masked, MASK_TOKEN, seq), torch.where(masked, seq, IGNORE)
