"""What any list of links between named ends can get wrong: an end nobody declared, an end joined to
itself, a pair joined twice (custom topologies' links, WAN links between datacenters)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any


def link_end_problems(
    links: Sequence[Any], known: Collection[str], field: str, unknown: str, itself: str
) -> tuple[list[str], list[tuple[str, str]]]:
    """One line per problem, each naming `field[i]`: ends not in `known` (`unknown`: the message's
    tail, e.g. "unknown node {end!r}; allowed: ..."), a link from an end to itself (`itself`: what a
    link joins), a pair already joined; and the links whose two ends are known and differ."""
    problems: list[str] = []
    edges: list[tuple[str, str]] = []
    pairs: dict[frozenset[str], int] = {}
    for i, link in enumerate(links):
        missing = [end for end in dict.fromkeys((link.a, link.b)) if end not in known]
        problems.extend(f"{field}[{i}]: {unknown.format(end=end)}" for end in missing)
        if link.a == link.b:
            problems.append(f"{field}[{i}]: joins {link.a!r} to itself; {itself}")
            continue
        pair = frozenset((link.a, link.b))
        if pair in pairs:
            problems.append(
                f"{field}[{i}]: {field}[{pairs[pair]}] already joins {link.a!r} and {link.b!r}; merge them into one"
            )
        pairs.setdefault(pair, i)
        if not missing:
            edges.append((link.a, link.b))
    return problems, edges
