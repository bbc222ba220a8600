"""A config's `sweep:` section: the grid of configs it stands for, every point validated up front.

    sweep:
      grid:                           # every combination of these
        cluster.uplink_gbps: [10, 25, 100]
        policies[0].group_size: [2, 4, 8]
      zip:                            # axes that move together (one group: lists of equal length)
        - workload.model: [resnet50, bert_large]
          workload.batch_size: [32, 16]
      seeds: [0, 1, 2]                # each point with each seed

Axes are config paths (`sim.config.overrides`). A point is one combination: its coordinates (axis
path -> value, then `seed`), its config (the base with those values set) and a key, the hash of its
resolved config, under which its results are kept, so a re-run finds them (`sim.experiments.sweep_runner`).

The number of points is the product of the blocks' lengths (a grid axis, a zip group, the seeds), counted
before anything is built: a sweep over `MAX_POINTS` is refused at once, however large, and the points of
an allowed one are made one at a time from `itertools.product`. Validating them costs a few milliseconds
each, so callers pass `progress` to show it; `syncsim check` validates only chosen points of a large sweep
(`expand_at`, `sim.experiments.sweep_check`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from sim.config import Config, parse_config
from sim.config.extends import resolve_extends
from sim.config.overrides import apply_overrides, parse_path, set_path
from sim.config.yaml_io import check_size, read_yaml
from sim.errors import ConfigError

MAX_POINTS = 100_000  # a grid larger than this is a typo, not an experiment on one machine

Combo = tuple[int, dict[str, Any]]  # a point's index and coordinates, before its config is built
# wraps the points as they are made (a progress bar): given them and how many there are, yields them
Progress = Callable[[Iterator[Combo], int], Iterable[Combo]]


@dataclass(frozen=True)
class Point:
    index: int
    coords: dict[str, Any]  # axis path -> value, in the order the sweep names them; then "seed"
    config: Optional[Config]  # None: the point does not validate (`error` says why)
    error: Optional[str] = None

    @property
    def key(self) -> str:
        """The hash of the resolved config (every default filled in): equal configs, equal keys."""
        assert self.config is not None
        text = json.dumps(self.config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def label(self) -> str:
        return ", ".join(f"{path}={value!r}" for path, value in self.coords.items())


@dataclass(frozen=True)
class Sweep:
    name: str
    axes: list[str]  # coordinate names, in order ("seed" last when seeds are swept)
    points: list[Point]

    @property
    def bad(self) -> list[Point]:
        return [p for p in self.points if p.config is None]


def load_sweep(
    path: Union[str, Path], overrides: tuple[str, ...] | list[str] = (), progress: Optional[Progress] = None
) -> Sweep:
    """Read a config file with a `sweep:` section (after `extends:` and `--set`) and expand it."""
    return expand(read_sweep(path, overrides), progress)


def read_sweep(path: Union[str, Path], overrides: tuple[str, ...] | list[str] = ()) -> Any:
    """A sweep file's mapping, after `extends:` and `--set`; plug-in policies beside it become loadable."""
    from policies.registry import add_search_folder

    add_search_folder(Path(path).parent)  # plug-in policies beside the file, as load_config does
    return apply_overrides(resolve_extends(read_yaml(Path(path)), Path(path)), overrides)


def is_sweep(path: Union[str, Path]) -> bool:
    """Whether a config file (after `extends:`) has a `sweep:` section."""
    data = resolve_extends(read_yaml(Path(path)), Path(path))
    return isinstance(data, dict) and "sweep" in data


def expand(data: Any, progress: Optional[Progress] = None) -> Sweep:
    """The points of a config mapping with a `sweep:` section; a point that does not validate keeps
    its error (its coordinates and the field), the others their configs. The count is checked first;
    `progress(points, total)` wraps the points as they are made (a progress bar)."""
    axes, blocks = _section(data)
    total = _count(blocks)
    check_size(data)  # each point copies the base and its values: an alias bomb stops here, not in deepcopy
    base = {key: value for key, value in data.items() if key != "sweep"}
    name = base.get("name", "experiment") if isinstance(base.get("name"), str) else "experiment"
    combos: Iterator[Combo] = (
        (index, {path: value for block in combo for path, value in block})
        for index, combo in enumerate(itertools.product(*blocks))
    )
    made = progress(combos, total) if progress is not None else combos
    return Sweep(name, axes, _distinct([_point(index, base, coords) for index, coords in made]))


