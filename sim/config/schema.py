"""The config's schema: every section typed, defaults in code, unknown keys rejected (docs/config.md).

Units live in field names (`_gbps` = 1e9 bit/s, `_us`, `_ms`, `_mb` = 1e6 bytes) and are converted
once, where the config becomes a cluster and a workload. Every error names the field and, where the
field takes a fixed set of values, lists them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.catalog.gpus import get_gpu
from sim.catalog.zoo import MODEL_NAMES, canonical_name
from sim.config.calibration import CalibrationConfig
from sim.config.cluster import (
    ClusterBase,
    CustomCluster,
    CustomLink,
    CustomNode,
    FatTreeCluster,
    RailOptimizedCluster,
    StarCluster,
    TwoTierCluster,
)
from sim.config.datacenters import MultiDatacenterCluster
from sim.config.faults import BackgroundFlow, FaultsConfig
from sim.config.nccl import NcclSettings
from sim.config.numerics import DECODER, NumericsConfig, decoder_problems
from sim.config.sparsity import SparsityConfig
from sim.config.transformer import TransformerConfig
from sim.config.types import (
    MAX_COUNT,
    MAX_MS,
    Count,
    Label,
    Megabytes,
    Milliseconds,
    Name,
    PosSeconds,
    Strict,
)

WARMUP_ITERATIONS = 3  # a real run's summary leaves out its warm-up by default (`Config.summary_warmup`)
MAX_ACCUMULATION = 65536  # micro-batches per optimizer step: far beyond any global batch a paper accumulates
PROFILED = "profiled"  # workload.model: the user's own module, whose profile gives its layers and times
TRANSFORMER = "transformer"  # workload.model: a decoder-only model built from workload.transformer


ClusterConfig = Annotated[
    Union[StarCluster, TwoTierCluster, FatTreeCluster, RailOptimizedCluster, CustomCluster, MultiDatacenterCluster],
    Field(discriminator="topology"),
]
# re-exported: sim.config.cluster defines them
__all__ = ["ClusterBase", "CustomLink", "CustomNode", "FatTreeCluster", "RailOptimizedCluster"]


class WorkloadConfig(Strict):
    """The model being trained and how each GPU computes it."""

    model: str = Field(
        description="synthetic; transformer: a decoder-only model described by `transformer`; profiled: your own "
        "module, its layers and times from `profile` (`syncsim profile module:factory`, docs/profiles.md); or a zoo "
        "model: " + ", ".join(MODEL_NAMES)
    )
    batch_size: Count = Field(32, description="samples per GPU per iteration")
    precision: Literal["fp32", "tf32", "fp16", "bf16"] = Field(
        "fp32",
        description="fp32: PyTorch's defaults (TF32 convolutions where the GPU has TF32, FP32 matrix products); "
        "tf32: TF32 for both; fp16, bf16: autocast to that type (gradients on the wire: gradient_precision)",
    )
    gradient_precision: Literal["auto", "fp32", "fp16", "bf16"] = Field(
        "auto",
        description="the type gradient values travel in (collectives, sparse pairs, parameter-server pushes and "
        "pulls, and their bytes; a sparse gradient's ids are not affected, and parameter collectives (DS-Sync's "
        "averaging) send the fp32 master weights every precision keeps): auto: 16-bit "
        "under fp16 and bf16 (as Megatron-LM, DeepSpeed and DDP's fp16/bf16 compress hooks send them), else fp32; "
        "fp32: PyTorch DDP's default under autocast (gradients in the fp32 parameters' type); fp16, bf16: that "
        "16-bit type whatever the precision. `syncsim real` casts each dense gradient collective to this type and "
        "averages in fp32; shards keep fp32 parameters and send pulls in this type (docs/real.md)",
    )
    efficiency: Optional[Annotated[float, Field(ge=1e-4, le=1)]] = Field(
        None,
        description="compute time as FLOPs at this fraction of the GPU's peak (backward twice the forward); "
        "default: the per-layer compute model of docs/compute_model.md",
    )
    profile: Optional[str] = Field(
        None,
        description="a measured compute profile (`syncsim profile`, docs/profiles.md) whose per-layer times replace "
        "the estimate from FLOPs; a relative path is relative to the config file",
    )
    implementation: Literal["eager", "tuned", "fused"] = Field(
        "eager",
        description="how the default compute model issues the step (docs/compute_model.md): eager: PyTorch "
        "without compilation, what `syncsim real` runs (Python issues each forward kernel, which binds small "
        "batches); tuned: issued ahead of the GPU (CUDA graphs, torch.compile, graph frameworks); fused: tuned "
        "with batch norm, its residual add and ReLU in one pass (NVIDIA's MXNet and PaddlePaddle ResNet-50)",
    )
    bucket_mb: Megabytes = Field(25.0, description="gradient bucket size (DDP's bucket_cap_mb)")
    overlap_backward: bool = Field(
        True,
        description="false: no gradient bucket is handed to the policy before backward ends, so none of its "
        "communication overlaps backward (apex DDP's delay_allreduce; PyTorch DDP whose first bucket, the last "
        "parameters defined, holds one that every layer uses: its gradient completes last and DDP's reducer "
        "launches buckets in order; docs/fidelity.md)",
    )
    accumulation_steps: Annotated[int, Field(ge=1, le=MAX_ACCUMULATION)] = Field(
        1,
        description="micro-batches per optimizer step: an iteration is one micro-batch with its own gradient "
        "communication (apex DDP without disable_allreduce), and every accumulation_steps-th ends with the "
        "optimizer step of optimizer_ms (timing only: numerics mode needs 1)",
    )
    accumulation_sync: Literal["every", "last"] = Field(
        "every",
        description="with accumulation_steps > 1: every: each micro-batch communicates its gradient (apex DDP "
        "without disable_allreduce); last: only the micro-batch before the optimizer step does (DDP's no_sync, "
        "FSDP's set_requires_gradient_sync(False) on the others; FSDP still gathers parameters on every one)",
    )
    activation_checkpointing: Literal[False, True, "selective"] = Field(
        False,
        description="true: recompute every layer's forward in backward (torch.utils.checkpoint around each "
        "layer): each layer's backward takes its forward time longer; in memory, a transformer keeps only each "
        "block's input. selective (transformers only): torchtitan's op-level policy, which keeps the outputs of "
        "attention and of every other matrix product in a block and recomputes the rest (docs/memory.md)",
    )
    optimizer_state: Optional[Literal["none", "momentum", "adam"]] = Field(
        None,
        description="fp32 values of optimizer state per parameter for the memory model (docs/memory.md): none "
        "(plain SGD), momentum (one), adam (two: Adam, AdamW); default: what numerics.optimizer keeps "
        "(momentum when numerics is left out)",
    )
    optimizer_ms: Milliseconds = Field(
        0.0,
        description="each GPU's optimizer step (weight update, gradient clipping) after the gradient "
        "communication of every accumulation_steps-th iteration; 0: folded into the compute time",
    )
    compute_jitter: Annotated[float, Field(ge=0, le=10)] = Field(
        0.0, description="coefficient of variation of each iteration's compute time"
    )
    gradient_mb: Optional[Megabytes] = Field(
        None, description="synthetic only: gradient size on the wire (in gradient_precision)"
    )
    compute_ms: Optional[Milliseconds] = Field(None, description="synthetic only: forward + backward time")
    synthetic_layers: Annotated[int, Field(ge=1, le=100_000)] = Field(
        1, description="synthetic only: equal layers the gradient is split into"
    )
    transformer: Optional[TransformerConfig] = Field(
        None,
        description="model transformer only: its architecture, as numbers or a Hugging Face config.json (docs/zoo.md)",
    )
    sparsity: SparsityConfig = Field(SparsityConfig(), description="which gradients are sparse (docs/sparse.md)")
    input_samples_s: Optional[Annotated[float, Field(ge=1e-3, le=1e9)]] = Field(
        None,
        description="samples/s one host's CPUs read, decode and augment for all its GPUs together; an iteration "
        "waits for its batch (docs/fidelity.md). default: unlimited (data on the GPU, or loaders that keep up)",
    )
    input_prefetch_batches: Annotated[int, Field(ge=1, le=1000)] = Field(
        2, description="batches per GPU the input pipeline prepares ahead (with input_samples_s)"
    )

    @property
    def wire_precision(self) -> str:
        """`gradient_precision` with auto resolved: fp16 or bf16 under that precision, else fp32."""
        if self.gradient_precision != "auto":
            return self.gradient_precision
        return self.precision if self.precision in ("fp16", "bf16") else "fp32"

    @model_validator(mode="after")
    def _accumulation_spaces_an_optimizer_step(self) -> WorkloadConfig:
        if self.accumulation_steps > 1 and self.optimizer_ms == 0:
            raise ValueError(
                f"accumulation_steps: {self.accumulation_steps} needs optimizer_ms > 0, the step it spaces out "
                "(with none, every micro-batch costs the same); allowed without it: 1"
            )
        return self

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in ("synthetic", TRANSFORMER, PROFILED) and canonical_name(value) not in MODEL_NAMES:
            raise ValueError(
                f"unknown model {value!r}; allowed: synthetic, {', '.join(MODEL_NAMES)}, {TRANSFORMER} (described by "
                f"workload.transformer), or {PROFILED} (your own module, from its profile)"
            )
        return value

    @model_validator(mode="after")
    def _transformer_block(self) -> WorkloadConfig:
        if self.model == TRANSFORMER and self.transformer is None:
            raise ValueError("transformer: required when model is 'transformer' (its numbers, or hf_config)")
        if self.model != TRANSFORMER and self.transformer is not None:
            raise ValueError(f"transformer: applies only to model 'transformer' ({self.model!r} sets its own layers)")
        return self

    @model_validator(mode="after")
    def _synthetic_fields(self) -> WorkloadConfig:
        synthetic_only = ("gradient_mb", "compute_ms")
        if self.model == "synthetic":
            for name in synthetic_only:
                if getattr(self, name) is None:
                    raise ValueError(f"{name}: required when model is 'synthetic'")
        else:
            for name in synthetic_only:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: applies only to model 'synthetic' (another model's layers set it)")
            if self.sparsity.lookups is not None:
                raise ValueError("sparsity.lookups: applies only to model 'synthetic' (a zoo model's tables set it)")
        if self.model == PROFILED and self.profile is None:
            raise ValueError(
                f"profile: required when model is '{PROFILED}' (the profile of your module gives its layers and "
                "times: `syncsim profile module:factory`)"
            )
        if self.profile is not None and self.model == "synthetic":
            raise ValueError(
                "profile: applies only to zoo models and profiled (a synthetic workload's compute_ms sets its time)"
            )
        if self.profile is not None and self.efficiency is not None:
            raise ValueError("efficiency: not used when a profile gives the measured times; remove one of the two")
        if self.implementation != "eager" and (
            self.model == "synthetic" or self.profile is not None or self.efficiency is not None
        ):
            raise ValueError(
                "implementation: applies only to the default compute model of a zoo model; "
                "remove it, or remove efficiency/profile"
            )
        return self


class PolicyEntry(BaseModel):
    """`name` (registered name or `module:Class`), optional `label`, and the policy's own settings."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)
    name: Annotated[str, Field(min_length=1)] = Field(
        description="a registered policy name (`syncsim list`) or `module:Class` with module.py beside the config "
        "or in the working directory (docs/policies.md)"
    )
    label: Optional[Label] = Field(
        None,
        description="the name in results; default: the policy's name (a plug-in: its class's `name`, else the "
        "class name); labels must be unique",
    )

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def display(self) -> str:
        """The policy's name in results: its label, else `policies.registry.label_of(name)`."""
        if self.label:
            return self.label
        from policies.registry import label_of  # a plug-in's class names its rows

        return label_of(self.name)


