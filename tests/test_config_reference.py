"""docs/config.md lists every key the schema accepts, nested ones and policy settings included, each with
its description, and says what every section is (issue 49: `workload.sparsity` listed no keys, `zen` had
no description). The walk over the schema here is the test's own, not the generator's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from policies.registry import BUILTIN, resolve
from sim.config.reference import render
from sim.config.schema import Config

HEADING = re.compile(r"^#+ `?([^`\n]+)`?$")


def _models(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in get_args(annotation):
        yield from _models(arg)


def schema_fields() -> list[tuple[str, str, FieldInfo]]:
    """(path, key, field) for every key reachable from the top level and from every built-in policy's
    settings; a model reached twice (CustomNode in a cluster and in a datacenter) is listed once."""
    found: list[tuple[str, str, FieldInfo]] = []
    seen: set[type[BaseModel]] = set()

    def walk(model: type[BaseModel], path: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for key, field in model.model_fields.items():
            found.append((path, key, field))
            for inner in _models(field.annotation):
                walk(inner, f"{path}.{key}" if path else key)

    walk(Config, "")
    for name in BUILTIN:
        walk(resolve(name).Settings, f"policies[{name}]")
    return found


def variant_tag(field: FieldInfo) -> str | None:
    """A key that allows one value tags a variant of a union (`topology: star`): the reference names it in
    the variant's heading rather than in a row."""
    args = get_args(field.annotation)
    return str(args[0]) if get_origin(field.annotation) is Literal and len(args) == 1 else None


def missing_rows(text: str) -> list[str]:
    """Every reachable key without a row `| `key` | ... | its description |` in `text` (or, for a variant's
    tag, without the heading `key: value`)."""
    rows = set(text.splitlines())
    headings = {m.group(1) for line in rows if (m := HEADING.match(line))}
    missing = []
    for path, key, field in schema_fields():
        tag = variant_tag(field)
        if tag is not None:
            ok = f"{key}: {tag}" in headings
        else:
            ok = any(row.startswith(f"| `{key}` |") and row.endswith(f"| {field.description} |") for row in rows)
        if not ok:
            missing.append(f"{path}.{key}" if path else key)
    return missing


def undescribed_sections(text: str) -> list[str]:
    """Headings whose next non-blank line is a table: a section that does not say what it is."""
    lines = [line for line in text.splitlines() if line.strip()]
    return [
        line
        for line, following in zip(lines, lines[1:])
        if HEADING.match(line) and not line.startswith("# ") and following.startswith("|")
    ]


def test_every_key_of_the_schema_has_a_description() -> None:
    bare = [f"{path}.{key}" for path, key, field in schema_fields() if not (field.description or "").strip()]
    assert not bare, f"add Field(description=...) to: {', '.join(bare)}"


def test_the_walk_reaches_nested_sections_and_policy_settings() -> None:
    """Guards the test itself: were the walk to stop at the top level, every check below would pass."""
    paths = {f"{path}.{key}" for path, key, _ in schema_fields()}
    assert {"workload.sparsity.zipf_s", "simulation.nccl.constants.ll_kb", "cluster.wan.links.rtt_ms"} <= paths
    assert {"faults.departures.leave_step", "policies[zen].partition", "policies[sync_switch].release"} <= paths


def test_the_reference_lists_every_key_with_its_description() -> None:
    missing = missing_rows(render())
    assert not missing, f"docs/config.md lacks (or describes otherwise) these keys: {', '.join(missing)}"


def test_a_reference_without_a_section_fails_naming_its_keys() -> None:
    """What issue 49 found: `workload.sparsity` with its row but no table of its own keys."""
    text = render()
    start = text.index("### `workload.sparsity`")
    without = text[:start] + text[text.index("\n## ", start) :]
    assert "workload.sparsity.embeddings" in missing_rows(without)
    assert "workload.sparsity.zipf_s" in missing_rows(without)
    reworded = text.replace("| bytes of one row id in a list |", "| bytes of one row id |")
    assert "policies[zen].index_bytes" in missing_rows(reworded)


def test_every_section_says_what_it_is() -> None:
    undescribed = undescribed_sections(render())
    assert not undescribed, f"sections without a sentence before their table: {undescribed}"


def test_a_policy_section_with_no_description_fails() -> None:
    """docs/config.md as issue 49 found it: `### `zen`` followed by blank lines and its table."""
    old = "### `zen`\n\n\n\n| key | type | default | meaning |\n| --- | --- | --- | --- |\n"
    assert undescribed_sections(old) == ["### `zen`"]
    assert undescribed_sections(old.replace("\n\n\n\n", "\n\nZen: a sparse all-to-all.\n\n")) == []


def test_policies_without_a_class_docstring_are_described_by_their_module() -> None:
    """zen's class has no docstring; its section quotes its module's first paragraph, not nothing."""
    import policies.zen

    assert resolve("zen").__doc__ is None  # else this test checks nothing
    first = " ".join((policies.zen.__doc__ or "").split("\n\n")[0].split())
    assert f"### `zen`\n\n{first}\n" in render()
