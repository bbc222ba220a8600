"""YAML 1.2's core schema as syncsim reads it: plain scalars typed by the 1.2 table (not PyYAML's 1.1
one), only the core tags, each checked, and merge keys by the merge type's rules. Expected values are
the YAML 1.2.2 spec's (section 10.3.2) and yaml.org/type/merge.html's, worked by hand."""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from sim.config.yaml12 import MAX_VALUES, FieldError, dump, load, yaml11_only


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("010", 10),  # 1.1: 8 (octal)
        ("0o10", 8),  # 1.1: text
        ("0x1F", 31),
        ("+5", 5),
        ("-0", 0),
        ("1:30", "1:30"),  # 1.1: 90 (base 60)
        ("1_000", "1_000"),  # 1.1: 1000
        ("0b11", "0b11"),  # 1.1: 3
        ("yes", "yes"),  # 1.1: true
        ("No", "No"),
        ("on", "on"),
        ("off", "off"),
        ("y", "y"),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("1e3", 1000.0),  # 1.1: text
        ("1.", 1.0),
        (".5", 0.5),
        ("-1.5e-3", -1.5e-3),
        ("-.inf", -math.inf),
        ("+.Inf", math.inf),
        ("~", None),
        ("null", None),
        ("NULL", None),
        ("2024-01-01", "2024-01-01"),  # 1.1: a date
        ("=", "="),  # 1.1: the `value` key type
        ("0o19", "0o19"),  # not octal digits: text
    ],
)
def test_plain_scalars_are_typed_by_yaml_1_2(text: str, value: Any) -> None:
    got = load(f"k: {text}\n")["k"]
    assert got == value and type(got) is type(value)


def test_nan_and_an_empty_value() -> None:
    assert math.isnan(load("k: .NaN")["k"]) and load("k:\n")["k"] is None


def test_the_fast_loader_reads_the_same_types() -> None:
    text = "a: 010\nb: 1:30\nc: yes\nd: 0o10\ne: [1e3, ~, true]\n"
    assert load(text, fast=True) == load(text) == {"a": 10, "b": "1:30", "c": "yes", "d": 8, "e": [1000.0, None, True]}


def test_of_merged_mappings_the_first_wins_and_a_written_key_wins_over_all() -> None:
    text = "a: &a {hosts: 2, x: 1}\nb: &b {hosts: 4, y: 2}\nc: {<<: [*a, *b]}\nd: {<<: [*b, *a], hosts: 9}\n"
    data = load(text)
    assert data["c"] == {"hosts": 2, "x": 1, "y": 2}
    assert data["d"] == {"hosts": 9, "x": 1, "y": 2}
    assert load("m: {<<: [{hosts: 2}, {hosts: 4}]}")["m"] == {"hosts": 2}  # the case (PyYAML 6.0.4: 4)


def test_merges_nest() -> None:
    data = load("a: &a {k: 1, j: 1}\nb: &b {<<: *a, k: 2}\nc: {<<: *b, i: 3}\n")
    assert data["c"] == {"k": 2, "j": 1, "i": 3}


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ("a: {b: [1, !!int abc]}", "a.b[1]", "!!int 'abc' is not a YAML 1.2 integer"),
        ("a: !!int 1:30", "a", "!!int '1:30' is not a YAML 1.2 integer"),
        ("a: !!float x", "a", "!!float 'x' is not a YAML 1.2 number"),
        ("a: !!bool maybe", "a", "!!bool 'maybe'"),
        ("a: !!null x", "a", "!!null 'x'"),
        ("a: {t: !!timestamp 2001-12-14}", "a.t", "the tag !!timestamp is not plain data"),
        ("a: !!binary AAAA", "a", "the tag !!binary is not plain data"),
        ("a: !!set {x}", "a", "the tag !!set is not plain data"),
        ("a: !!omap [{x: 1}]", "a", "the tag !!omap is not plain data"),
        ("a: !!python/name:os.system", "a", "the tag !!python/name:os.system is not plain data"),
        ("a: !local x", "a", "the tag !local is not plain data"),
        ("a: !!int [1]", "a", "the tag !!int needs a scalar"),
        ("a: {b: 1, b: 2}", "a.b", "key 'b' is given twice in one mapping"),
        ("a: {[1]: 2}", "a.?", "a key must be a plain value"),
        ("a: {<<: 3}", "a", "`<<` merges a mapping or a list of mappings"),
        ("a: {<<: [{x: 1}, 2]}", "a", "`<<` merges a mapping or a list of mappings"),
        ("a: {<<: [{x: !!int y}]}", "a.x", "!!int 'y' is not a YAML 1.2 integer"),
        ("a: &a {<<: *a}", "a", "a mapping merges itself"),
        ("a: !!int " + "1" * 5000, "a", "an integer of 5,000 digits"),
    ],
)
def test_a_value_the_core_schema_cannot_build_names_its_field(text: str, field: str, problem: str) -> None:
    for fast in (False, True):
        with pytest.raises(FieldError) as info:
            load(text, fast=fast)
        assert info.value.field == field and problem in info.value.problem, info.value
        assert info.value.line == 1


def test_merges_count_towards_the_value_cap() -> None:
    # level i merges level i-1 and adds a key: i keys merged at level i, n(n-1)/2 in all (1.1 million here)
    n = 1500
    lines = ["k0: &k0 {x0: 0}"] + [f"k{i}: &k{i} {{<<: *k{i - 1}, x{i}: {i}}}" for i in range(1, n)]
    assert n * (n - 1) // 2 > MAX_VALUES
    with pytest.raises(FieldError, match="keys merged by `<<`"):
        load("\n".join(lines))


@pytest.mark.parametrize("text", ["0o10", "yes", "010", "1:30", "1e3", "true", "null", "<<", "1_000", "2024-01-01"])
def test_dump_writes_text_that_both_yaml_versions_read_back_as_text(text: str) -> None:
    written = dump({"k": text})
    assert load(written) == {"k": text}
    assert yaml.safe_load(written) == {"k": text}


def test_what_only_yaml_1_1_reads_as_another_type() -> None:
    assert yaml11_only("1:30") == "a number" and yaml11_only("1_000") == "a number"
    assert yaml11_only("yes") == "a boolean" and yaml11_only("off") == "a boolean"
    assert yaml11_only("2024-01-01") == "a date"
    assert yaml11_only("4") is None  # a number in both: quoted on purpose
    assert yaml11_only("abc") is None and yaml11_only(4) is None
