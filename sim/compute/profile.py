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
    step_s: 0.0065             # optional: the median whole iteration, and its spread over the repeats
    step_spread: {min_s: 0.0061, q1_s: 0.0063, q3_s: 0.0068, max_s: 0.0090}
    layers:
      - name: conv1
        forward_s: 0.00021     # the median over the repeats; what the simulator uses
        backward_s: 0.00043
        forward_spread: {min_s: 0.00020, q1_s: 0.00021, q3_s: 0.00022, max_s: 0.00031}   # optional
        backward_spread: {min_s: 0.00041, q1_s: 0.00042, q3_s: 0.00045, max_s: 0.00060}  # optional
      ...

A layer's `forward_s` runs from its first use in the forward pass to the next layer's, so the
parameter-free work after it (activations, pooling, attention products) is its own, as the zoo
folds those FLOPs into a neighbouring layer. Its `backward_s` runs from the previous layer's
gradients being ready (backward's start, for the first) to its own: what delays a gradient bucket.

The spreads (minimum, quartiles, maximum over the timed repeats) say how steady the medians are;
they were added to version 1 as optional keys, so a profile without them reads as before (its
spreads are None) and an older syncsim reads a newer profile, ignoring them.

Version 2 is the profile of a user's own module (`syncsim profile module:factory`), which stands for
the model itself (`workload.model: profiled`): `model` is the `module:factory` it was built by, and
every layer also carries its trainable tensors' shapes in the module's parameter order, and their
count of values (`params`, which must equal the shapes' sum), from which the simulator takes the
gradient bytes and the tensors a low-rank codec factors:

    version: 2
    model: my_model:build
    params: 17546              # the whole model's, for reading
    layers:
      - {name: conv, params: 448, shapes: [[16, 3, 3, 3], [16]], forward_s: 0.0011, backward_s: 0.0014}

A zoo model's profile is still written as version 1, so an older syncsim still reads it; one that
reads only version 1 refuses a version 2 file by its version, in one line.

Either version may give each layer's `saved_bytes`: the bytes of activations autograd saved for backward
during one forward pass at the profile's batch and precision (real/saved_activations.py says how they are
measured and which layer gets a tensor), with their sum at the top, for reading. Like the spreads they are
optional: a profile without them reads as before (None: not measured), an older syncsim ignores them, and a
file that gives them for some layers but not others is refused. A span is *unsteady*
(`unsteady_spans`, which `syncsim profile` warns about) when its interquartile range exceeds
`UNSTEADY_IQR` (a quarter) of its median, or its maximum exceeds `UNSTEADY_RANGE` (twice) its minimum:
other work sharing the device or the CPU that launches its kernels, or changing clocks, spreads repeats
that would otherwise agree within a few percent (the 8.2 s against 127 ms of issue 33); short spans
can also spread on an otherwise quiet GPU (an H200's attention projections, at batch 16, spread by an
IQR of 27-42%). A run that is steady but slow throughout is not caught: compare `step_s` across runs.
Spans under `JUDGED_SHARE` (1%) of
the step are not judged: a few microseconds of timer jitter are large relative to them and move
nothing.

A profile file is read only if it is a regular file of at most `MAX_BYTES` with at most `MAX_BREAKS`
lines, commas and colons (which bound the values a parser would build), both checked before it is parsed,
and it holds at most `MAX_LAYERS` layers: 2,000, thirteen times the zoo's largest model (bert_large, 149);
what `syncsim profile` writes for that many (some 440 bytes and 26 breaks a layer) fits both caps. So
`workload.profile: /dev/zero` is one error line, not a hang, and an oversized profile is refused in
milliseconds rather than after minutes of parsing (a 16 MB one took 148 s). It is read as YAML 1.2
(`sim.config.yaml12`), with libyaml's parser, and every time in it must be finite, >= 0 and at most
`MAX_SPAN_S` (`sim.config.types.MAX_MS`, about three hours: the most compute one iteration may take
in a config), so that no sum of layers overflows.
"""

from __future__ import annotations

import math
import reprlib
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Union

import yaml

from sim.catalog.zoo.spec import Shape
from sim.config.reading import MB, read_bounded
from sim.config.types import MAX_MS
from sim.config.yaml12 import FieldError, dump, load
from sim.errors import ConfigError
from sim.files import atomic_write

FORMAT = "syncsim-profile"
MAX_LAYERS = 2_000  # the largest zoo model `syncsim profile` measures has 149 (tests/test_profile.py: a margin)
# line breaks, commas and colons: every YAML value but the first follows one, so this bounds the values
# a parser builds (some microseconds each, in Python); `write_profile` writes about 26 a layer (35 with
# a weight's and a bias's shapes, version 2)
MAX_BREAKS = 40 * MAX_LAYERS + 2_000
_BREAKS = (b"\n", b"\r", b",", b":", "\x85".encode(), "\u2028".encode(), "\u2029".encode())
MAX_BYTES = 2 * MB  # `write_profile` writes well under 1 kB a layer: a measured profile is tens of kB
MAX_SPAN_S = MAX_MS / 1e3  # seconds: the compute of one iteration a config may give (about 3 hours)
VERSION = 2  # the newest this syncsim writes: a user module's profile, with its layers' shapes
ZOO_VERSION = 1  # a zoo model's profile (no shapes: the zoo has them), readable by older syncsims
READS = (1, 2)
MAX_PARAMS = 10**13  # trainable values in a profiled model: ten trillion, 40 TB of fp32 weights
MAX_SAVED_BYTES = 10**15  # a layer's saved activations: a petabyte, thousands of times any device's memory
UNSTEADY_IQR = 0.25  # a span whose interquartile range exceeds this fraction of its median is unsteady
UNSTEADY_RANGE = 2.0  # ... or whose maximum exceeds this multiple of its minimum
JUDGED_SHARE = 0.01  # spans shorter than this fraction of the step's median are not judged


@dataclass(frozen=True)
class Spread:
    """How a measured time varied over the timed repeats, in seconds."""

    min_s: float
    q1_s: float
    q3_s: float
    max_s: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        """Minimum, quartiles (inclusive method: within the samples) and maximum of `values`."""
        values = sorted(values)
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
        return cls(values[0], q1, q3, values[-1])

    @property
    def iqr_s(self) -> float:
        return self.q3_s - self.q1_s

    def unsteady(self, median_s: float) -> Optional[str]:
        """What makes this spread large against `median_s` (`UNSTEADY_IQR`, `UNSTEADY_RANGE`), or None."""
        said = []
        if median_s > 0 and self.iqr_s > UNSTEADY_IQR * median_s:
            said.append(f"IQR {self.iqr_s / median_s:.0%} of the median")
        if self.max_s > UNSTEADY_RANGE * self.min_s:
            said.append(f"max {self.max_s / self.min_s:.1f}x min" if self.min_s > 0 else "min 0")
        return ", ".join(said) or None

    def as_dict(self) -> dict[str, float]:
        return {"min_s": self.min_s, "q1_s": self.q1_s, "q3_s": self.q3_s, "max_s": self.max_s}


@dataclass(frozen=True)
class LayerTime:
    name: str
    forward_s: float  # the median over the repeats
    backward_s: float
    forward_spread: Optional[Spread] = None  # None: a profile written before spreads were recorded
    backward_spread: Optional[Spread] = None
    shapes: Optional[tuple[Shape, ...]] = None  # a user module's trainable tensors; None: a zoo layer
    saved_bytes: Optional[int] = None  # activations its forward saved for backward; None: not measured

    @property
    def params(self) -> int:
        """Values held by the layer's tensors (0 when their shapes are not recorded)."""
        return sum(math.prod(shape) for shape in self.shapes or ())


@dataclass(frozen=True)
class ComputeProfile:
    model: str
    batch_size: int
    precision: str
    layers: tuple[LayerTime, ...]
    device: str = "unknown"
    notes: dict[str, Any] = field(default_factory=dict)  # how it was measured: torch version, repeats, ...
    step_s: Optional[float] = None  # the median whole iteration (None: not recorded)
    step_spread: Optional[Spread] = None

    @property
    def forward_s(self) -> float:
        return math.fsum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return math.fsum(layer.backward_s for layer in self.layers)

    @property
    def shaped(self) -> bool:
        """Does the profile carry its layers' shapes (a user module's, version 2), so that it can stand
        for the model?"""
        return bool(self.layers) and all(layer.shapes is not None for layer in self.layers)

    @property
    def saved_bytes(self) -> Optional[int]:
        """The activations one forward pass saved for backward, all layers' (at `batch_size`); None: not measured."""
        if not self.layers or any(layer.saved_bytes is None for layer in self.layers):
            return None
        return sum(layer.saved_bytes or 0 for layer in self.layers)


def unsteady_spans(profile: ComputeProfile) -> list[str]:
    """The step and the layers' spans whose spread is large (`Spread.unsteady`), each with why, e.g.
    `conv1 backward (IQR 40% of the median)`; spans under `JUDGED_SHARE` of the step are left out."""
    found = []
    if profile.step_spread is not None and profile.step_s is not None:
        if why := profile.step_spread.unsteady(profile.step_s):
            found.append(f"the step ({why})")
    least = JUDGED_SHARE * (profile.step_s or profile.forward_s + profile.backward_s)
    for layer in profile.layers:
        for part, median, spread in (
            ("forward", layer.forward_s, layer.forward_spread),
            ("backward", layer.backward_s, layer.backward_spread),
        ):
            if spread is not None and median >= least and median > 0 and (why := spread.unsteady(median)):
                found.append(f"{layer.name} {part} ({why})")
    return found


def write_profile(profile: ComputeProfile, path: Union[str, Path]) -> Path:
    step = {} if profile.step_s is None else {"step_s": profile.step_s}
    if profile.step_spread is not None:
        step["step_spread"] = profile.step_spread.as_dict()
    shaped = profile.shaped
    data = {
        "format": FORMAT,
        "version": VERSION if shaped else ZOO_VERSION,
        "model": profile.model,
        **({"params": sum(layer.params for layer in profile.layers)} if shaped else {}),
        "batch_size": profile.batch_size,
        "precision": profile.precision,
        "device": profile.device,
        "forward_s": profile.forward_s,
        "backward_s": profile.backward_s,
        **({} if profile.saved_bytes is None else {"saved_bytes": profile.saved_bytes}),
        **step,
        **({"notes": profile.notes} if profile.notes else {}),
        "layers": [_layer_row(t) for t in profile.layers],
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)  # flow style for the spreads and notes: one line each
    atomic_write(path, dump(data, sort_keys=False, width=120, default_flow_style=None))
    return path


def _layer_row(layer: LayerTime) -> dict[str, Any]:
    row: dict[str, Any] = {"name": layer.name}
    if layer.shapes is not None:  # lists: each shape is written on one line, [16, 3, 3, 3]
        row.update(params=layer.params, shapes=[list(shape) for shape in layer.shapes])
    if layer.saved_bytes is not None:
        row["saved_bytes"] = layer.saved_bytes
    row.update(forward_s=layer.forward_s, backward_s=layer.backward_s)
    for key, spread in (("forward_spread", layer.forward_spread), ("backward_spread", layer.backward_spread)):
        if spread is not None:
            row[key] = spread.as_dict()
    return row


def _spread(value: Any, where: str) -> Optional[Spread]:
    """An optional spread mapping, checked (absent: None, as in profiles written before spreads)."""
    if value is None:
        return None
    keys = ("min_s", "q1_s", "q3_s", "max_s")
    if not isinstance(value, dict) or any(
        isinstance(value.get(k), bool) or not isinstance(value.get(k), (int, float)) for k in keys
    ):
        raise ConfigError(f"{where}: expected a mapping of {', '.join(keys)} (seconds), got {value!r}")
    numbers = [float(value[k]) for k in keys]
    if not 0 <= numbers[0] <= numbers[1] <= numbers[2] <= numbers[3] <= MAX_SPAN_S:
        raise ConfigError(f"{where}: expected 0 <= min_s <= q1_s <= q3_s <= max_s <= {MAX_SPAN_S:g}; got {value!r}")
    return Spread(*numbers)


def _seconds(value: Any, where: str) -> float:
    """A measured time: a number of seconds, finite, >= 0 and at most `MAX_SPAN_S`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_SPAN_S:
        raise ConfigError(f"{where}: expected seconds, 0 to {MAX_SPAN_S:g} (finite); got {value!r}")
    return float(value)


def _shapes(row: dict[str, Any], where: str) -> tuple[Shape, ...]:
    """A version 2 layer's `shapes` (lists of dimensions, each an integer >= 1; [] a scalar), checked
    against its `params`."""
    shapes = row.get("shapes")
    if not isinstance(shapes, list) or not all(
        isinstance(shape, list) and all(type(d) is int and 1 <= d <= MAX_PARAMS for d in shape) for shape in shapes
    ):
        raise ConfigError(
            f"{where}.shapes: expected a list of tensor shapes, each a list of integers >= 1 "
            f"(e.g. [[16, 3, 3, 3], [16]]); got {reprlib.repr(shapes)}"
        )
    out = tuple(tuple(shape) for shape in shapes)
    values = sum(math.prod(shape) for shape in out)
    if values > MAX_PARAMS:
        raise ConfigError(f"{where}.shapes: {values:,} values; at most {MAX_PARAMS:,} in a profiled model")
    if row.get("params") != values or isinstance(row.get("params"), bool):
        raise ConfigError(f"{where}.params: expected {values:,}, the values its shapes hold; got {row.get('params')!r}")
    return out


def _saved(value: Any, where: str) -> Optional[int]:
    """An optional layer's `saved_bytes`: a whole number of bytes, 0 to `MAX_SAVED_BYTES` (absent: None)."""
    if value is None:
        return None
    if type(value) is not int or not 0 <= value <= MAX_SAVED_BYTES:
        raise ConfigError(f"{where}: expected a whole number of bytes, 0 to {MAX_SAVED_BYTES:,}; got {value!r}")
    return value


def _parse(path: Union[str, Path], where: str) -> Any:
    """The YAML data of a profile file, after checking its size and line count cheaply (before parsing)."""
    try:
        raw = read_bounded(path, "workload.profile", MAX_BYTES, "a profile")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror})") from None
    if (breaks := sum(raw.count(mark) for mark in _BREAKS)) > MAX_BREAKS:  # counted in C: milliseconds
        raise ConfigError(
            f"{where}: {breaks:,} lines, commas and colons, over the {MAX_BREAKS:,} limit for a profile "
            f"(at most {MAX_LAYERS:,} layers)"
        )
    try:
        return load(raw, fast=True)
    except FieldError as exc:
        raise ConfigError(f"{where}: {exc.field}: {exc.problem}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"{where}: not valid YAML ({str(exc).splitlines()[0]})") from None


def read_profile(path: Union[str, Path]) -> ComputeProfile:
    """A profile file, checked field by field (errors name `workload.profile` and the field)."""
    where = f"workload.profile: {path}"
    data = _parse(path, where)
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{where}: not a compute profile (expected `format: {FORMAT}`; `syncsim profile` writes one)")
    version = data.get("version")
    if version not in READS or isinstance(version, bool):
        raise ConfigError(f"{where}: version {version!r}; this syncsim reads versions {' and '.join(map(str, READS))}")
    for key, kind in (("model", str), ("batch_size", int), ("precision", str), ("layers", list)):
        if not isinstance(data.get(key), kind) or isinstance(data.get(key), bool):
            raise ConfigError(f"{where}: {key}: expected {kind.__name__}, got {data.get(key)!r}")
    if len(data["layers"]) > MAX_LAYERS:
        raise ConfigError(
            f"{where}: layers: {len(data['layers']):,} layers; at most {MAX_LAYERS:,} (the zoo's largest has 149)"
        )
    layers = []
    for i, row in enumerate(data["layers"]):
        if not isinstance(row, dict) or not isinstance(row.get("name"), str):
            raise ConfigError(f"{where}: layers[{i}]: expected a mapping with name, forward_s and backward_s")
        times = [_seconds(row.get(key), f"{where}: layers[{i}].{key}") for key in ("forward_s", "backward_s")]
        spreads = [_spread(row.get(k), f"{where}: layers[{i}].{k}") for k in ("forward_spread", "backward_spread")]
        shapes = _shapes(row, f"{where}: layers[{i}]") if version >= 2 else None  # version 1: the zoo's
        saved = _saved(row.get("saved_bytes"), f"{where}: layers[{i}].saved_bytes")
        layers.append(LayerTime(row["name"], times[0], times[1], spreads[0], spreads[1], shapes, saved))
    measured = [layer.saved_bytes is not None for layer in layers]
    if any(measured) and not all(measured):
        odd, state = measured.index(not measured[0]), ("missing", "given") if measured[0] else ("given", "missing")
        raise ConfigError(
            f"{where}: layers[{odd}].saved_bytes: {state[0]} where layers[0]'s is {state[1]}; give every "
            "layer's or none (`syncsim profile` writes them all)"
        )
    if version >= 2 and not layers:
        raise ConfigError(f"{where}: layers: none; a version 2 profile lists the module's layers")
    if version >= 2 and sum(layer.params for layer in layers) > MAX_PARAMS:
        raise ConfigError(f"{where}: layers: over {MAX_PARAMS:,} values in all; at most that in a profiled model")
    notes = data.get("notes") if isinstance(data.get("notes"), dict) else {}
    step_s = data.get("step_s")
    if step_s is not None:
        step_s = _seconds(step_s, f"{where}: step_s")
    return ComputeProfile(
        data["model"],
        data["batch_size"],
        data["precision"],
        tuple(layers),
        str(data.get("device", "unknown")),
        notes,
        None if step_s is None else float(step_s),
        _spread(data.get("step_spread"), f"{where}: step_spread"),
    )


def check_profile(profile: ComputeProfile, model: str, layer_names: list[str], batch_size: int, precision: str) -> None:
    """Refuse a profile measured for another model, batch size, precision or layer list."""
    where = "workload.profile"
    if profile.shaped:
        raise ConfigError(
            f"{where}: the profile of your own module {profile.model!r}, which stands for the model: "
            "set workload.model: profiled"
        )
    if profile.model != model:
        raise ConfigError(f"{where}: measured for model {profile.model!r}; the workload trains {model!r}")
    check_run(profile, batch_size, precision)
    names = [t.name for t in profile.layers]
    if names != layer_names:
        shorter = min(len(names), len(layer_names))
        first = next((i for i, (a, b) in enumerate(zip(names, layer_names)) if a != b), shorter)
        raise ConfigError(
            f"{where}: its layers differ from the zoo's {model} at position {first} "
            f"({len(names)} layers against {len(layer_names)}); measure it again with this syncsim"
        )


def check_run(profile: ComputeProfile, batch_size: int, precision: str) -> None:
    """Refuse a profile measured at another batch size or precision than the workload's."""
    where = "workload.profile"
    if profile.batch_size != batch_size:
        given = profile.notes.get("input")  # a user module's input specifications, as measured
        inputs = "".join(f" --input {s}" for s in given if isinstance(s, str)) if isinstance(given, list) else ""
        raise ConfigError(
            f"{where}: measured at batch_size {profile.batch_size}; the workload's is {batch_size} "
            f"(measure again with `syncsim profile {profile.model}{inputs} --batch {batch_size}`)"
        )
    if profile.precision != precision:
        raise ConfigError(f"{where}: measured at precision {profile.precision}; the workload's is {precision}")
