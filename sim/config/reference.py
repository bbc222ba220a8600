"""docs/config.md, generated from the config models so the reference cannot drift from the code.

python -m sim.config.reference > docs/config.md
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from policies.registry import BUILTIN, resolve
from sim.config.calibration import CalibrationConfig
from sim.config.datacenters import CustomDatacenter, MultiDatacenterCluster
from sim.config.faults import BackgroundFlow, FaultsConfig, SlowWorker, Straggler
from sim.config.nccl import NcclConstants, NcclSettings
from sim.config.numerics import AsyncConfig, NumericsConfig, OptimizerConfig, ScheduleConfig, SyntheticData, ZooData
from sim.config.schema import (
    ClusterBase,
    Config,
    CustomCluster,
    CustomLink,
    CustomNode,
    FatTreeCluster,
    PolicyEntry,
    RailOptimizedCluster,
    SimulationConfig,
    StarCluster,
    TwoTierCluster,
    WorkloadConfig,
)
from sim.config.transformer import TransformerConfig
from sim.config.wan import WanLink, WanSettings

_BOUNDS = ((at.Gt, ">"), (at.Ge, ">="), (at.Lt, "<"), (at.Le, "<="))


def type_text(annotation: Any, metadata: list[Any] = ()) -> str:  # type: ignore[assignment]
    """A reader's description of a field type: `number > 0`, `fp32 | fp16`, `list of links`."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(type_text(a) for a in args if a is not type(None))
    if origin is list:
        inner = args[0]
        return f"list of {inner.__name__}" if isinstance(inner, type) and issubclass(inner, BaseModel) else "list"
    if hasattr(annotation, "__metadata__"):  # Annotated[...]
        return type_text(args[0], [*metadata, *annotation.__metadata__])
    names = {int: "integer", float: "number", str: "text", bool: "true \\| false"}
    text = names.get(annotation, getattr(annotation, "__name__", str(annotation)))
    bounds = [
        f"{symbol} {getattr(bound, kind.__name__.lower())}"
        for item in metadata
        for bound in getattr(item, "metadata", [item])
        for kind, symbol in _BOUNDS
        if isinstance(bound, kind)
    ]
    return f"{text} {', '.join(bounds)}" if bounds else text


def table(model: type[BaseModel], skip: tuple[str, ...] = ()) -> str:
    rows = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        if field.default is PydanticUndefined and field.default_factory is None:
            default = "**required**"
        elif isinstance(field.default, BaseModel) or field.default_factory is not None:
            default = "(section defaults)"
        elif isinstance(field.default, bool):
            default = f"`{str(field.default).lower()}`"
        else:
            default = f"`{field.default}`" if field.default is not None else "-"
        kind = type_text(field.annotation, field.metadata)
        rows.append(f"| `{name}` | {kind} | {default} | {field.description or ''} |")
    return "\n".join(rows)


