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

from sim.errors import ConfigError
from sim.gpus import GPU_NAMES
from sim.zoo import MODEL_NAMES

PosFloat = Annotated[float, Field(gt=0)]
NonNegFloat = Annotated[float, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterBase(Strict):
    gpus_per_host: PosInt = 1
    gpu: str = "V100"
    nic_gbps: PosFloat = 25.0
    link_latency_us: NonNegFloat = 5.0
    intra_host_gbps: Optional[PosFloat] = Field(None, description="per-GPU NVLink/PCIe bandwidth; default from the GPU")
    intra_host_latency_us: NonNegFloat = 1.0
    server_hosts: NonNegInt = Field(0, description="server-only hosts (no GPUs), e.g. for dedicated PS shards")
    server_nic_gbps: Optional[PosFloat] = None
    placement: Literal["packed"] = "packed"

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, value: str) -> str:
        if value.upper() not in {g.upper() for g in GPU_NAMES}:
            raise ValueError(f"unknown GPU {value!r}; allowed: {', '.join(GPU_NAMES)}")
        return value


class StarCluster(ClusterBase):
    topology: Literal["star"]
    hosts: PosInt


class TwoTierCluster(ClusterBase):
    topology: Literal["two_tier"]
    racks: PosInt
    hosts_per_rack: PosInt
    uplink_gbps: Optional[PosFloat] = Field(None, description="each rack's total uplink; default non-blocking (1:1)")
    core_switches: PosInt = Field(1, description="the uplink is split evenly over this many core switches (ECMP)")


class CustomNode(Strict):
    name: str
    kind: Literal["host", "switch", "server"]
    gpus: Optional[PosInt] = None
    rack: Optional[str] = None


class CustomLink(Strict):
    a: str
    b: str
    gbps: Optional[PosFloat] = None
    latency_us: Optional[NonNegFloat] = None


class CustomCluster(ClusterBase):
    topology: Literal["custom"]
    nodes: list[CustomNode] = Field(min_length=1)
    links: list[CustomLink] = Field(min_length=1)


ClusterConfig = Annotated[Union[StarCluster, TwoTierCluster, CustomCluster], Field(discriminator="topology")]


class WorkloadConfig(Strict):
    model: str
    batch_size: PosInt = 32
    precision: Literal["fp32", "fp16"] = "fp32"
    efficiency: Optional[Annotated[float, Field(gt=0, le=1)]] = Field(None, description="fraction of GPU peak")
    bucket_mb: PosFloat = 25.0
    compute_jitter: NonNegFloat = Field(0.0, description="coefficient of variation of each iteration's compute")
    gradient_mb: Optional[PosFloat] = None
    compute_ms: Optional[NonNegFloat] = None
    synthetic_layers: PosInt = 1

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value != "synthetic" and value.lower().replace("-", "_") not in MODEL_NAMES:
            raise ValueError(f"unknown model {value!r}; allowed: synthetic, {', '.join(MODEL_NAMES)}")
        return value

    @model_validator(mode="after")
    def _synthetic_fields(self) -> "WorkloadConfig":
        synthetic_only = ("gradient_mb", "compute_ms")
        if self.model == "synthetic":
            for name in synthetic_only:
                if getattr(self, name) is None:
                    raise ValueError(f"{name}: required when model is 'synthetic'")
        else:
            for name in synthetic_only:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: applies only to model 'synthetic' (a zoo model sets it)")
        return self


class PolicyEntry(BaseModel):
    """`name` (registered name or `module:Class`), optional `label`, and the policy's own settings."""

    model_config = ConfigDict(extra="allow", frozen=True)
    name: str
    label: Optional[str] = None

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def display(self) -> str:
        return self.label or self.name


class SimulationConfig(Strict):
    collective_model: Literal["pipelined", "stepwise"] = Field(
        "pipelined", description="pipelined: each collective phase is one set of coupled flows; stepwise: every step"
    )
    trace: bool = True
    trace_max_events: PosInt = 500_000


class Config(Strict):
    name: str = "experiment"
    seed: int = 0
    iterations: PosInt = 10
    cluster: ClusterConfig
    workload: WorkloadConfig
    policies: list[PolicyEntry] = Field(min_length=1)
    simulation: SimulationConfig = SimulationConfig()


def _where(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("star", "two_tier", "custom")]
    return ".".join(p if not p.isdigit() else f"[{p}]" for p in parts).replace(".[", "[") or "config"


def _format_error(err: dict[str, Any]) -> str:
    where, kind = _where(err["loc"]), err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "union_tag_not_found":
        return f"{where}.topology: required; allowed: star, two_tier, custom"
    if kind == "union_tag_invalid":
        return f"{where}.topology: unknown topology {err['ctx']['tag']!r}; allowed: star, two_tier, custom"
    if kind == "missing":
        return f"{where}: required"
    if kind == "value_error":
        field, sep, rest = msg.partition(": ")
        if sep and field.isidentifier():  # a model validator naming the field inside `where`
            return f"{where}.{field}: {rest}"
        return f"{where}: {msg}"
    shown = err.get("input")
    return f"{where}: {msg}" + ("" if isinstance(shown, (dict, list)) else f" (got {shown!r})")


def _describe(errors: list[dict[str, Any]], data: Any) -> list[str]:
    """One line per problem; unknown keys of one section are reported together with the allowed ones."""
    lines: list[str] = []
    unknown: dict[str, list[str]] = {}
    for err in errors:
        if err["type"] != "extra_forbidden":
            lines.append(_format_error(err))
            continue
        section = _where(err["loc"][:-1])
        if section not in unknown:
            unknown[section] = []
            allowed = ", ".join(_allowed_keys(data, err["loc"][:-1]))
            lines.append(f"{section}: unknown key{{s}} {{keys}}; allowed keys: {allowed}")
        unknown[section].append(str(err["loc"][-1]))
    out = []
    for line in dict.fromkeys(lines):
        section = line.partition(": ")[0]
        if "{keys}" in line:
            keys = unknown[section]
            line = line.replace("{s}", "s" if len(keys) > 1 else "").replace("{keys}", ", ".join(keys))
        out.append(line)
    return out


_CLUSTERS = {"star": StarCluster, "two_tier": TwoTierCluster, "custom": CustomCluster}
_NESTED: dict[tuple[type[BaseModel], str], type[BaseModel]] = {
    (Config, "workload"): WorkloadConfig,
    (Config, "simulation"): SimulationConfig,
    (CustomCluster, "nodes"): CustomNode,
    (CustomCluster, "links"): CustomLink,
}


def _allowed_keys(data: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys accepted at `loc` of the raw config `data` (used only to word an error)."""
    model: type[BaseModel] = Config
    node = data
    for part in loc:
        if part in _CLUSTERS:
            continue
        node = node[part] if isinstance(node, (dict, list)) else None
        if isinstance(part, int):
            continue
        if model is Config and part == "cluster":
            model = _CLUSTERS.get(node.get("topology") if isinstance(node, dict) else None, StarCluster)
        else:
            model = _NESTED.get((model, part), model)
    return list(model.model_fields)


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
        raise ConfigError("\n".join(_describe(exc.errors(), data))) from None
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
