"""What the pages name exists as they name it (issue 49, "docs that cannot drift"): every `syncsim` command and
flag written as code, every `python -m` module of the project and its flags, every config key path, every
default a page quotes for a key, every policy of a YAML example, every link and every path into the code;
and docs/policies.md's table lists every built-in policy.

Each check returns one line per problem, naming page and line; each is shown failing on a made-up page.
README.md and docs/*.md are read, fenced code included only where a check says so.
"""

from __future__ import annotations

import argparse
import itertools
import re
from functools import cache
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*```([^\n]*)\n(.*?)^[ \t]*```[^\n]*$", re.S | re.M)


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _prose(text: str) -> str:
    """The page with fenced code blanked (its lines kept, so that offsets give the same line numbers)."""
    return FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


# --- `syncsim` commands -------------------------------------------------------------------------------


@cache
def _parser() -> argparse.ArgumentParser:
    from sim.cli.main import build_parser

    return build_parser()


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def written_commands(text: str, program: str) -> list[tuple[int, str]]:
    """(line, words after `program`) of every command written as code: a line of a fenced block that
    starts with it (after an optional `$ `), or inline code that does."""
    found = []
    for block in FENCE.finditer(text):
        first = _line(text, block.start(2))
        for i, line in enumerate(block.group(2).splitlines()):
            line = re.sub(r"^\s*\$\s+", "", line)
            if line.startswith(program + " "):
                found.append((first + i, line[len(program) :]))
    prose = _prose(text)
    for match in re.finditer(rf"`{re.escape(program)} ([^`]*)`", prose):
        found.append((_line(prose, match.start()), match.group(1)))
    return found


def syncsim_problems(text: str) -> list[str]:
    """A `syncsim` subcommand that does not exist, or a flag its parser lacks. A first word ending in `:`
    is the program's output (`syncsim calibrate: argument error: ...`), not a command."""
    problems = []
    for line, rest in written_commands(text, "syncsim"):
        words = rest.split()
        if words and words[0].endswith(":"):
            continue
        parser, path = _parser(), ["syncsim"]
        while words and words[0] in _subcommands(parser):
            path.append(words.pop(0))
            parser = _subcommands(parser)[path[-1]]
        if _subcommands(parser) and words and re.fullmatch(r"[a-z][\w-]*", words[0]):
            problems.append(f"line {line}: {' '.join(path)} has no command {words[0]!r}")
        for word in words:
            flag = re.match(r"\[?(--?[A-Za-z][\w-]*)", word)
            if flag and flag.group(1) not in parser._option_string_actions:
                problems.append(f"line {line}: {' '.join(path)} has no flag {flag.group(1)}")
    return problems


# --- `python -m` modules of the project -----------------------------------------------------------------


def module_problems(text: str) -> list[str]:
    """`python -m M --flag` for a module M of this project (sim, real, policies): M must be a file here, and
    each flag a string literal in its source (where its argparse parser defines it)."""
    problems = []
    for line, rest in written_commands(text, "python -m"):
        module, *words = rest.split() or [""]
        if module.split(".")[0] not in ("sim", "real", "policies"):
            continue
        base = ROOT / module.replace(".", "/")
        source = next((p for p in (base.with_suffix(".py"), base / "__main__.py") if p.is_file()), None)
        if source is None:
            problems.append(f"line {line}: no module {module}")
            continue
        code = source.read_text()
        for word in words:
            flag = re.match(r"\[?(--[A-Za-z][\w-]*)", word)
            if flag and f'"{flag.group(1)}"' not in code and f"'{flag.group(1)}'" not in code:
                problems.append(f"line {line}: python -m {module} has no flag {flag.group(1)}")
    return problems


# --- config keys and their defaults ---------------------------------------------------------------------


def _models(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models(arg)]


@cache
def _policy_models() -> tuple[type[BaseModel], ...]:
    from policies.registry import BUILTIN, resolve
    from sim.config.schema import PolicyEntry

    return (PolicyEntry, *(resolve(name).Settings for name in BUILTIN))