def shape(data: Any) -> tuple[list[int], int]:
    """The number of settings of each block (a grid axis, a zip group, the seeds) and of points, refused
    over `MAX_POINTS` as in `expand`; nothing is built."""
    _, blocks = _section(data)
    return [len(block) for block in blocks], _count(blocks)


def expand_at(data: Any, indices: Iterable[int], count: int, progress: Optional[Progress] = None) -> Sweep:
    """The points of a sweep at these indices (`count` of them, or fewer if `indices` stops early), each
    built and validated as `expand` does: `syncsim check` of a large sweep validates a chosen few."""
    axes, blocks = _section(data)
    _count(blocks)
    check_size(data)
    base = {key: value for key, value in data.items() if key != "sweep"}
    name = base.get("name", "experiment") if isinstance(base.get("name"), str) else "experiment"
    combos: Iterator[Combo] = ((index, _coords_at(blocks, index)) for index in indices)
    made = progress(combos, count) if progress is not None else combos
    return Sweep(name, axes, _distinct([_point(index, base, coords) for index, coords in made]))


def _coords_at(blocks: list[list[tuple[tuple[str, Any], ...]]], index: int) -> dict[str, Any]:
    """The coordinates of point `index`, in `itertools.product`'s order (the last block varies fastest)."""
    picked = []
    for block in reversed(blocks):
        index, k = divmod(index, len(block))
        picked.append(block[k])
    return {path: value for block in reversed(picked) for path, value in block}


def _section(data: Any) -> tuple[list[str], list[list[tuple[tuple[str, Any], ...]]]]:
    """The axes and blocks of `data`'s `sweep:` section."""
    if not isinstance(data, dict) or not isinstance(data.get("sweep"), dict):
        raise ConfigError("sweep: this config has no sweep: section (a mapping with grid:, zip: and/or seeds:)")
    return _axes(data["sweep"])


def _count(blocks: list[list[tuple[tuple[str, Any], ...]]]) -> int:
    """The number of points (every combination of one setting per block), refused over `MAX_POINTS`."""
    total = math.prod(len(block) for block in blocks)
    if total > MAX_POINTS:
        sizes = " x ".join(f"{len(block):,}" for block in blocks)
        raise ConfigError(f"sweep: {sizes} = {total:,} points; a sweep has at most {MAX_POINTS:,}")
    return total


