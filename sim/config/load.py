"""Reading a config: a YAML file (with its `extends:` base and `--set` overrides) or a mapping,
validated into a `Config` with every problem reported at once; and the resolved config as YAML."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

from pydantic import ValidationError

from sim.config.extends import resolve_extends
from sim.config.messages import describe
from sim.config.overrides import apply_overrides
from sim.config.reading import resolved
from sim.config.schema import Config, PolicyEntry
from sim.config.transformer import hf_config_beside
from sim.config.wan import traces_beside
from sim.config.yaml12 import dump
from sim.config.yaml_io import check_size, plain, read_yaml
from sim.errors import ConfigError


def policy_problems(entries: list[Any]) -> list[str]:
    """One line per bad setting of every policy entry (all of them, not only the first bad one), and
    duplicate labels. `entries` are raw mappings or `PolicyEntry` objects."""
    from policies.registry import create, label_of

    lines: list[str] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if isinstance(entry, dict):
            name, label = entry.get("name"), entry.get("label")
            settings = {k: v for k, v in entry.items() if k not in ("name", "label")}
            if not isinstance(name, str) or not name:
                continue  # pydantic reports a missing or mistyped name
        elif isinstance(entry, PolicyEntry):
            name, label, settings = entry.name, entry.label, entry.settings
        else:
            continue  # pydantic reports an entry that is not a mapping
        try:
            create(name, settings)
        except ValueError as exc:  # SettingError carries every bad setting
            problems = getattr(exc, "problems", [(getattr(exc, "field", "name"), getattr(exc, "detail", exc))])
            lines += [f"policies[{i}].{field}: {detail}" for field, detail in problems]
        display = label if isinstance(label, str) else label_of(name)
        if display in seen:
            lines.append(f"policies[{i}].label: duplicate label {display!r}; give each entry a unique label")
        seen.add(display)
    return lines


def check_policies(config: Config) -> None:
    """Every policy entry names a known policy with valid settings, and labels are unique."""
    if lines := policy_problems(list(config.policies)):
        raise ConfigError("\n".join(lines))


def parse_config(data: Any) -> Config:
    """Validate a config mapping; raise ConfigError with one line per problem, every problem at once."""
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a mapping of keys, got {type(data).__name__}")
    check_size(data)
    data = plain(data)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        lines = describe(exc.errors(), data, Config)
        entries = data.get("policies")
        if isinstance(entries, list):  # the policies' own settings are checked even when other sections fail
            lines += [line for line in policy_problems(entries) if line not in lines]
        raise ConfigError("\n".join(lines)) from None
    check_policies(config)
    return config


def load_config(path: Union[str, Path], overrides: Sequence[str] = ()) -> Config:
    """Read a YAML config file (`read_config`) and validate it. Plug-in policies (`module:Class`) are
    also looked for beside the file."""
    from policies.registry import add_search_folder

    data = read_config(path, overrides)  # first: a path that cannot be read is worded as the config's error
    add_search_folder(Path(path).parent)
    return parse_config(data)


def read_config(path: Union[str, Path], overrides: Sequence[str] = ()) -> Any:
    """The mapping `load_config` validates: the file merged onto the config it `extends:`, `KEY=VALUE`
    overrides applied (`sim.config.overrides`), a relative `workload.profile`, `workload.transformer.hf_config`
    and WAN bandwidth traces made absolute. A sweep's file is refused, naming `syncsim sweep`."""
    data = resolve_extends(read_yaml(Path(path)), Path(path))
    if isinstance(data, dict) and "sweep" in data:
        raise ConfigError(f"sweep: {path} describes a sweep; run it with: syncsim sweep {path} --out DIR")
    folder = Path(path).parent
    data = hf_config_beside(_profile_beside(apply_overrides(data, overrides), folder), folder)
    return traces_beside(data, folder)


def _profile_beside(data: Any, folder: Path) -> Any:
    """`workload.profile` given relative to the config file, made absolute."""
    workload = data.get("workload") if isinstance(data, dict) else None
    profile = workload.get("profile") if isinstance(workload, dict) else None
    if isinstance(profile, str) and profile and not Path(profile).is_absolute():
        data = {**data, "workload": {**workload, "profile": str(resolved(folder / profile, "workload.profile"))}}
    return data


def dump_config(config: Config) -> str:
    """The resolved config (every default filled in) as YAML."""
    data = config.model_dump(mode="json")
    return dump(data, sort_keys=False)  # text YAML 1.2 would read as a number is quoted