class SimulationConfig(Strict):
    """How the simulator models what the config describes."""

    network_model: Literal["nccl", "ideal"] = Field(
        "nccl",
        description="nccl: collectives cost what NCCL's algorithms and protocols reach on the GPUs' NVLink and NICs "
        "(docs/fidelity.md); ideal: every flow gets its links' full bandwidth and a collective its alpha-beta steps",
    )
    nccl: NcclSettings = Field(
        default_factory=NcclSettings, description="the NCCL model's algorithm and protocol choice"
    )

    collective_model: Literal["pipelined", "stepwise"] = Field(
        "pipelined",
        description="ideal network only: pipelined, a collective is one set of coupled flows (fast); stepwise, every "
        "ring step is p flows (the NCCL model pipelines every collective)",
    )
    host_symmetry: Literal["auto", "off"] = Field(
        "auto",
        description="auto: where every host runs the same program on the same hardware (docs/scale.md), simulate "
        "one host and copy its rows to the others, the same answers in a fraction of the time; off: every rank",
    )
    trace: bool = Field(True, description="write trace.json")
    check_memory: bool = Field(
        True,
        description="refuse a run whose peak memory per GPU (docs/memory.md) exceeds cluster.gpu's memory; "
        "false: run it anyway (memory.csv still says its peak)",
    )
    utilization_samples: Annotated[int, Field(ge=2, le=1_000_000)] = Field(
        400, description="link-utilisation samples kept per policy; the interval doubles whenever they run out"
    )
    utilization_interval_ms: Annotated[float, Field(ge=1e-3, le=MAX_MS)] = Field(
        1.0, description="first link-utilisation sampling interval"
    )
    stall_timeout_s: Annotated[PosSeconds, Field(ge=1)] = Field(
        3600.0, description="simulated seconds without any worker progress before the run counts as deadlocked"
    )
    trace_max_events: Annotated[int, Field(ge=1, le=100_000_000)] = Field(
        500_000, description="events kept in trace.json; the rest are counted, not kept"
    )
    max_estimated_wall_s: PosSeconds = Field(
        3600.0,
        description="refuse (exit 2, before building anything) a run whose cost estimate, printed by `syncsim check`, "
        "exceeds this many seconds of wall time; the estimate is rough (within a factor of ~3)",
    )
    max_estimated_memory_mb: Optional[Megabytes] = Field(
        None,
        description="refuse a run whose estimated peak memory exceeds this many MB; default: 80% of this "
        "machine's physical memory",
    )


