"""YAML 1.2, as docs/config.md promises, for every config, base, sweep, profile and `--set` value read.

PyYAML implements YAML 1.1, whose plain scalars mean other things than YAML 1.2's, silently:
`hosts: 010` is 8 hosts (1.1 octal; 1.2 octal is `0o10`), `iterations: 1:30` is 90 (1.1 base 60),
`trace: off` is false, `1_000` and `0b11` are numbers and `2024-01-01` a date, while `1e3` is text.
This module reads plain scalars by YAML 1.2's core schema instead: `null`/`~`/empty, `true`/`false`,
decimal, `0o` and `0x` integers, and floats (with `.inf` and `.nan`); anything else is text.

Why read 1.2 rather than refuse 1.1's forms: the docs promise 1.2, and a reader that applies the 1.2
spec's core schema reads a config the same way, so the file means what the spec says. A 1.1 form does
not run as a surprise either: it becomes text, which the strict schema refuses by the field's name
(`iterations: ... (got '1:30')`, with a note that it is a YAML 1.1 form; `sim.config.messages`), where
1.1 would have run 90 iterations. Only `010` reads as another number than before: 10, as 1.2 says.

Tags are the core schema's only (`!!null !!bool !!int !!float !!str !!seq !!map`), each checked, so
`!!int abc` is an error naming its field, never a Python exception; 1.1's `!!timestamp`, `!!binary`,
`!!set`, `!!omap` and Python's tags are refused. Merge keys (`<<`) are not YAML 1.2, but configs use
them and most readers keep 1.1's merge type, so they are kept with its rules (yaml.org/type/merge.html):
a key written in the mapping wins over a merged one, and of a list of merged mappings the first that
has a key wins (PyYAML 6.0.4's own merge lets the last win). Merged keys count towards `MAX_VALUES`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_VALUES = 1_000_000  # values after expanding aliases and merges: a billion-laughs document stops here

NULL, BOOL, INT, FLOAT, STR = (f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "str"))
SEQ, MAP, MERGE = "tag:yaml.org,2002:seq", "tag:yaml.org,2002:map", "tag:yaml.org,2002:merge"

# YAML 1.2.2 section 10.3.2 (the core schema), and the merge key
_NULL = re.compile(r"(?:~|null|Null|NULL|)\Z")
_BOOL = re.compile(r"(?:true|True|TRUE|false|False|FALSE)\Z")
_INT = re.compile(r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)\Z")
_FLOAT = re.compile(
    r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))\Z"
)
_MERGE = re.compile(r"<<\Z")
CORE = (
    (NULL, _NULL, ["~", "n", "N", ""]),
    (BOOL, _BOOL, list("tTfF")),
    (INT, _INT, list("-+0123456789")),
    (FLOAT, _FLOAT, list("-+.0123456789")),
    (MERGE, _MERGE, ["<"]),
)


class FieldError(yaml.YAMLError):
    """A value the core schema cannot construct, with the path of the field it is at (`cluster.hosts`)."""

    def __init__(self, field: str, problem: str, line: Optional[int] = None) -> None:
        self.field, self.problem, self.line = field, problem, line
        super().__init__(f"{field}: {problem}" + (f" (line {line})" if line else ""))


class _NodeError(yaml.YAMLError):
    def __init__(self, node: Node, problem: str) -> None:
        self.node, self.problem = node, problem
        super().__init__(problem)


class Resolver12(yaml.resolver.BaseResolver):
    """Plain scalars typed by YAML 1.2's core schema (the table is this class's own, not PyYAML's)."""

    yaml_implicit_resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}


for _tag, _pattern, _first in CORE:
    Resolver12.add_implicit_resolver(_tag, _pattern, _first)