def key_fields(path: str) -> list[Any]:
    """The schema fields a dotted key path (`cluster.wan.rtt_ms`, `policies[0].first.name`) can name: a
    cluster key of any topology, a policy key of any policy; a policy's setting that is itself a policy
    (sync_switch's `first`) takes a policy's keys."""
    from sim.config.schema import Config

    models: list[type[BaseModel]] = [Config]
    fields: list[Any] = []
    for i, key in enumerate(re.sub(r"\[\d*\]", "", path).split(".")):
        fields = [m.model_fields[key] for m in models if key in m.model_fields]
        if key == "policies" and i == 0:
            models = list(_policy_models())
        else:
            models = [inner for f in fields for inner in _models(f.annotation)]
            if not models and set(fields) & {f for m in _policy_models() for f in m.model_fields.values()}:
                models = list(_policy_models())
    return fields


def _is_code_path(name: str) -> bool:
    """`policies.registry`, `numerics.md`: a module or file of the project, not a key."""
    parts = name.split(".")
    return (
        bool(re.fullmatch(r"md|py|csv|json|yaml|txt", parts[-1]))
        or (ROOT / "/".join(parts)).with_suffix(".py").is_file()
    )


KEY_PATH = re.compile(
    r"(?<![\w./\[-])((?:cluster|workload|simulation|faults|background|numerics|calibration|policies)"
    r"(?:\[\d*\])?(?:\.[a-z_][a-z0-9_]*(?:\[\d*\])?)+)(_?\*)?(?![\w(/-]|\.\w)"
)


def key_problems(text: str) -> list[str]:
    """A dotted key path outside fenced code that names no key of the schema (`x_*` names keys that
    start with `x_`)."""
    prose = _prose(text)
    problems = []
    for match in KEY_PATH.finditer(prose):
        path, glob = match.group(1), match.group(2)
        if _is_code_path(path):
            continue
        if glob:
            head, _, stem = path.rpartition(".")
            parents = [inner for f in key_fields(head) for inner in _models(f.annotation)] if head else []
            ok = any(name.startswith(stem) for model in parents for name in model.model_fields)
        else:
            ok = bool(key_fields(path))
        if not ok:
            problems.append(f"line {_line(prose, match.start())}: no config key {path}{glob or ''}")
    return problems


_BYTES = {"kib": 2**10, "mib": 2**20, "gib": 2**30, "kb": 1e3, "mb": 1e6, "gb": 1e9}


def _literal(text: str) -> Any:
    """A quoted default as a value: a number (a byte unit applied, any other unit word dropped), true or
    false, or one bare word; None where it is prose (`halfway between 1 and threshold`)."""
    text = text.strip().strip("`").strip()
    number = re.fullmatch(r"(-?[\d.]+(?:e-?\d+)?)\s*([A-Za-z%]*)", text)
    if number:
        try:
            return float(number.group(1)) * _BYTES.get(number.group(2).lower(), 1)
        except ValueError:
            return None
    if text in ("true", "false"):
        return text == "true"
    return text if re.fullmatch(r"[A-Za-z_][\w.]*", text) else None


def _agrees(quoted: str, default: Any) -> bool:
    """Whether a quoted default (the page's text) is the schema's: as a number where the schema's is one."""
    literal = _literal(quoted)
    if isinstance(literal, float) and isinstance(default, (int, float)) and not isinstance(default, bool):
        return abs(literal - default) <= 1e-9 * max(1.0, abs(default))
    text = quoted.strip().strip("`").strip().lower()
    return text == (str(default).lower() if not isinstance(default, bool) else ("true" if default else "false"))


def _defaults(key: str) -> list[Any]:
    """The set defaults of every field `key` can name: a dotted path, or a bare name (any section's or a
    policy's)."""
    from sim.config.reference import models_in
    from sim.config.schema import Config

    if "." in key:
        fields = key_fields(key)
    else:
        seen: list[type[BaseModel]] = []
        todo = [Config, *_policy_models()]
        while todo:
            model = todo.pop()
            if model not in seen:
                seen.append(model)
                todo += [m for f in model.model_fields.values() for m in models_in(f.annotation)]
        fields = [m.model_fields[key] for m in seen if key in m.model_fields]
    # None is an unset key whose value is derived, which a page describes in words ("probed")
    return [f.default for f in fields if f.default not in (PydanticUndefined, None) and f.default_factory is None]


QUOTED_DEFAULT = re.compile(
    r"`([a-z_][\w.]*)(?::[^`]*)?`[^`()\n]{0,12}\((?:default:?\s+([^,;)]+)|([^,;)]+?)\s+by default)[,;)]"
)


