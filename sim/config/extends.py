"""`extends: base.yaml`: a config file that starts from another and changes only what it names.

The base's path is relative to the file that names it, and a base may extend another. The two
merge key by key: a mapping in the file merges into the base's mapping, anything else (a number,
a string, a list such as `policies:`) replaces the base's value. A cycle of files is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.config.reading import resolved
from sim.config.yaml_io import read_yaml
from sim.errors import ConfigError

MAX_DEPTH = 16  # bases of bases; more is a mistake, not a design


def resolve_extends(data: Any, path: Path, chain: tuple[Path, ...] = ()) -> Any:
    """`data` (read from `path`) merged onto the config it extends, recursively; without `extends:`
    it is returned as it is."""
    if not isinstance(data, dict) or "extends" not in data:
        return data
    ref = data["extends"]
    if not isinstance(ref, str) or not ref.strip():
        raise ConfigError(f"extends: expected the path of a base config file, got {ref!r} (in {path})")
    here = resolved(path, "config")
    try:
        base_path = resolved(here.parent / ref, "extends")
    except ConfigError as exc:  # a loop of symbolic links
        raise ConfigError(f"{exc} (named in {path})") from None
    if base_path in (*chain, here):
        cycle = " -> ".join(str(p) for p in (*chain, here, base_path))
        raise ConfigError(f"extends: the files extend each other in a cycle ({cycle})")
    if len(chain) >= MAX_DEPTH:
        raise ConfigError(f"extends: more than {MAX_DEPTH} levels of base configs (in {path})")
    try:
        raw = read_yaml(base_path, "extends")
    except ConfigError as exc:  # a missing, unreadable or unbounded base: said as the field that named it
        raise ConfigError(f"extends: {str(exc).removeprefix('extends: ')} (named in {path})") from None
    base = resolve_extends(raw, base_path, (*chain, here))
    if not isinstance(base, dict):
        raise ConfigError(f"extends: the base config {base_path} is not a mapping of keys but {type(base).__name__}")
    return merge(base, {key: value for key, value in data.items() if key != "extends"})


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` applied: mappings merge key by key, other values replace."""
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