class Constructor12(yaml.constructor.SafeConstructor):
    """The core schema's types, each checked; merge keys by their rules; no other tag."""

    yaml_constructors: dict[Any, Any] = {}
    _root: Node
    _merged: int
    _merging: set[int]

    def construct_document(self, node: Node) -> Any:
        self._root, self._merged, self._merging = node, 0, set()
        return super().construct_document(node)

    def construct_mapping(self, node: Node, deep: bool = False) -> dict[Any, Any]:  # type: ignore[override]
        if not isinstance(node, MappingNode):
            raise _NodeError(node, f"expected a mapping, found a {node.id}")
        merged: dict[Any, Any] = {}
        own: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE:
                for source in self._merge_sources(value_node):
                    for key, value in self._merge_one(source, deep).items():
                        merged.setdefault(key, value)  # of a list of mappings, the first that has a key wins
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                given = key in own
            except TypeError:
                raise _NodeError(key_node, "a key must be a plain value, not a list or a mapping") from None
            if given:
                raise _NodeError(key_node, f"key {key!r} is given twice in one mapping")
            own[key] = self.construct_object(value_node, deep=deep)
        return {**merged, **own}  # a key written in the mapping wins over a merged one

    def _merge_sources(self, node: Node) -> list[Node]:
        if isinstance(node, MappingNode):
            return [node]
        if isinstance(node, SequenceNode) and all(isinstance(item, MappingNode) for item in node.value):
            return list(node.value)
        raise _NodeError(node, "`<<` merges a mapping or a list of mappings")

    def _merge_one(self, source: Node, deep: bool) -> dict[Any, Any]:
        if id(source) in self._merging:
            raise _NodeError(source, "a mapping merges itself (through `<<` and an alias)")
        self._merging.add(id(source))
        try:
            keys = self.construct_mapping(source, deep=deep)
        finally:
            self._merging.discard(id(source))
        self._merged += len(keys)
        if self._merged > MAX_VALUES:
            raise _NodeError(source, f"more than {MAX_VALUES:,} keys merged by `<<` (a merge bomb?)")
        return keys

    def construct_undefined(self, node: Node) -> Any:
        raise _NodeError(
            node,
            f"the tag {_shown(node.tag)} is not plain data; allowed: !!null, !!bool, !!int, !!float, !!str, "
            "!!seq, !!map",
        )


