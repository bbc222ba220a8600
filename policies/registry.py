"""One registry from policy names to classes: built-ins, entry points, and `module:Class` paths."""

from __future__ import annotations

import importlib
import math
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from policies.base import Policy, SettingError

ENTRY_POINT_GROUP = "syncsim.policies"

BUILTIN: dict[str, str] = {
    "ps": "policies.ps:ParameterServer",
    "asp": "policies.asp:ASP",
    "ssp": "policies.ssp:SSP",
    "ring": "policies.ring:Ring",
    "hierarchical": "policies.hierarchical:Hierarchical",
    "no_sync": "policies.no_sync:NoSync",
    "ds_sync": "policies.ds_sync:DSSync",
    "sync_switch": "policies.sync_switch:SyncSwitch",
    "zen": "policies.zen:Zen",
    "sparse_allgather": "policies.sparse_allgather:SparseAllGather",
    "sparse_ps": "policies.sparse_ps:SparsePS",
    "sparcml": "policies.sparcml:SparCML",
    "omnireduce": "policies.omnireduce:OmniReduce",
}


def available() -> dict[str, str]:
    """Every registered name with the `module:Class` it loads (entry points may add names)."""
    names = dict(BUILTIN)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, ep.value)
    return names


# Folders searched for a plug-in's module when it is not importable as it is: the working directory,
# then the folders of the config files read so far (`add_search_folder`), as a user expects of
# `name: my_policies:MyPolicy` with my_policies.py beside the config, without PYTHONPATH=.
_SEARCH: list[Path] = []


def add_search_folder(folder: Path) -> None:
    """Also look for plug-in modules in `folder` (the config loader adds each config's folder)."""
    folder = folder.resolve()
    if folder not in _SEARCH:
        _SEARCH.append(folder)


def _import(module_name: str) -> Any:
    """`importlib.import_module`, then, for a top-level module found nowhere, from a search folder that
    holds it as `name.py` or `name/__init__.py` (that folder joins sys.path, as PYTHONPATH would)."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        top = module_name.split(".")[0]
        if exc.name != top:
            raise
        for folder in (Path.cwd(), *_SEARCH):
            if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
                sys.path.append(str(folder))
                return importlib.import_module(module_name)
        raise


def _load(path: str) -> type[Policy]:
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = _import(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise SettingError("name", f"cannot load policy class {path!r}: {exc}") from None
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise SettingError("name", f"{path!r} is not a subclass of policies.base.Policy")
    return obj


def resolve(name: str) -> type[Policy]:
    """The class for a registered name or a `module:Class` path."""
    if ":" in name:
        return _load(name)
    names = available()
    if name not in names:
        raise SettingError(
            "name", f"unknown policy {name!r}; allowed: {', '.join(sorted(names))} (or a 'module:Class' path)"
        )
    return _load(names[name])


def create(name: str, settings: Mapping[str, Any] | None = None) -> Policy:
    """Instantiate a policy, validating its settings; errors name the offending settings (all of them:
    `SettingError.problems`)."""
    cls = resolve(name)
    try:
        parsed = cls.Settings(**dict(settings or {}))
    except ValidationError as exc:
        raise _setting_errors(cls, name, exc.errors()) from None
    except TypeError as exc:  # e.g. a key that is not a string (a YAML mapping as a key)
        raise SettingError("settings", f"cannot read the settings of policy {name!r}: {exc}") from None
    if bad := list(_non_finite(parsed.model_dump())):  # plug-ins whose settings skip PolicySettings
        raise SettingError.of([(field, "should be a finite number (got nan or inf)") for field in bad])
    return cls(parsed)


def _setting_errors(cls: type[Policy], name: str, errors: list[Any]) -> SettingError:
    """One problem per setting: unknown keys together, a union's branches (e.g. 'auto' or an int >= 1) together."""
    problems: dict[str, list[str]] = {}
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and e["loc"]]
    for err in errors:
        field = ".".join(str(p) for p in err["loc"][:1]) or "settings"
        if err["type"] == "extra_forbidden":
            continue
        if err["type"] == "value_error":  # a validator's own sentence says what is allowed
            problems.setdefault(field, []).append(str(err["ctx"]["error"]))
        else:
            problems.setdefault(field, []).append(err["msg"].removeprefix("Input should be "))
    out = []
    for field, reasons in problems.items():
        shown = next((e.get("input") for e in errors if e["loc"][:1] == (field,)), None)
        if all(e["type"] == "value_error" for e in errors if e["loc"][:1] == (field,)):
            out.append((field, "; ".join(dict.fromkeys(reasons))))
        else:
            out.append((field, f"should be {' or '.join(dict.fromkeys(reasons))} (got {shown!r})"))
    if unknown:
        allowed = ", ".join(cls.Settings.model_fields)
        why = f"allowed: {allowed}" if allowed else f"policy {name!r} takes no settings"
        out.append((", ".join(unknown), f"unknown setting{'s' if len(unknown) > 1 else ''} for policy {name!r}; {why}"))
    return SettingError.of(out)


def _non_finite(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, float) and not math.isfinite(value):
        yield path or "settings"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _non_finite(item, f"{path}[{i}]")