def render() -> str:
    own = tuple(ClusterBase.model_fields)
    parts = [
        "# Config reference",
        "",
        "Generated from the config models by `python -m sim.config.reference > docs/config.md`; a test keeps it",
        "current. Units are in the key names: `_gbps` = 10^9 bit/s per direction, `_us`, `_ms`, `_mb` = 10^6",
        "bytes. Unknown keys are errors.",
        "",
        "Values are taken as written, never coerced: a number must be finite (`.nan`, `.inf` and `1e400` are",
        "refused), an integer must be written as one (`true` is not 1, `'4'` is not 4, `2.0` is not 2). The upper",
        "bounds are what no real machine exceeds. A key given twice, a file that is not UTF-8, and YAML tags",
        "other than YAML 1.2's (`!!int`, `!!str`, ...; not `!!timestamp`, `!!set` or Python's) are errors.",
        "`syncsim check` reports every problem at once, one line per field.",
        "",
        "Configs, their bases, `--set` values and profiles are read as YAML 1.2 (its core schema), not as",
        "YAML 1.1, which PyYAML and older tools read: `1e3` is the number 1000; `010` is 10 (octal is `0o10`);",
        "a boolean is `true` or `false`, while `yes`, `no`, `on` and `off` are text; `1:30` (base 60), `1_000`",
        "and `0b11` are text, which a number's field refuses, naming the field and that the form is YAML 1.1's;",
        "`2024-01-01` is text. Merge keys (`<<: *base`, YAML 1.1's, which most readers keep) merge as their",
        "rules say: a key written in the mapping wins over a merged one, and in `<<: [*a, *b]` the first",
        "mapping that has a key wins. syncsim reads 1.2 rather than refusing 1.1's forms so that a file means",
        "the same to it as to every other YAML 1.2 reader (`sim.config.yaml12` says more).",
        "",
        "A config, each base it `extends:` and a `workload.profile` must be regular files (not `/dev/zero`, a",
        "FIFO, a folder or a loop of symbolic links), a config at most 10 MB and a profile at most 2 MB and",
        "21,000 lines (2,000 layers); anything else is refused, naming the field and the limit, before it is",
        "parsed.",
        "",
        "A file may start from another: `extends: base.yaml` (a path relative to the file) merges the file onto",
        "the base key by key; a mapping merges into the base's mapping, anything else (a number, a list such as",
        "`policies:`) replaces the base's value, and a base may extend another. `syncsim run` and `check` take",
        "`--set KEY=VALUE` (repeatable) to change one setting without editing the file: the key is a path as the",
        "YAML nests, with list items as `[index]` (`cluster.uplink_gbps`, `policies[0].group_size`), and the",
        "value is read as YAML (`--set 'policies=[{name: ring}]'`). Overrides apply after `extends:`.",
        "",
        "## Top level",
        "",
        table(Config),
        "",
        "## `cluster`",
        "",
        "`topology` selects the shape. Keys every topology accepts:",
        "",
        table(ClusterBase),
    ]
    for model in (StarCluster, TwoTierCluster, FatTreeCluster, RailOptimizedCluster, CustomCluster):
        tag = get_args(model.model_fields["topology"].annotation)[0]
        parts += ["", f"### `topology: {tag}`", "", model.__doc__ or "", "", table(model, skip=own + ("topology",))]
    parts += ["", "Each entry of `nodes`:", "", table(CustomNode), "", "Each entry of `links`:", "", table(CustomLink)]
    parts += [
        "",
        "### `topology: multi_datacenter`",
        "",
        " ".join((MultiDatacenterCluster.__doc__ or "").split()),
        "",
        table(MultiDatacenterCluster, skip=own + ("topology",)),
        "",
        "Each entry of `datacenters` takes the keys of its `topology` (star, two_tier or custom, above) and:",
        "",
        table(CustomDatacenter, skip=tuple(CustomCluster.model_fields)),
        "",
        "### `cluster.wan`",
        "",
        " ".join((WanSettings.__doc__ or "").split()) + " docs/wan.md gives the physics.",
        "",
        table(WanSettings),
        "",
        "Each entry of `wan.links`:",
        "",
        table(WanLink),
    ]
    parts += ["", "## `workload`", "", table(WorkloadConfig)]
    transformer = " ".join((TransformerConfig.__doc__ or "").split())
    parts += ["", "### `workload.transformer`", "", transformer, "", table(TransformerConfig)]
    parts += ["", "## `simulation`", "", table(SimulationConfig)]
    parts += ["", "### `simulation.nccl`", "", NcclSettings.__doc__ or "", "", table(NcclSettings)]
    parts += ["", "### `simulation.nccl.constants`", "", NcclConstants.__doc__ or "", "", table(NcclConstants)]
    parts += [
        "",
        "## `faults`",
        "",
        FaultsConfig.__doc__ or "",
        "",
        table(FaultsConfig),
        "",
        "Each entry of `slow_workers`:",
        "",
        table(SlowWorker),
        "",
        "Each entry of `stragglers` (one target, one effect, one timing):",
        "",
        table(Straggler),
        "",
        "## `background`",
        "",
        "A list; each entry is one flow (one target, one rate):",
        "",
        table(BackgroundFlow),
    ]
    parts += [
        "",
        "## `numerics`",
        "",
        "Off unless present. The workload still sets the clock; this small model is what every worker trains",
        "(docs/numerics.md).",
        "",
        table(NumericsConfig),
    ]
    for key, model in (
        ("optimizer", OptimizerConfig),
        ("schedule", ScheduleConfig),
        ("asynchronous", AsyncConfig),
        ("synthetic", SyntheticData),
        ("zoo", ZooData),
    ):
        parts += ["", f"### `numerics.{key}`", "", table(model)]
    parts += [
        "",
        "## `calibration`",
        "",
        "How `syncsim calibrate` and `syncsim validate` measure a cluster; the simulator ignores it. Unset",
        "message sizes come from a first probe (docs/validation.md). The flags `--repeats`, `--statistic`,",
        "`--uplink-bytes` and `--max-bytes` of `syncsim calibrate` override these keys.",
        "",
        table(CalibrationConfig),
    ]
    parts += [
        "",
        "## `policies`",
        "",
        "A list; each entry takes these keys plus the policy's own settings:",
        "",
        table(PolicyEntry),
    ]
    for name in BUILTIN:
        cls = resolve(name)
        settings = cls.Settings.model_fields
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        parts += ["", f"### `{name}`", "", doc, ""]
        parts.append(table(cls.Settings) if settings else "No settings.")
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render(), end="")
