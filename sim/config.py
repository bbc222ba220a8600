"""The YAML config: typed, defaults in code, unknown keys rejected (DESIGN.md §4).

Units live in field names (`_gbps` = 1e9 bit/s, `_us`, `_ms`, `_mb` = 1e6 bytes) and are converted
once, where the config becomes a cluster and a workload. Every error names the field and, where the
field takes a fixed set of values, lists them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.config_errors import describe
from sim.config_faults import BackgroundFlow, FaultsConfig
from sim.config_numerics import NumericsConfig
from sim.config_sparsity import SparsityConfig
from sim.errors import ConfigError
from sim.gpus import GPU_NAMES
from sim.zoo import MODEL_NAMES, canonical_name

PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterBase(Strict):
    gpus_per_host: PosInt = Field(1, description="GPUs per host (one rank each)")
    gpu: str = Field("V100", description="GPU model: " + ", ".join(GPU_NAMES))
    nic_gbps: PosFloat = Field(25.0, description="each host's NIC bandwidth, per direction")
    link_latency_us: NonNegFloat = Field(5.0, description="latency of every network link (NIC, uplink)")
    intra_host_gbps: Optional[PosFloat] = Field(
        None, description="per-GPU NVLink/PCIe bandwidth per direction; default: the GPU's"
    )
    intra_host_latency_us: NonNegFloat = Field(1.0, description="latency of the GPU-to-host link")
    server_hosts: NonNegInt = Field(0, description="hosts without GPUs, e.g. for dedicated PS shards")
    server_nic_gbps: Optional[PosFloat] = Field(None, description="server hosts' NIC bandwidth; default: nic_gbps")
    placement: Literal["packed", "scattered", "random"] = Field(
        "packed",
        description="how ranks map to hosts: packed fills hosts rack by rack; scattered deals hosts round-robin "
        "over racks; random shuffles hosts with the seed",
    )

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value.upper() not in {g.upper() for g in GPU_NAMES}:
            raise ValueError(f"unknown GPU {value!r}; allowed: {', '.join(GPU_NAMES)}")
        return value


class StarCluster(ClusterBase):
    """Every host on one switch: a non-blocking network."""

    topology: Literal["star"] = Field(description="star")
    hosts: PosInt = Field(description="number of GPU hosts")


class TwoTierCluster(ClusterBase):
    """Racks of hosts under ToR switches, each rack joined to the core by its uplink."""

    topology: Literal["two_tier"] = Field(description="two_tier")
    racks: PosInt = Field(description="number of racks")
    hosts_per_rack: PosInt = Field(description="GPU hosts per rack")
    uplink_gbps: Optional[PosFloat] = Field(
        None,
        description="each rack's total uplink; hosts_per_rack * nic_gbps / uplink_gbps is the oversubscription; "
        "default non-blocking (1:1)",
    )
    core_switches: PosInt = Field(1, description="the uplink is split evenly over this many core switches (ECMP)")


class CustomNode(Strict):
    name: str = Field(description="unique node name")
    kind: Literal["host", "switch", "server"] = Field(description="host (with GPUs), switch, or server (no GPUs)")
    gpus: Optional[PosInt] = Field(None, description="a host's GPUs; default: gpus_per_host")
    rack: Optional[str] = Field(None, description="a host's rack, for rack-level policies")


class CustomLink(Strict):
    a: str = Field(description="one end (a node name)")
    b: str = Field(description="the other end")
    gbps: Optional[PosFloat] = Field(None, description="bandwidth per direction; default: nic_gbps")
    latency_us: Optional[NonNegFloat] = Field(None, description="default: link_latency_us")


class CustomCluster(ClusterBase):
    """Explicit nodes and full-duplex links, for shapes the other topologies cannot express."""

    topology: Literal["custom"] = Field(description="custom")
    nodes: list[CustomNode] = Field(min_length=1, description="hosts, switches and servers")
    links: list[CustomLink] = Field(min_length=1, description="full-duplex cables between nodes")


ClusterConfig = Annotated[Union[StarCluster, TwoTierCluster, CustomCluster], Field(discriminator="topology")]


class WorkloadConfig(Strict):
    """The model being trained and how each GPU computes it."""

    model: str = Field(description="synthetic, or a zoo model: " + ", ".join(MODEL_NAMES))
    batch_size: PosInt = Field(32, description="samples per GPU per iteration")
    precision: Literal["fp32", "fp16"] = Field(
        "fp32", description="fp16: tensor-core peak and 2-byte gradients; fp32: 4-byte gradients"
    )
    efficiency: Optional[Annotated[float, Field(gt=0, le=1)]] = Field(
        None, description="fraction of the GPU's peak FLOP/s reached; default: the GPU's, for the precision"
    )
    bucket_mb: PosFloat = Field(25.0, description="gradient bucket size (DDP's bucket_cap_mb)")
    compute_jitter: NonNegFloat = Field(0.0, description="coefficient of variation of each iteration's compute time")
    gradient_mb: Optional[PosFloat] = Field(None, description="synthetic only: gradient size")
    compute_ms: Optional[NonNegFloat] = Field(None, description="synthetic only: forward + backward time")
    synthetic_layers: PosInt = Field(1, description="synthetic only: equal layers the gradient is split into")
    sparsity: SparsityConfig = Field(SparsityConfig(), description="which gradients are sparse (docs/sparse.md)")

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value != "synthetic" and canonical_name(value) not in MODEL_NAMES:
            raise ValueError(f"unknown model {value!r}; allowed: synthetic, {', '.join(MODEL_NAMES)}")
        return value

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
                    raise ValueError(f"{name}: applies only to model 'synthetic' (a zoo model sets it)")
            if self.sparsity.lookups is not None:
                raise ValueError("sparsity.lookups: applies only to model 'synthetic' (a zoo model's tables set it)")
        return self


class PolicyEntry(BaseModel):
    """`name` (registered name or `module:Class`), optional `label`, and the policy's own settings."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str = Field(description="a registered policy name (`syncsim list`) or a `module:Class` path")
    label: Optional[str] = Field(None, description="the name in results; default: name (labels must be unique)")

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def display(self) -> str:
        return self.label or self.name


