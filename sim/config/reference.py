"""docs/config.md, generated from the config models so the reference cannot drift from the code.

python -m sim.config.reference > docs/config.md
"""

from __future__ import annotations

import sys
import types
from typing import Any, Literal, Optional, Union, get_args, get_origin

import annotated_types as at
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from policies.registry import BUILTIN, resolve
from sim.config.datacenters import CustomDatacenter, MultiDatacenterCluster, StarDatacenter, TwoTierDatacenter
from sim.config.schema import ClusterBase, ClusterConfig, Config, CustomCluster, PolicyEntry

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


def models_in(annotation: Any) -> list[type[BaseModel]]:
    """The config models a field's type names, inside Optional, list, Union and Annotated."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in models_in(arg)]


def prose(text: Optional[str]) -> str:
    """A docstring as one markdown paragraph."""
    return " ".join((text or "").split())


def intro(model: type[BaseModel], field: Any = None) -> str:
    """What a section is: the model's docstring, else the description of the field that holds it."""
    return prose(model.__doc__) or (field.description if field is not None else "") or ""


def policy_summary(cls: type) -> str:
    """A policy's first docstring paragraph; a policy whose class has none is its module's one concept."""
    doc = cls.__doc__ or sys.modules[cls.__module__].__doc__ or ""
    return prose(doc.strip().split("\n\n")[0])


LIST = "A list of entries. "  # a section whose key holds a list
# Words a section's docstring does not say, kept beside the generated table (path -> sentence).
NOTES = {
    "cluster.wan": "docs/wan.md gives the physics.",
    "faults.stragglers": "Each entry has one target, one effect and one timing.",
    "background": "Each entry has one target and one rate.",
    "numerics": "Off unless present. The workload still sets the clock; this small model is what every worker "
    "trains (docs/numerics.md).",
    "calibration": "`syncsim calibrate` and `syncsim validate` read it; the simulator ignores it. Unset message "
    "sizes come from a first probe (docs/validation.md). The flags `--repeats`, `--statistic`, `--uplink-bytes` "
    "and `--max-bytes` of `syncsim calibrate` override these keys.",
}


def section(
    model: type[BaseModel],
    path: str,
    seen: set[type[BaseModel]],
    level: int = 2,
    text: str = "",
    skip: tuple[str, ...] = (),
    title: str = "",
    extra: tuple[str, ...] = (),
) -> list[str]:
    """A heading for `path`, what it is, its table, then a section for every model nested in it that no
    earlier section described: a key added to the schema, however deep, reaches the reference. `title`
    names a variant of a union (`topology: star`) whose nested sections still take the config's path;
    `extra` follows the table."""
    seen.add(model)
    parts = [
        "",
        f"{'#' * level} `{title or path}`",
        "",
        " ".join(filter(None, (text, NOTES.get(path, "")))),
        "",
        table(model, skip),
        *extra,
    ]
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        for inner in models_in(field.annotation):
            if inner in seen:
                continue
            entry = LIST if get_origin(field.annotation) is list else ""
            parts += section(inner, f"{path}.{name}", seen, min(level + 1, 4), entry + intro(inner, field))
    return parts


def cluster_sections(seen: set[type[BaseModel]]) -> list[str]:
    """`cluster`: the keys every topology takes, then each topology's own (a union on `topology`)."""
    own = tuple(ClusterBase.model_fields)
    parts = [
        "",
        "## `cluster`",
        "",
        "`topology` selects the shape. Keys every topology accepts:",
        "",
        table(ClusterBase),
    ]
    datacenters = (
        "",
        "Each entry of `datacenters` takes the keys of its `topology` (star, two_tier or custom, above) and:",
        "",
        table(CustomDatacenter, skip=tuple(CustomCluster.model_fields)),
    )
    seen.update((StarDatacenter, TwoTierDatacenter, CustomDatacenter))  # described by their topologies
    for model in models_in(ClusterConfig):
        tag = get_args(model.model_fields["topology"].annotation)[0]
        extra = datacenters if model is MultiDatacenterCluster else ()
        parts += section(model, "cluster", seen, 3, intro(model), own + ("topology",), f"topology: {tag}", extra)
    return parts


def policy_sections() -> list[str]:
    """`policies`: the keys of every entry, then each built-in policy's own settings."""
    parts = ["", "## `policies`", "", "A list; each entry takes these keys plus the policy's own settings:"]
    parts += ["", table(PolicyEntry)]
    for name in BUILTIN:
        cls = resolve(name)
        parts += ["", f"### `{name}`", "", policy_summary(cls), ""]
        parts.append(table(cls.Settings) if cls.Settings.model_fields else "No settings.")
    return parts


def render() -> str:
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
        intro(Config),
        "",
        table(Config),
    ]
    seen: set[type[BaseModel]] = {Config}
    for name, field in Config.model_fields.items():
        entry = LIST if get_origin(field.annotation) is list else ""
        if name == "cluster":
            parts += cluster_sections(seen)
        elif name != "policies":  # last: the longest part
            for model in models_in(field.annotation):
                parts += section(model, name, seen, 2, entry + intro(model, field))
    parts += policy_sections()
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    print(render(), end="")
