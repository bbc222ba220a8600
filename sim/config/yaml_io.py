"""Reading a config file safely: UTF-8 text, plain YAML 1.2 data, no duplicate keys, bounded size.

Configs are often generated (sweeps, notebooks, other programs), so the reader expects anything:
bytes that are not UTF-8, YAML tags that would build Python objects, a key given twice (PyYAML keeps
the last one silently), alias bombs (a few lines that expand to billions of values) and documents
nested thousands deep, and paths that are not files at all (`/dev/zero`, a FIFO) or are too big
(`sim.config.reading`). Each ends as a `ConfigError` of one line, never a traceback or a hang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sim.config.reading import MB, read_bounded
from sim.config.yaml12 import MAX_VALUES, FieldError, load
from sim.errors import ConfigError

MAX_BYTES = 10 * MB  # a config is a few kB; a generated one with long explicit schedules, a few MB


def read_yaml(path: Path, field: str = "config") -> Any:
    """The plain data of a YAML config file; `ConfigError` naming the file for anything else, and
    `field` (what named the file: `config`, `extends`) when it is no regular file or over `MAX_BYTES`."""
    try:
        raw = read_bounded(path, field, MAX_BYTES, "a config")
    except OSError as exc:
        raise ConfigError(f"cannot read config {str(path)!r}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); save it as UTF-8"
        ) from None
    try:
        data = load(text)  # YAML 1.2's types (sim.config.yaml12)
    except FieldError as exc:
        raise ConfigError(f"{exc.field}: {exc.problem} ({path}, line {exc.line})") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_one_line(exc)}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nested too deeply to be a config") from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty; a config is a mapping with cluster:, workload: and policies:")
    return data  # parse_config bounds its size (aliases expanded) before anything walks it


def check_size(data: Any, limit: int = MAX_VALUES) -> None:
    """Refuse data that expands to more than `limit` values (aliases count each time they are used,
    and a self-referencing alias never ends)."""
    stack, count = [data], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > limit:
            raise ConfigError(f"config: more than {limit:,} values once aliases are expanded (an alias bomb?)")
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)


def plain(data: Any) -> Any:
    """The data with numpy scalars turned into Python ones (`np.int64(4)` -> 4), so that a config built
    in a notebook from numpy ranges validates as its YAML would; other values are left as they are."""
    if isinstance(data, dict):
        return {key: plain(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(plain(value) for value in data)
    if type(data).__module__ == "numpy" and hasattr(data, "item") and getattr(data, "ndim", None) == 0:
        return data.item()
    return data


def _one_line(exc: yaml.YAMLError) -> str:
    """PyYAML's message with its position, on one line."""
    return " ".join(str(exc).replace('in "<unicode string>", ', "at ").split())
