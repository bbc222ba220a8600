"""One registry from policy names to classes: built-ins, entry points, and `module:Class` paths."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from importlib import metadata
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
}


def available() -> dict[str, str]:
    """Every registered name with the `module:Class` it loads (entry points may add names)."""
    names = dict(BUILTIN)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(ep.name, ep.value)
    return names


def _load(path: str) -> type[Policy]:
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
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
    """Instantiate a policy, validating its settings; errors name the offending setting."""
    cls = resolve(name)
    try:
        parsed = cls.Settings(**dict(settings or {}))
    except ValidationError as exc:
        errors = exc.errors()
        field = str(errors[0]["loc"][0]) if errors[0]["loc"] else "settings"
        if errors[0]["type"] == "extra_forbidden":
            allowed = ", ".join(cls.Settings.model_fields)
            why = f"allowed: {allowed}" if allowed else f"policy {name!r} takes no settings"
            raise SettingError(field, f"unknown setting for policy {name!r}; {why}") from None
        shown = errors[0].get("input")
        if errors[0]["type"] == "value_error":  # a validator's own sentence says what is allowed
            raise SettingError(field, str(errors[0]["ctx"]["error"])) from None
        # a union (e.g. 'auto' or an int >= 1) reports one error per branch: say them together
        reasons = [
            e["msg"].removeprefix("Input should be ") for e in errors if e["loc"] and e["loc"][0] == errors[0]["loc"][0]
        ]
        raise SettingError(field, f"should be {' or '.join(dict.fromkeys(reasons))} (got {shown!r})") from None
    return cls(parsed)