def _shown(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


def _scalar(node: Node, loader: Constructor12) -> str:
    if not isinstance(node, ScalarNode):
        raise _NodeError(node, f"the tag {_shown(node.tag)} needs a scalar, found a {node.id}")
    return str(loader.construct_scalar(node))


def _null(loader: Constructor12, node: Node) -> None:
    if not _NULL.match(text := _scalar(node, loader)):
        raise _NodeError(node, f"!!null {text!r}: YAML 1.2's null is null, ~ or nothing")


def _bool(loader: Constructor12, node: Node) -> bool:
    if not _BOOL.match(text := _scalar(node, loader)):
        raise _NodeError(node, f"!!bool {text!r}: YAML 1.2's booleans are true and false")
    return text.lower() == "true"


def _int(loader: Constructor12, node: Node) -> int:
    text = _scalar(node, loader)
    if not _INT.match(text):
        raise _NodeError(node, f"!!int {text!r} is not a YAML 1.2 integer (10, 0o12 or 0xA)")
    try:
        return int(text[2:], 8 if text[1] == "o" else 16) if text[:2] in ("0o", "0x") else int(text)
    except ValueError:  # Python's cap on the digits of an int read from text (4300)
        raise _NodeError(node, f"an integer of {len(text):,} digits; no config value has that many") from None


def _float(loader: Constructor12, node: Node) -> float:
    text = _scalar(node, loader)
    if not _FLOAT.match(text):
        raise _NodeError(node, f"!!float {text!r} is not a YAML 1.2 number (1.5, 1e3, .inf or .nan)")
    if text.lstrip("+-").lower() in (".inf", ".nan"):
        return -math.inf if text[0] == "-" else (math.inf if "inf" in text.lower() else math.nan)
    return float(text)


def _text(loader: Constructor12, node: Node) -> str:
    return _scalar(node, loader)


for _tag, _make in (
    (NULL, _null),
    (BOOL, _bool),
    (INT, _int),
    (FLOAT, _float),
    (STR, _text),
    (MERGE, _text),  # `<<` anywhere but as a key is the text "<<"
    (SEQ, yaml.constructor.SafeConstructor.construct_yaml_seq),
    (MAP, yaml.constructor.SafeConstructor.construct_yaml_map),
    (None, Constructor12.construct_undefined),
):
    Constructor12.add_constructor(_tag, _make)


class Loader12(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer,
               Constructor12, Resolver12):  # fmt: skip
    """The pure-Python parser (deep nesting ends as a RecursionError, not a crash) with YAML 1.2's types."""

    def __init__(self, stream: Any) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        yaml.composer.Composer.__init__(self)
        Constructor12.__init__(self)
        Resolver12.__init__(self)


if yaml.__with_libyaml__:

    class FastLoader12(yaml.cyaml.CParser, Constructor12, Resolver12):  # type: ignore[misc]
        """libyaml's parser (ten times faster; it refuses nesting over 1000 levels itself), YAML 1.2's types:
        for machine-written files that may be large (profiles)."""

        def __init__(self, stream: Any) -> None:
            yaml.cyaml.CParser.__init__(self, stream)
            Constructor12.__init__(self)
            Resolver12.__init__(self)

else:  # pragma: no cover - PyYAML wheels ship libyaml
    FastLoader12 = Loader12  # type: ignore[misc]


def load(text: str | bytes, fast: bool = False) -> Any:
    """The plain data of one YAML 1.2 document; a `FieldError` naming the field for a value the core
    schema cannot construct, another `yaml.YAMLError` for text that is not YAML."""
    loader = (FastLoader12 if fast else Loader12)(text)
    try:
        return loader.get_single_data()
    except _NodeError as exc:
        mark = exc.node.start_mark
        raise FieldError(path_of(loader._root, exc.node), exc.problem, mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()


def path_of(root: Node, target: Node) -> str:
    """Where `target` sits under `root`, as a config path (`policies[0].name`); `config` for the root or
    a node not found (each node is visited once, so aliases cannot make this loop)."""
    stack: list[tuple[Node, str, bool]] = [(root, "", False)]  # (node, its path, merged into that path)
    seen: set[int] = set()
    while stack:
        node, path, merged = stack.pop()
        if node is target:
            return path or "config"
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, MappingNode):
            for key, value in node.value:
                if key.tag == MERGE:  # what `<<` merges belongs to the mapping that holds it
                    stack += [(value, path, True), (key, path, False)]
                    continue
                name = key.value if isinstance(key, ScalarNode) else "?"
                here = f"{path}.{name}" if path else str(name)
                stack += [(value, here, False), (key, here, False)]
        elif isinstance(node, SequenceNode):
            stack += [(item, path if merged else f"{path}[{i}]", False) for i, item in enumerate(node.value)]
    return "config"


_RESOLVER = Resolver12()
_YAML11 = yaml.resolver.Resolver()


def yaml11_only(value: Any) -> Optional[str]:
    """What YAML 1.1 (PyYAML, older tools) would read the plain text `value` as where YAML 1.2 reads it
    as text (`1:30`: 'a number', `yes`: 'a boolean'), else None: for a message saying why it is text."""
    if not isinstance(value, str) or _RESOLVER.resolve(ScalarNode, value, (True, False)) != STR:
        return None
    kinds = {INT: "a number", FLOAT: "a number", BOOL: "a boolean", "tag:yaml.org,2002:timestamp": "a date"}
    return kinds.get(_YAML11.resolve(ScalarNode, value, (True, False)))


class Dumper12(yaml.SafeDumper):
    """`yaml.safe_dump` that also quotes text YAML 1.2 would read as another type (`0o10`), so what it
    writes reads back the same under YAML 1.2 and under PyYAML's 1.1."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        tag = super().resolve(kind, value, implicit)
        if tag == STR and kind is ScalarNode and implicit[0]:
            return _RESOLVER.resolve(kind, value, implicit)
        return tag


def dump(data: Any, **options: Any) -> str:
    """`data` as YAML that both 1.1 and 1.2 readers read back as it is."""
    return yaml.dump(data, Dumper=Dumper12, **options)
