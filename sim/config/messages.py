"""Wording of config errors: one line per problem, naming the field and the allowed values.

Pydantic's raw errors are precise but shaped for programs (tuple locations, a discriminator tag in
the path, one error per union branch). This turns them into what a user can act on.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from sim.config.yaml12 import yaml11_only


def _where(loc: tuple[Any, ...]) -> str:
    # pydantic puts union branches in the path (`literal['all']`, `list[str]`, a topology tag): drop them
    parts = [str(p) for p in loc if isinstance(p, int) or (str(p).isidentifier() and p not in BRANCHES)]
    return ".".join(p if not p.isdigit() else f"[{p}]" for p in parts).replace(".[", "[") or "config"


_FIELD = re.compile(r"[A-Za-z_]\w*(\[\d+\])*(\.[A-Za-z_]\w*(\[\d+\])*)*")
TOPOLOGIES = ("star", "two_tier", "fat_tree", "rail_optimized", "custom", "multi_datacenter")
BRANCHES = (*TOPOLOGIES, "int", "float", "str", "bool")


def _format_error(err: dict[str, Any]) -> str:
    where, kind = _where(err["loc"]), err["type"]
    msg = err["msg"].removeprefix("Value error, ")
    if kind in ("union_tag_not_found", "union_tag_invalid"):  # a cluster's or a datacenter's topology
        inner = "datacenters" in err["loc"]  # a datacenter is any topology but multi_datacenter
        allowed = "star, two_tier, custom" if inner else ", ".join(TOPOLOGIES)
        if kind == "union_tag_not_found":
            return f"{where}.topology: required; allowed: {allowed}"
        return f"{where}.topology: unknown topology {err['ctx']['tag']!r}; allowed: {allowed}"
    if kind == "missing":
        return f"{where}: required"
    if kind == "value_error":  # a validator may report several problems, one a line
        return "\n".join(_value_error_line(where, line) for line in msg.split("\n"))
    shown = err.get("input")
    if isinstance(shown, (dict, list)):
        return f"{where}: {msg}"
    if old := yaml11_only(shown):  # `1:30`, `yes`: text in YAML 1.2, which syncsim reads (sim.config.yaml12)
        return f"{where}: {msg} (got {shown!r}, {old} in YAML 1.1 only; syncsim reads YAML 1.2, where it is text)"
    return f"{where}: {msg} (got {shown!r})"


def _value_error_line(where: str, msg: str) -> str:
    field, sep, rest = msg.partition(": ")
    if sep and _FIELD.fullmatch(field):  # a validator naming a field in `where` (`ranks`, `links[3]`, `a.b`)
        return f"{field}: {rest}" if where == "config" else f"{where}.{field}: {rest}"
    return f"{where}: {msg}"


def describe(errors: list[dict[str, Any]], data: Any, root: type[BaseModel]) -> list[str]:
    """One line per problem; unknown keys of one section are reported together with the allowed ones."""
    lines: list[str] = []
    unknown: dict[str, list[str]] = {}
    for err in errors:
        if err["type"] != "extra_forbidden":
            lines.extend(_format_error(err).split("\n"))
            continue
        section = _where(err["loc"][:-1])
        if section not in unknown:
            unknown[section] = []
            allowed = ", ".join(allowed_keys(root, data, err["loc"][:-1]))
            lines.append(f"{section}: unknown key{{s}} {{keys}}; allowed keys: {allowed}")
        unknown[section].append(str(err["loc"][-1]))
    out = []
    for line in _merge_branches(list(dict.fromkeys(lines))):
        section = line.partition(": ")[0]
        if "{keys}" in line:
            keys = unknown[section]
            line = line.replace("{s}", "s" if len(keys) > 1 else "").replace("{keys}", ", ".join(keys))
        out.append(line)
    return out


def _merge_branches(lines: list[str]) -> list[str]:
    """A value that no branch of a union accepts gets one line per branch: say them as one line."""
    reasons: dict[str, list[str]] = {}  # field (or a whole line kept as it is) -> why, in order
    for line in lines:
        field, _, why = line.partition(": ")
        if why.startswith("Input should be ") and "{keys}" not in line:
            reasons.setdefault(field, []).append(why.removeprefix("Input should be "))
        else:
            reasons.setdefault(line, [])
    out = []
    for key, whys in reasons.items():
        if not whys:
            out.append(key)
            continue
        got = next((w[w.rindex(" (got ") :] for w in whys if " (got " in w), "")
        shown = dict.fromkeys(w.removesuffix(got) if got else w for w in whys)
        out.append(f"{key}: Input should be {' or '.join(shown)}{got}")
    return out


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """Pydantic models inside a field annotation (through Optional, list, Union, Annotated)."""
    found, stack = [], [annotation]
    while stack:
        current = stack.pop()
        if isinstance(current, type) and issubclass(current, BaseModel):
            found.append(current)
        else:
            stack.extend(get_args(current))
    return found


def _matching(models: list[type[BaseModel]], node: Any) -> type[BaseModel]:
    """The union member whose Literal tag (e.g. topology: two_tier) the user's data carries."""
    if isinstance(node, dict):
        for model in models:
            for name, field in model.model_fields.items():
                if get_origin(field.annotation) is Literal and node.get(name) in get_args(field.annotation):
                    if len(get_args(field.annotation)) == 1:
                        return model
    return models[0]


def allowed_keys(root: type[BaseModel], data: Any, loc: tuple[Any, ...]) -> list[str]:
    """The keys accepted at `loc` of the raw config `data` (used only to word an error)."""
    model, node = root, data
    pending: list[type[BaseModel]] = []  # a list's union members, matched once the path reaches an item
    for part in loc:
        if isinstance(node, (dict, list)):
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                pass
        if pending and isinstance(node, dict):
            model, pending = _matching(pending, node), []
        if isinstance(part, int) or part not in model.model_fields:
            continue  # a list index, or a union tag pydantic puts in the path
        models = _models_in(model.model_fields[part].annotation)
        if models:
            model = _matching(models, node)
            pending = models if isinstance(node, list) else []
    return list(model.model_fields)
