"""The `numerics:` config section: a small real model every simulated worker trains (off by default).

The workload (`workload:`) still sets the clock: compute times and gradient bucket sizes. The numerics
task is the proxy whose accuracy is tracked against that clock, so a scheme is judged on time-to-
accuracy. See docs/numerics.md for what every op does to the tensors.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from sim.catalog.zoo import MODEL_NAMES, TORCH_MODELS, canonical_name
from sim.catalog.zoo.cnn import CIFAR10_CLASSES, IMAGENET_CLASSES
from sim.catalog.zoo.llm import DecoderArchitecture
from sim.catalog.zoo.transformers import BERT_POSITIONS, GPT2_POSITIONS
from sim.config.types import AsTuple, Strict

SMALL_MODELS = ("logreg", "mlp", "cnn")
DECODER = "transformer"  # the decoder-only model workload.transformer describes (sim.numerics.decoder_net)
ZOO_CLASSES = {
    "resnet50": IMAGENET_CLASSES,
    "vgg16": IMAGENET_CLASSES,
    "wrn26_10": CIFAR10_CLASSES,
    "resnet32": CIFAR10_CLASSES,
}
ZOO_POSITIONS = {"bert_base": BERT_POSITIONS, "bert_large": BERT_POSITIONS, "gpt2": GPT2_POSITIONS}

DIGITS_SAMPLES = 1797  # sklearn's load_digits: the 8x8 digits set's size

Samples = Annotated[int, Field(ge=1, le=1_000_000)]  # numerics keeps its data set in memory
Width = Annotated[int, Field(ge=1, le=65_536)]
Iterations = Annotated[int, Field(ge=0, le=1_000_000_000)]
Rate = Annotated[float, Field(gt=0, le=1e3)]
Fraction = Annotated[float, Field(gt=0, lt=1)]  # open at 1: a held-out share, a decay rate


class SyntheticData(Strict):
    """A seeded classification set (sklearn's make_classification), drawn from the config's seed."""

    samples: Samples = Field(4000, description="samples in total, before the held-out split")
    features: Width = Field(32, description="input features")
    informative: Width = Field(16, description="features that carry the class (<= features)")
    classes: Annotated[int, Field(ge=2, le=65_536)] = Field(4, description="number of classes")
    class_sep: Rate = Field(1.0, description="how far apart the classes sit (smaller = harder)")

    @model_validator(mode="after")
    def _informative_fits(self) -> SyntheticData:
        if self.informative > self.features:
            raise ValueError(f"informative: {self.informative} exceeds features ({self.features})")
        return self


class OptimizerConfig(Strict):
    """The optimizer every replica (and every server shard) runs; `lr` is for the global batch."""

    name: Literal["sgd", "adam", "adamw"] = Field(
        "sgd", description="sgd (with optional momentum), adam, or adamw (adam with decoupled weight decay)"
    )
    lr: Rate = Field(0.1, description="learning rate of one update on the global batch's mean gradient")
    momentum: Annotated[float, Field(ge=0, lt=1)] = Field(0.9, description="sgd: heavy-ball momentum")
    nesterov: bool = Field(False, description="sgd: Nesterov momentum")
    betas: Annotated[tuple[Fraction, Fraction], AsTuple] = Field((0.9, 0.999), description="adam: moment decay rates")
    eps: Annotated[float, Field(gt=0, le=1)] = Field(1e-8, description="adam: denominator term")
    weight_decay: Annotated[float, Field(ge=0, le=1e3)] = Field(
        0.0,
        description="sgd, adam: L2 penalty added to the gradient; adamw: decay lr x weight_decay of each "
        "parameter per step, apart from the gradient (torch.optim.AdamW)",
    )

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> OptimizerConfig:
        if self.nesterov and (self.name != "sgd" or self.momentum == 0):
            raise ValueError("nesterov: needs name: sgd and momentum > 0")
        return self


class ScheduleConfig(Strict):
    """Learning rate over iterations: linear warm-up, then constant, step decay or cosine to zero."""

    kind: Literal["constant", "step", "cosine"] = Field("constant", description="constant, step or cosine")
    warmup_iterations: Iterations = Field(
        0, description="ramp the rate linearly from lr/warmup to lr over this many iterations (Goyal et al.)"
    )
    milestones: list[Annotated[int, Field(ge=1, le=1_000_000_000)]] = Field(
        default_factory=list, description="step: iterations where lr is multiplied"
    )
    gamma: Rate = Field(0.1, description="step: the multiplier at each milestone")


class AsyncConfig(Strict):
    """How asynchronous shards (ASP, SSP) scale a single worker's update (docs/numerics.md)."""

    lr_scale: Union[Literal["linear", "none"], Rate] = Field(
        "linear",
        description="linear: lr x (per-worker batch / global batch), the linear scaling rule for a one-worker "
        "update; none: lr unchanged; or a factor",
    )
    momentum: Literal["scaled", "same", "zero"] = Field(
        "scaled",
        description="server momentum for asynchronous updates: scaled = momentum / workers (asynchrony adds "
        "implicit momentum; Sync-Switch's best setting), same, or zero",
    )
    momentum_ramp_iterations: Iterations = Field(
        0,
        description="with momentum: scaled, ramp the servers' momentum linearly from momentum / workers back to "
        "momentum over this many iterations (updates / workers) of each asynchronous phase; 0 = no ramp "
        "(Sync-Switch ramped back after ~4k steps)",
    )


class ZooData(Strict):
    """Seeded synthetic inputs shaped for a zoo model (numerics.model set to one of the zoo's)."""

    samples: Samples = Field(256, description="samples in total, before the held-out split")
    classes: Annotated[int, Field(ge=2, le=65_536)] = Field(
        10, description="classes (image models) or token symbols (transformers) the synthetic data use"
    )
    image_size: Optional[Annotated[int, Field(ge=8, le=4096)]] = Field(
        None, description="image models: input height and width (default: the model's own, 224 or 32)"
    )
    sequence: Width = Field(32, description="transformers: tokens per sample (at most the model's positions)")
    features: Optional[Annotated[int, Field(ge=39, le=10_000_000)]] = Field(
        None, description="deepfm: rows of the hashed feature space (default: Criteo's 10^6; smaller trains faster)"
    )


def rotary_problem(arch: DecoderArchitecture) -> Optional[str]:
    """Why the decoder's eager module cannot rotate `arch`'s heads (an odd head size), naming the field; else None."""
    if arch.positions == "rotary" and arch.head_dim % 2:
        return (
            f"heads: hidden / heads = {arch.head_dim} is odd, and rotary positions rotate pairs of a head's "
            "values; allowed: heads giving an even head size, or positions: learned"
        )
    return None


def decoder_problems(arch: DecoderArchitecture, zoo: ZooData) -> list[str]:
    """Why `numerics.model: transformer` cannot train `arch` (workload.transformer's) on `zoo`'s data."""
    problems = []
    if zoo.classes > arch.vocab:
        problems.append(
            f"numerics.zoo.classes: {zoo.classes} symbols do not fit the vocabulary; allowed: 2 to {arch.vocab}"
        )
    if arch.positions == "learned" and zoo.sequence > arch.max_positions:
        problems.append(
            f"numerics.zoo.sequence: {zoo.sequence} tokens exceed the learned position table "
            f"(workload.transformer.max_positions {arch.max_positions}); allowed: 1 to {arch.max_positions}"
        )
    rotary = rotary_problem(arch)
    return problems + ([f"workload.transformer.{rotary}"] if rotary else [])


class NumericsConfig(Strict):
    """Train a real model in every simulated worker, on the simulator's clock."""

    enabled: bool = Field(True, description="set false to keep the section but run timing only")
    dataset: Literal["digits", "synthetic"] = Field(
        "digits", description="digits: sklearn's bundled 8x8 digits (1797 samples); synthetic: see `synthetic`"
    )
    model: str = Field(
        "mlp",
        description="logreg, mlp or cnn (cnn: digits only), or a zoo model (torch.nn, on synthetic data "
        "shaped for it; `zoo:`): " + ", ".join(TORCH_MODELS) + ", or transformer (workload.transformer's "
        "architecture at zoo.sequence tokens, next-token prediction over zoo.classes symbols)",
    )
    hidden: list[Width] = Field([64], description="mlp: hidden layer widths")
    channels: list[Width] = Field([8, 16], description="cnn: channels of its two 3x3 conv layers")
    synthetic: SyntheticData = Field(SyntheticData(), description="the synthetic data set")
    zoo: ZooData = Field(ZooData(), description="the synthetic data of a zoo model")
    test_fraction: Fraction = Field(0.2, description="held-out share of the samples, used for evaluation")
    global_batch: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        128, description="samples per iteration over all workers (divisible by workers)"
    )
    optimizer: OptimizerConfig = Field(OptimizerConfig(), description="optimizer and learning rate")
    schedule: ScheduleConfig = Field(ScheduleConfig(), description="learning-rate schedule")
    asynchronous: AsyncConfig = Field(AsyncConfig(), description="update scaling on asynchronous shards")
    eval_every: Annotated[int, Field(ge=1, le=1_000_000_000)] = Field(
        10, description="evaluate every this many iterations (updates / workers)"
    )
    eval_workers: bool = Field(True, description="also evaluate every worker's replica, not only the consensus")
    target_accuracy: Optional[Annotated[float, Field(gt=0, le=1)]] = Field(
        None, description="held-out accuracy whose first crossing sets time_to_target_s in summary.csv"
    )
    threads: Annotated[int, Field(ge=1, le=1024)] = Field(
        1, description="torch threads while training (tiny models run fastest on one)"
    )

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        canonical = canonical_name(value)
        allowed = ", ".join(SMALL_MODELS + TORCH_MODELS + (DECODER,))
        if canonical in SMALL_MODELS or canonical == DECODER:
            return canonical
        if canonical not in MODEL_NAMES:
            raise ValueError(f"unknown model {value!r}; allowed: {allowed}")
        if canonical not in TORCH_MODELS:
            raise ValueError(
                f"{canonical} has no torch.nn version to train (the simulator times it only); allowed: {allowed}"
            )
        return canonical

    @property
    def zoo_model(self) -> bool:
        """A model of sim.numerics.zoo_task (a zoo model's torch.nn version, or the decoder)."""
        return self.model in MODEL_NAMES or self.model == DECODER

    @property
    def samples_field(self) -> str | None:
        """The field that sizes the data set (None for digits, whose size is fixed)."""
        if self.zoo_model:
            return "zoo.samples"
        return "synthetic.samples" if self.dataset == "synthetic" else None

    @property
    def split(self) -> tuple[int, int]:
        """(training, held-out) sample counts: the held-out share rounded, at least one sample, so the
        evaluation always has data; the task builders (sim.numerics) split by these counts."""
        samples = {"zoo.samples": self.zoo.samples, "synthetic.samples": self.synthetic.samples}.get(
            self.samples_field or "", DIGITS_SAMPLES
        )
        held_out = max(1, int(round(self.test_fraction * samples)))
        return samples - held_out, held_out

    @model_validator(mode="after")
    def _split_leaves_training_samples(self) -> NumericsConfig:
        train, held_out = self.split
        if train < 1:
            more = f" or raise {self.samples_field}" if self.samples_field else ""
            raise ValueError(
                f"test_fraction: {self.test_fraction:g} of {train + held_out} samples holds out {held_out} and "
                f"leaves no training sample; lower test_fraction{more}"
            )
        return self

    @model_validator(mode="after")
    def _cnn_needs_images(self) -> NumericsConfig:
        if self.zoo_model and "dataset" in self.model_fields_set and self.dataset == "digits":
            raise ValueError(
                f"dataset: digits fits logreg, mlp and cnn; model {self.model} trains on synthetic data shaped "
                "for it (set dataset: synthetic, sized by zoo:)"
            )
        if self.model in ZOO_CLASSES and self.zoo.classes > ZOO_CLASSES[self.model]:
            raise ValueError(f"zoo.classes: {self.model} classifies into {ZOO_CLASSES[self.model]} classes at most")
        if self.zoo.features is not None and self.model != "deepfm":
            raise ValueError(f"zoo.features: applies only to model deepfm (got model {self.model})")
        if self.model in ZOO_POSITIONS and self.zoo.sequence > ZOO_POSITIONS[self.model]:
            raise ValueError(f"zoo.sequence: {self.model} has {ZOO_POSITIONS[self.model]} positions at most")
        if self.model == "cnn" and self.dataset != "digits":
            raise ValueError("model: cnn needs dataset: digits (images); allowed for synthetic: logreg, mlp")
        return self
