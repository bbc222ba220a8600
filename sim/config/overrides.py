"""Config paths and `--set KEY=VALUE` overrides, applied to a config's data before it is validated.

A path names a place in the config the way its YAML nests: `cluster.uplink_gbps`, `workload.model`,
`policies[0].group_size`, `faults.stragglers[1].duration_ms`. The value is read as YAML 1.2, as a
config file is (`sim.config.yaml12`), so `10` and `1e3` are numbers, `[2, 4]` a list, `null` clears a
setting and `bert_large` stays a string. Mappings missing on the way are made (`numerics.threads=2` on
a config without `numerics:`); list items must exist. Sweeps (issue 18) name their axes with the same
paths. A malformed `--set` (no `=`, a bad path, a list index out of range) is a `UsageError` naming
`--set`: an argument error, not the config's.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any, Union

import yaml

from sim.config.yaml12 import FieldError, load
from sim.errors import ConfigError, UsageError

Key = Union[str, int]
_SEGMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)$")


def parse_path(path: str) -> list[Key]:
    """`policies[0].group_size` -> ['policies', 0, 'group_size']; ConfigError naming the path if malformed."""
    keys: list[Key] = []
    for segment in path.split("."):
        match = _SEGMENT.match(segment.strip())
        if match is None:
            raise ConfigError(
                f"{path!r}: not a config path; write keys joined by dots, with list items as [index] "
                "(e.g. cluster.uplink_gbps or policies[0].group_size)"
            )
        keys.append(match.group(1))
        keys.extend(int(index) for index in re.findall(r"\[(\d+)\]", match.group(2)))
    return keys


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Put `value` at `path` in `data` (in place)."""
    keys = parse_path(path)
    node: Any = data
    for depth, key in enumerate(keys):
        last = depth == len(keys) - 1
        where = _show(keys[:depth]) or "the config"
        if isinstance(key, int):
            if not isinstance(node, list):
                raise ConfigError(f"{path}: {where} is not a list, so [{key}] names nothing")
            if key >= len(node):
                items = f"indices 0-{len(node) - 1}" if node else "no index"
                raise ConfigError(f"{path}: {where} has {len(node)} item(s) ({items})")
        else:
            if not isinstance(node, dict):
                raise ConfigError(f"{path}: {where} is {type(node).__name__}, not a mapping, so .{key} names nothing")
            if not last and node.get(key) is None:
                node[key] = [] if isinstance(keys[depth + 1], int) else {}
        if last:
            node[key] = value
        else:
            node = node[key]


def parse_override(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` -> (path, value read as YAML)."""
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise UsageError(f"--set {text!r}: write KEY=VALUE, e.g. --set cluster.uplink_gbps=25")
    try:
        value = load(raw) if raw.strip() else ""  # YAML 1.2, as config files are read
    except FieldError as exc:
        raise UsageError(f"--set {text!r}: {exc.problem}") from None
    except (yaml.YAMLError, RecursionError):
        raise UsageError(f"--set {text!r}: the value is not valid YAML; quote it") from None
    try:
        parse_path(path.strip())
    except ConfigError as exc:
        raise UsageError(f"--set {exc}") from None
    return path.strip(), value


def apply_overrides(data: Any, overrides: Iterable[str]) -> Any:
    """A copy of `data` with every `KEY=VALUE` in `overrides` set, in order (later ones win)."""
    overrides = list(overrides)
    if not overrides:
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a mapping of keys, got {type(data).__name__}")
    data = copy.deepcopy(data)
    for text in overrides:
        path, value = parse_override(text)
        try:
            set_path(data, path, value)
        except ConfigError as exc:
            raise UsageError(f"--set {exc}") from None
    return data


def _show(keys: list[Key]) -> str:
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out