def default_problems(text: str) -> list[str]:
    """A default a page quotes for a key that no field of that name has: "`key` (default V)", "`key` (V by
    default)", and the rows of a table whose first column is a key and one column `default`."""
    prose = _prose(text)
    quoted = [(_line(prose, m.start()), m.group(1), m.group(2) or m.group(3)) for m in QUOTED_DEFAULT.finditer(prose)]
    column = None
    for number, line in enumerate(prose.splitlines(), 1):
        row = line.strip().strip("|") if line.startswith("|") else ""
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row)] if row else []  # `a \| b` is one cell
        if not cells:
            column = None
        elif column is None and cells[0] in ("key", "setting") and "default" in cells:
            column = cells.index("default")
        elif column is not None and (key := re.fullmatch(r"`([a-z_][\w.]*)`", cells[0])) and len(cells) > column:
            quoted.append((number, key.group(1), cells[column]))
    problems = []
    for line, key, value in quoted:
        literal, defaults = _literal(value), _defaults(key)
        if literal is None or not defaults or any(_agrees(value, d) for d in defaults):
            continue
        problems.append(f"line {line}: `{key}` quoted with default {value.strip()!r}; the schema's: {defaults}")
    return problems


# --- policies of YAML examples, links, paths --------------------------------------------------------------


def policy_problems(text: str) -> list[str]:
    """A YAML example's `policies:` entry whose name is neither registered nor `module:Class`."""
    from policies.registry import BUILTIN

    problems = []
    for block in FENCE.finditer(text):
        if block.group(1).strip() not in ("yaml", "yml"):
            continue
        try:
            data = yaml.safe_load(block.group(2))
        except yaml.YAMLError:
            continue  # an excerpt; the pages' full examples are run by test_docs.py
        entries = data.get("policies") if isinstance(data, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            name = entry.get("name") if isinstance(entry, dict) else entry
            if str(name) not in BUILTIN and ":" not in str(name):
                problems.append(f"line {_line(text, block.start(2))}: no policy {name!r} (`syncsim list`)")
    return problems


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation but `-` and `_` dropped, spaces `-`."""
    headings = re.findall(r"^#+ (.+)$", _prose(page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


OWN_PATH = re.compile(r"`((?:sim|real|policies|tests|configs|notebooks|benchmarks)/[^`\s]+)`")
BARE_SOURCE = re.compile(r"(?<![\w./`-])((?:sim|real|policies|tests)/[\w/]+\.py)\b")


def _exists(path: str) -> bool:
    """A path into this repository, its globs (`*`, `{a,b}`) and a module's attribute (`x.py:name`) allowed."""
    path = re.sub(r"(\.py)?(?:::?|\.)[A-Za-z_][\w.]*$", r"\1", path) if not re.search(r"\.\w+$", path) else path
    path = re.sub(r"\.py[:.][A-Za-z_]\w*$", ".py", path)
    options = re.findall(r"\{([^}]*)\}", path)
    for choice in itertools.product(*(o.split(",") for o in options)):
        picks = iter(choice)
        concrete = re.sub(r"\{[^}]*\}", lambda _: next(picks), path)  # noqa: B023 (used at once)
        found = list(ROOT.glob(concrete)) if "*" in concrete else [ROOT / concrete]
        if not any(p.exists() or p.with_suffix(".py").exists() for p in found):
            return False
    return True


def link_problems(page: Path) -> list[str]:
    """A link to a page or file here that does not exist, or to a heading its page lacks; a path into the
    code (in backticks, or a bare `sim/.../x.py`) that does not exist."""
    text = page.read_text()
    prose = _prose(text)
    problems = []
    for match in re.finditer(r"\]\(([^)\s]+)\)", prose):
        target = match.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        where = (page.parent / file) if file else page
        if not where.exists():
            problems.append(f"line {_line(prose, match.start())}: no file {target}")
        elif anchor and where.suffix == ".md" and anchor not in _anchors(where):
            problems.append(f"line {_line(prose, match.start())}: {where.name} has no heading #{anchor}")
    for pattern in (OWN_PATH, BARE_SOURCE):
        for match in pattern.finditer(prose):
            if not _exists(match.group(1)):
                problems.append(f"line {_line(prose, match.start())}: no path {match.group(1)}")
    return problems


# --- the pages ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_a_page_names_only_what_exists(page: Path) -> None:
    text = page.read_text()
    problems = [
        *syncsim_problems(text),
        *module_problems(text),
        *key_problems(text),
        *default_problems(text),
        *policy_problems(text),
        *link_problems(page),
    ]
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def listed_policies(text: str) -> set[str]:
    """The policies of a page's table whose header starts `| name | settings |`."""
    table = text.split("| name | settings |", 1)[1].split("\n\n", 1)[0] if "| name | settings |" in text else ""
    return set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))