class Config(Strict):
    """A whole experiment: one cluster, one workload, policies compared side by side."""

    name: Name = Field("experiment", description="names the default output folder")
    seed: Annotated[int, Field(ge=0, lt=2**63)] = Field(
        0, description="seeds compute jitter and ECMP hashing; same seed, same results"
    )
    iterations: Annotated[int, Field(ge=1, le=1_000_000_000)] = Field(
        10, description="training iterations each worker runs"
    )
    warmup_iterations: Optional[Annotated[int, Field(ge=0, le=1_000_000_000)]] = Field(
        None,
        description=f"each worker's first iterations the summary's timings leave out (iterations.csv keeps them); "
        f"default: {WARMUP_ITERATIONS} in a real run and `syncsim validate` (at most iterations - 1), none in a "
        "simulation; set it to summarise both alike (the learning-rate warm-up is numerics.schedule's)",
    )
    cluster: ClusterConfig = Field(description="the hardware: topology, GPUs, links")
    workload: WorkloadConfig = Field(description="the model and per-GPU batch")
    policies: list[PolicyEntry] = Field(min_length=1, description="the schemes to compare")
    faults: FaultsConfig = Field(FaultsConfig(), description="slow workers and transient stragglers")
    background: list[BackgroundFlow] = Field(default_factory=list, description="other jobs' traffic")
    simulation: SimulationConfig = Field(SimulationConfig(), description="simulator fidelity and outputs")
    numerics: Optional[NumericsConfig] = Field(
        None, description="train a real model in every worker for time-to-accuracy (off when absent)"
    )
    calibration: CalibrationConfig = Field(
        CalibrationConfig(), description="how `syncsim calibrate` measures the cluster (ignored by the simulator)"
    )

    @property
    def numerics_on(self) -> bool:
        return self.numerics is not None and self.numerics.enabled

    def summary_warmup(self, real: bool) -> int:
        """`warmup_iterations`, or by default a real run's warm-up (connections, allocator, caches, which
        the simulator does not model; at least one iteration kept) and none in a simulation."""
        if self.warmup_iterations is not None:
            return self.warmup_iterations
        return min(WARMUP_ITERATIONS, self.iterations - 1) if real else 0

    @model_validator(mode="after")
    def _warmup_leaves_iterations(self) -> Config:
        warmup, n = self.warmup_iterations, self.iterations
        if warmup is not None and warmup >= n:
            raise ValueError(f"warmup_iterations: {warmup} leaves no iteration to summarise; allowed: 0 to {n - 1}")
        return self

    @model_validator(mode="after")
    def _cluster_fits_a_machine_room(self) -> Config:
        gpus = self.cluster.gpu_total
        if gpus > MAX_COUNT:
            raise ValueError(f"cluster: {gpus:,} GPUs; at most {MAX_COUNT:,} (2^20), more than any cluster has")
        return self

    @model_validator(mode="after")
    def _precision_runs_on_the_gpu(self) -> Config:
        gpu = get_gpu(self.cluster.gpu)
        if self.workload.precision == "bf16" and not gpu.bf16_tflops:
            raise ValueError(
                f"workload.precision: 'bf16' needs BF16 arithmetic, which cluster.gpu {gpu.name} lacks; "
                "allowed there: fp32, tf32, fp16"
            )
        return self

    @model_validator(mode="after")
    def _numerics_updates_every_iteration(self) -> Config:
        if self.numerics_on and self.workload.accumulation_steps != 1:
            raise ValueError(
                f"workload.accumulation_steps: {self.workload.accumulation_steps} with numerics on; numerics "
                "applies every iteration's gradients, so allowed there: 1"
            )
        return self

    @model_validator(mode="after")
    def _decoder_numerics_fit_the_architecture(self) -> Config:
        n = self.numerics
        if n is not None and n.model == DECODER and self.workload.transformer is not None:
            if problems := decoder_problems(self.workload.transformer.architecture(), n.zoo):
                raise ValueError("\n".join(problems))
        return self

    @model_validator(mode="after")
    def _zoo_numerics_match_workload(self) -> Config:
        n = self.numerics
        if n is not None and n.zoo_model and canonical_name(self.workload.model) != n.model:
            raise ValueError(
                f"numerics.model: {n.model} trains a zoo model, so workload.model must be the same model "
                f"(its layers set the gradient buckets), got {self.workload.model!r}"
            )
        return self