class SimulationConfig(Strict):
    """How the simulator models what the config describes."""

    collective_model: Literal["pipelined", "stepwise"] = Field(
        "pipelined",
        description="pipelined: a collective is one set of coupled flows (fast); stepwise: every ring step is p flows",
    )
    trace: bool = Field(True, description="write trace.json")
    utilization_samples: PosInt = Field(
        400, description="link-utilisation samples kept per policy; the interval doubles whenever they run out"
    )
    utilization_interval_ms: PosFloat = Field(1.0, description="first link-utilisation sampling interval")
    stall_timeout_s: PosFloat = Field(
        3600.0, description="simulated seconds without any worker progress before the run counts as deadlocked"
    )
    trace_max_events: PosInt = Field(500_000, description="events kept in trace.json; the rest are counted, not kept")


class Config(Strict):
    """A whole experiment: one cluster, one workload, policies compared side by side."""

    name: str = Field("experiment", description="names the default output folder")
    seed: int = Field(0, description="seeds compute jitter and ECMP hashing; same seed, same results")
    iterations: PosInt = Field(10, description="training iterations each worker runs")
    cluster: ClusterConfig = Field(description="the hardware: topology, GPUs, links")
    workload: WorkloadConfig = Field(description="the model and per-GPU batch")
    policies: list[PolicyEntry] = Field(min_length=1, description="the schemes to compare")
    faults: FaultsConfig = Field(FaultsConfig(), description="slow workers and transient stragglers")
    background: list[BackgroundFlow] = Field(default_factory=list, description="other jobs' traffic")
    simulation: SimulationConfig = Field(SimulationConfig(), description="simulator fidelity and outputs")
    numerics: Optional[NumericsConfig] = Field(
        None, description="train a real model in every worker for time-to-accuracy (off when absent)"
    )

    @property
    def numerics_on(self) -> bool:
        return self.numerics is not None and self.numerics.enabled

    @model_validator(mode="after")
    def _zoo_numerics_match_workload(self) -> Config:
        n = self.numerics
        if n is not None and n.zoo_model and canonical_name(self.workload.model) != n.model:
            raise ValueError(
                f"numerics.model: {n.model} trains a zoo model, so workload.model must be the same model "
                f"(its layers set the gradient buckets), got {self.workload.model!r}"
            )
        return self


def check_policies(config: Config) -> None:
    """Every policy entry names a known policy with valid settings, and labels are unique."""
    from policies.registry import create

    seen: set[str] = set()
    for i, entry in enumerate(config.policies):
        try:
            create(entry.name, entry.settings)
        except ValueError as exc:  # SettingError carries the setting's name
            field = getattr(exc, "field", "name")
            raise ConfigError(f"policies[{i}].{field}: {getattr(exc, 'detail', exc)}") from None
        if entry.display in seen:
            raise ConfigError(f"policies[{i}].label: duplicate label {entry.display!r}; give each entry a unique label")
        seen.add(entry.display)


def parse_config(data: Any) -> Config:
    """Validate a config mapping; raise ConfigError with one line per problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a mapping of keys, got {type(data).__name__}")
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(describe(exc.errors(), data, Config))) from None
    check_policies(config)
    return config


def load_config(path: Union[str, Path]) -> Config:
    """Read and validate a YAML config file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    return parse_config(data)


def dump_config(config: Config) -> str:
    """The resolved config (every default filled in) as YAML."""
    data = config.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False)
