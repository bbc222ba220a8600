"""One registry from policy names to classes: built-ins, entry points, and `module:Class` paths."""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any, Mapping

from pydantic import ValidationError

from policies.base import Policy, SettingError

ENTRY_POINT_GROUP = "syncsim.policies"

BUILTIN: dict[str, str] = {
    "ps": "policies.ps:ParameterServer",
    "ring": "policies.ring:Ring",
    "hierarchical": "policies.hierarchical:Hierarchical",
    "no_sync": "policies.no_sync:NoSync",
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
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "settings"
        if first["type"] == "extra_forbidden":
            allowed = ", ".join(cls.Settings.model_fields) or "none"
            raise SettingError(field, f"unknown setting for policy {name!r}; allowed: {allowed}") from None
        raise SettingError(field, f"{first['msg']} (got {first.get('input')!r})") from None
    return cls(parsed)
