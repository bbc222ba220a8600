"""Measured compute profiles: per zoo layer, the forward and backward seconds of one iteration.

A profile is what `syncsim profile MODEL` measures on a device (docs/profiles.md); a workload that
names one (`workload.profile: FILE`) takes its compute timeline from it instead of the analytic
estimate (FLOPs at a fraction of the GPU's peak). The file is YAML:

    format: syncsim-profile
    version: 1
    model: resnet50            # a zoo model; the layers below are its layers, in its order
    batch_size: 64             # samples per GPU the times were measured at
    precision: fp16
    device: NVIDIA H100 80GB HBM3
    layers:
      - {name: conv1, forward_s: 0.00021, backward_s: 0.00043}
      ...

A layer's `forward_s` runs from its first use in the forward pass to the next layer's, so the
parameter-free work after it (activations, pooling, attention products) is its own, as the zoo
folds those FLOPs into a neighbouring layer. Its `backward_s` runs from the previous layer's
gradients being ready (backward's start, for the first) to its own: what delays a gradient bucket.

A profile file is read only if it is a regular file of at most `MAX_BYTES` (16 MB: some 200,000 layers,
far more than any zoo model has), so `workload.profile: /dev/zero` is one error line, not a hang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from sim.config.reading import MB, read_bounded
from sim.errors import ConfigError
from sim.files import atomic_write

FORMAT = "syncsim-profile"
MAX_BYTES = 16 * MB  # a measured profile is a few kB
VERSION = 1


@dataclass(frozen=True)
class LayerTime:
    name: str
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class ComputeProfile:
    model: str
    batch_size: int
    precision: str
    layers: tuple[LayerTime, ...]
    device: str = "unknown"
    notes: dict[str, Any] = field(default_factory=dict)  # how it was measured: torch version, repeats, ...

    @property
    def forward_s(self) -> float:
        return math.fsum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return math.fsum(layer.backward_s for layer in self.layers)


def write_profile(profile: ComputeProfile, path: Union[str, Path]) -> Path:
    data = {
        "format": FORMAT,
        "version": VERSION,
        "model": profile.model,
        "batch_size": profile.batch_size,
        "precision": profile.precision,
        "device": profile.device,
        "forward_s": profile.forward_s,
        "backward_s": profile.backward_s,
        **({"notes": profile.notes} if profile.notes else {}),
        "layers": [{"name": t.name, "forward_s": t.forward_s, "backward_s": t.backward_s} for t in profile.layers],
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, yaml.safe_dump(data, sort_keys=False, width=120))
    return path


def read_profile(path: Union[str, Path]) -> ComputeProfile:
    """A profile file, checked field by field (errors name `workload.profile` and the field)."""
    where = f"workload.profile: {path}"
    try:
        data = yaml.safe_load(read_bounded(path, "workload.profile", MAX_BYTES, "a profile"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a compute profile (expected `format: {FORMAT}`; `syncsim profile` writes one)")
    if data.get("version") != VERSION:
        raise ConfigError(f"{where}: version {data.get('version')!r}; this syncsim reads version {VERSION}")
    for key, kind in (("model", str), ("batch_size", int), ("precision", str), ("layers", list)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ConfigError(f"{where}: {key}: expected {kind.__name__}, got {data.get(key)!r}")
    layers = []
    for i, row in enumerate(data["layers"]):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise ConfigError(f"{where}: layers[{i}]: expected a mapping with name, forward_s and backward_s")
        times = []
        for key in ("forward_s", "backward_s"):
            value = row.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                raise ConfigError(f"{where}: layers[{i}].{key}: expected seconds >= 0, got {value!r}")
            times.append(float(value))
        layers.append(LayerTime(row["name"], *times))
    notes = data.get("notes") if isinstance(data.get("notes"), dict) else {}
    return ComputeProfile(
        data["model"], data["batch_size"], data["precision"], tuple(layers), str(data.get("device", "unknown")), notes
    )


def check_profile(profile: ComputeProfile, model: str, layer_names: list[str], batch_size: int, precision: str) -> None:
    """Refuse a profile measured for another model, batch size, precision or layer list."""
    where = "workload.profile"
    if profile.model != model:
        raise ConfigError(f"{where}: measured for model {profile.model!r}; the workload trains {model!r}")
    if profile.batch_size != batch_size:
        raise ConfigError(
            f"{where}: measured at batch_size {profile.batch_size}; the workload's is {batch_size} "
            f"(measure again with `syncsim profile {model} --batch {batch_size}`)"
        )
    if profile.precision != precision:
        raise ConfigError(f"{where}: measured at precision {profile.precision}; the workload's is {precision}")
    names = [t.name for t in profile.layers]
    if names != layer_names:
        shorter = min(len(names), len(layer_names))
        first = next((i for i, (a, b) in enumerate(zip(names, layer_names)) if a != b), shorter)
        raise ConfigError(
            f"{where}: its layers differ from the zoo's {model} at position {first} "
            f"({len(names)} layers against {len(layer_names)}); measure it again with this syncsim"
        )