def _axes(spec: dict[str, Any]) -> tuple[list[str], list[list[tuple[tuple[str, Any], ...]]]]:
    """The axis names and, per block (a grid axis, a zip group, the seeds), its list of settings.
    Every problem of the section is reported at once, one line each."""
    problems: list[str] = []
    unknown = sorted(set(spec) - {"grid", "zip", "seeds"})
    if unknown:
        problems.append(f"sweep: unknown key(s) {', '.join(unknown)}; allowed: grid, zip, seeds")
    axes: list[str] = []
    blocks: list[list[tuple[tuple[str, Any], ...]]] = []

    def axis(path: Any, values: Any, where: str) -> Optional[list[Any]]:
        """The axis's values, or None with its problems added."""
        if not isinstance(path, str):
            problems.append(f"{where}: an axis is a config path (text), got {path!r}")
            return None
        try:
            parse_path(path)
        except ConfigError as exc:
            problems.append(f"{where}: {exc}")
            return None
        if path in axes:
            problems.append(f"{where}.{path}: the axis is swept twice")
            return None
        axes.append(path)
        if not isinstance(values, list) or not values:
            problems.append(f"{where}.{path}: expected a non-empty list of values, got {values!r}")
            return None
        return values

    grid = spec.get("grid") or {}
    if not isinstance(grid, dict):
        problems.append(f"sweep.grid: expected a mapping of axis -> list of values, got {grid!r}")
        grid = {}
    for path, values in grid.items():
        if (checked := axis(path, values, "sweep.grid")) is None:
            continue
        if twice := _repeat(checked):
            j, k = twice
            problems.append(
                f"sweep.grid.{path}: value {k} ({checked[k]!r}) repeats value {j} ({checked[j]!r}); list each "
                "value once (equal values make one point twice)"
            )
            continue
        blocks.append([((path, value),) for value in checked])
    groups = spec.get("zip") or []
    if not isinstance(groups, list) or not all(isinstance(g, dict) and g for g in groups):
        problems.append("sweep.zip: expected a list of groups, each a mapping of axis -> list of values")
        groups = []
    for i, group in enumerate(groups):
        checked_columns = [(path, axis(path, values, f"sweep.zip[{i}]")) for path, values in group.items()]
        columns = [(path, values) for path, values in checked_columns if values is not None]
        if len(columns) < len(checked_columns):
            continue
        lengths = {len(values) for _, values in columns}
        if len(lengths) > 1:
            shown = ", ".join(f"{path}: {len(values)}" for path, values in columns)
            problems.append(f"sweep.zip[{i}]: the axes of a group move together and need equal lengths ({shown})")
            continue
        rows = [tuple((path, values[k]) for path, values in columns) for k in range(lengths.pop())]
        if twice := _repeat([[value for _, value in row] for row in rows]):
            j, k = twice
            shown = ", ".join(f"{path}={value!r}" for path, value in rows[k])
            problems.append(
                f"sweep.zip[{i}]: row {k} ({shown}) repeats row {j}; list each combination once "
                "(equal rows make one point twice)"
            )
            continue
        blocks.append(rows)
    seeds = spec.get("seeds")
    if seeds is not None:
        if "seed" in axes:
            problems.append("sweep.seeds: seed is already an axis; sweep it in one place")
        elif not isinstance(seeds, list) or not seeds or not all(type(s) is int and s >= 0 for s in seeds):
            problems.append(f"sweep.seeds: expected a non-empty list of integers >= 0, got {seeds!r}")
        elif len(set(seeds)) != len(seeds):
            problems.append(f"sweep.seeds: {seeds} lists a seed twice")
        else:
            axes.append("seed")
            blocks.append([(("seed", seed),) for seed in seeds])
    if not blocks and not problems:
        problems.append("sweep: nothing to sweep; give grid:, zip: or seeds:")
    if problems:
        raise ConfigError("\n".join(problems))
    return axes, blocks


def _distinct(points: list[Point]) -> list[Point]:
    """`points`, refused when two resolve to one config: they would share one results folder (the key)
    and one row of the table twice. Equal values on an axis are refused earlier (`_axes`); this catches
    values that differ only until defaults are filled in (null and the default's value)."""
    first: dict[str, Point] = {}
    for point in points:
        if point.config is None:
            continue
        other = first.setdefault(point.key, point)
        if other is not point:
            raise ConfigError(
                f"sweep: point {point.index} ({point.label()}) resolves to the same config as point {other.index} "
                f"({other.label()}); drop one of the values"
            )
    return points


def _same(value: Any) -> Any:
    """A hashable stand-in equal for values a config reads as equal: 1 and 1.0, [25] and [25.0]."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("number", value)  # 1 == 1.0 and hash(1) == hash(1.0): one key, exact for large ints too
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_same(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple(sorted((str(k), _same(v)) for k, v in value.items())))
    return ("other", repr(value))


def _repeat(values: list[Any]) -> Optional[tuple[int, int]]:
    """The first (earlier, later) indices of two equal values, or None when each appears once."""
    seen: dict[Any, int] = {}
    for k, value in enumerate(values):
        j = seen.setdefault(_same(value), k)
        if j != k:
            return j, k
    return None


def _point(index: int, base: dict[str, Any], coords: dict[str, Any]) -> Point:
    """A point's config, or every problem of it: each axis path that names no place in the config,
    then what validation finds in the rest."""
    data = copy.deepcopy(base)
    problems: list[str] = []
    for path, value in coords.items():
        try:
            set_path(data, path, copy.deepcopy(value))
        except ConfigError as exc:
            problems.append(str(exc))
    try:
        config = parse_config(data)
    except ConfigError as exc:
        problems += [line for line in str(exc).splitlines() if line not in problems]
    if problems:
        return Point(index, coords, None, " / ".join(problems))
    return Point(index, coords, config)