def test_the_policies_page_lists_every_builtin_policy() -> None:
    """The other direction: a policy added to the registry gets its row in docs/policies.md's table."""
    from policies.registry import BUILTIN

    listed = listed_policies((ROOT / "docs" / "policies.md").read_text())
    assert sorted(set(BUILTIN) - listed) == [], "add a row to docs/policies.md's `| name | settings |` table"
    assert sorted(listed - set(BUILTIN)) == [], "docs/policies.md lists a policy the registry lacks"


# --- each check fails on a page that drifted ------------------------------------------------------------


def test_a_command_or_flag_the_cli_lacks_fails() -> None:
    page = "Run:\n\n```bash\nsyncsim run configs/x.yaml --out r --fast\n```\n\nthen `syncsim chek c.yaml`.\n"
    assert syncsim_problems(page) == ["line 4: syncsim run has no flag --fast", "line 7: syncsim has no command 'chek'"]
    assert syncsim_problems("`syncsim emulate up c.yaml --tag t --scale 2`") == []  # nested commands
    assert syncsim_problems("```\nsyncsim calibrate: argument error: --repeats: ...\n```\n") == []  # output


def test_a_module_or_its_flag_that_does_not_exist_fails() -> None:
    page = "`python -m sim.nccl.fit --table FILE`, `python -m sim.nccl.fitter`, `python -m sim.nccl.fit --tables`"
    assert module_problems(page) == [
        "line 1: no module sim.nccl.fitter",
        "line 1: python -m sim.nccl.fit has no flag --tables",
    ]
    assert module_problems("`python -m pytest -n 0`") == []  # not the project's


def test_a_key_path_the_schema_lacks_fails() -> None:
    page = "Set `workload.sparsity.zipf_s`, `simulation.nccl.algo` and cluster.wan.rtt_ms; see policies.md.\n"
    assert key_problems(page) == ["line 1: no config key simulation.nccl.algo"]
    assert key_problems("`policies[0].first.name`, `simulation.max_estimated_*`, `policies.registry`") == []
    assert key_problems("`simulation.max_estimate_*`") == ["line 1: no config key simulation.max_estimate_*"]


def test_a_default_the_schema_does_not_have_fails() -> None:
    page = (
        "`simulation.max_estimated_wall_s` (600 s by default), `block_size` (default 256), `index_format` "
        "(default list), `release` (default: halfway to threshold)\n\n"
        "| key | flag | default | meaning |\n| --- | --- | --- | --- |\n| `repeats` | `--repeats` | 7 | x |\n"
        "| `max_bytes` | `--max-bytes` | 64 MiB | y |\n"
    )
    assert default_problems(page) == [
        "line 1: `simulation.max_estimated_wall_s` quoted with default '600 s'; the schema's: [3600.0]",
        "line 5: `repeats` quoted with default '7'; the schema's: [5]",
    ]


def test_a_yaml_example_with_an_unknown_policy_fails() -> None:
    page = "```yaml\npolicies:\n  - name: ring\n  - name: allreduce\n  - name: my_module:Mine\n```\n"
    assert policy_problems(page) == ["line 2: no policy 'allreduce' (`syncsim list`)"]


def test_a_broken_link_anchor_or_code_path_fails(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Workers leaving and joining\n")
    page.write_text(
        "[a](other.md#workers-leaving-and-joining) [b](other.md#workers) [c](gone.md) `sim/nccl/tuner.py`\n"
        "`sim/nccl/tuners.py`, sim/nccl/fabric.py, `configs/two_tier_{1to1,4to1}_*.yaml`\n"
    )
    assert link_problems(page) == [
        "line 1: other.md has no heading #workers",
        "line 1: no file gone.md",
        "line 2: no path sim/nccl/tuners.py",
        "line 2: no path sim/nccl/fabric.py",
    ]


def test_a_policy_missing_from_the_table_is_seen() -> None:
    page = "| name | settings | what it does |\n| --- | --- | --- |\n| `ps` | a | b |\n| `ring` | - | c |\n\nAfter.\n"
    assert listed_policies(page) == {"ps", "ring"}
