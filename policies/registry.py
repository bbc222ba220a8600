"""One registry from policy names to classes: built-ins, entry points, and `module:Class` plug-in files.

A name a user writes loads only what it names: a built-in policy, a class a script `register`ed, an
installed entry point of the `syncsim.policies` group, or the file `module.py` in the working
directory or beside the config (its top-level code runs once). Any other `module:Class` is refused
before anything is imported.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
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
    "local_sgd": "policies.local_sgd:LocalSGD",
    "diloco": "policies.diloco:DiLoCo",
    "streaming_diloco": "policies.streaming_diloco:StreamingDiLoCo",
    "topk": "policies.topk:TopK",
    "eager_diloco": "policies.eager_diloco:EagerDiLoCo",
    "powersgd": "policies.powersgd:PowerSGD",
    "fsdp": "policies.fsdp:FSDP",
}


_REGISTERED: dict[str, type[Policy]] = {}  # `register`ed by a script, in this process only


def register(name: str, cls: type[Policy]) -> None:
    """Let configs of this process name `cls` as `name` (a script's own class; another process, a Dask
    worker or a rank of a real run, needs a plug-in file or an entry point instead)."""
    if name in BUILTIN or ":" in name or not name:
        raise SettingError("name", f"cannot register {name!r}: a built-in name, empty, or with ':'")
    _REGISTERED[name] = _check(name, cls)


def available() -> dict[str, str]:
    """Every registered name with the `module:Class` it loads (entry points may add names)."""
    names = dict(BUILTIN)
    names.update({name: f"{cls.__module__}:{cls.__qualname__}" for name, cls in _REGISTERED.items()})
    for ep in _entry_points():
        names.setdefault(ep.name, ep.value)
    return names


def _entry_points() -> tuple[Any, ...]:
    """The installed entry points of the `syncsim.policies` group. Scanning every installed package's
    metadata takes milliseconds, so it is done once per process (per `metadata.entry_points` function:
    a test that replaces it gets a fresh scan); a package installed mid-process is seen by the next one."""
    return _scan(metadata.entry_points)


@functools.lru_cache(maxsize=4)
def _scan(entry_points: Any) -> tuple[Any, ...]:
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


# Folders where a plug-in's file may be, for `name: my_policies:MyPolicy`: the working directory, then
# the folders of the config files read so far (`add_search_folder`). Nothing else is imported for a
# user's name: not an installed module, not a module on sys.path (docs/policies.md, "Plug-ins").
_SEARCH: list[Path] = []

PLUGIN_FORMS = (
    "a registered name (syncsim list), an installed entry point of the 'syncsim.policies' group, or "
    "'module:Class' where module.py is a file beside the config or in the working directory"
)


def add_search_folder(folder: Path) -> None:
    """Also look for plug-in files in `folder` (the config loader adds each config's folder)."""
    folder = folder.resolve()
    if folder not in _SEARCH:
        _SEARCH.append(folder)


def _refuse(name: str, why: str) -> SettingError:
    return SettingError("name", f"cannot load policy {name!r}: {why}; allowed: {PLUGIN_FORMS}")


def _plugin_file(name: str, module_name: str) -> Path:
    """The `module_name.py` a user's `module:Class` names, from the search folders; nothing is imported."""
    if not module_name.isidentifier():
        raise _refuse(name, f"{module_name!r} is not a file's name (no dots, slashes or relative names)")
    for folder in (Path.cwd(), *_SEARCH):
        file = folder / f"{module_name}.py"
        if file.is_file():
            return file.resolve()
    raise _refuse(name, f"no file {module_name}.py in the working directory or beside the config")


def _load_file(name: str, module_name: str) -> Any:
    """Run the plug-in file's top-level code once, as module `module_name` (so its classes pickle by name)."""
    file = _plugin_file(name, module_name)
    loaded = sys.modules.get(module_name)
    if loaded is not None:
        if getattr(loaded, "__file__", None) and Path(loaded.__file__).resolve() == file:
            return loaded
        raise _refuse(name, f"{file} would shadow the module {module_name!r} already imported; rename the file")
    module = exec_file(module_name, file)
    if module is None:
        raise _refuse(name, f"{file} cannot be loaded as a Python file")
    return module


def exec_file(module_name: str, file: Path) -> Any:
    """Run `file`'s top-level code once as module `module_name`, registered in `sys.modules` (so its
    classes pickle by name) unless it raises; None when it cannot be loaded as a Python file. Plug-in
    policies and `syncsim profile`'s user modules are loaded this way."""
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _entry_point(name: str) -> Any:
    """The installed entry point `name` is (by its name, or its exact `module:attr` value), or None."""
    for ep in _entry_points():
        if name in (ep.name, ep.value):
            return ep
    return None


def _check(name: str, obj: Any) -> type[Policy]:
    if not (isinstance(obj, type) and issubclass(obj, Policy)):
        raise SettingError("name", f"{name!r} is not a subclass of policies.base.Policy")
    return obj


def resolve(name: str) -> type[Policy]:
    """The class for a built-in name (or its `policies.x:Class` path), a `register`ed name, an installed
    entry point (by name or `module:attr` value), or a `module:Class` whose module.py is in the working
    directory or beside the config. Anything else is refused before any import: a user's name never
    imports an installed module."""
    if name in BUILTIN or name in BUILTIN.values():  # our own modules, by a fixed table
        module_name, _, attr = BUILTIN.get(name, name).partition(":")
        return _check(name, getattr(importlib.import_module(module_name), attr))
    if name in _REGISTERED:
        return _REGISTERED[name]
    ep = _entry_point(name)
    if ep is not None:
        try:
            return _check(name, ep.load())
        except (ImportError, AttributeError) as exc:
            raise SettingError("name", f"cannot load policy {name!r} (entry point {ep.value!r}): {exc}") from None
    if ":" not in name:
        names = available()
        raise SettingError(
            "name", f"unknown policy {name!r}; allowed: {', '.join(sorted(names))} (or a 'module:Class' path)"
        )
    module_name, _, attr = name.partition(":")
    parts = attr.split(".")
    if not all(part.isidentifier() for part in parts):
        raise _refuse(name, f"{attr!r} is not a class name")
    try:
        obj: Any = _load_file(name, module_name)
        for part in parts:
            obj = getattr(obj, part)
    except (ImportError, SyntaxError, AttributeError) as exc:  # in the file's own code, or no such class
        raise SettingError("name", f"cannot load policy class {name!r}: {exc}") from None
    return _check(name, obj)


def label_of(name: str) -> str:
    """What results call a policy entry named `name` (when it has no `label`): the name as written, but
    for a `module:Class` path the `name` its class sets, so a plug-in's rows read `local_sgd_variant`,
    not `my_policies:Variant`. A class that sets none is called by its class name: one inherited from a
    built-in would read as that built-in, beside which a plug-in is usually compared. A path that cannot
    be loaded keeps its text (the config's check reports it)."""
    if ":" not in name:
        return name
    try:
        cls = resolve(name)
    except (ValueError, ImportError, AttributeError, SyntaxError):
        return name
    own = cls.__dict__.get("name")
    return own if isinstance(own, str) and own else cls.__name__


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
