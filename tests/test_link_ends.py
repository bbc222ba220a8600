"""The link checks custom topologies and WAN links share (sim/config/link_ends.py)."""

from __future__ import annotations

from types import SimpleNamespace

from sim.config.link_ends import link_end_problems


def _links(*pairs: tuple[str, str]) -> list[SimpleNamespace]:
    return [SimpleNamespace(a=a, b=b) for a, b in pairs]


def test_every_problem_is_named_by_index_and_only_sound_links_are_edges() -> None:
    links = _links(("x", "y"), ("y", "x"), ("x", "x"), ("x", "z"), ("q", "q"))
    problems, edges = link_end_problems(links, {"x", "y"}, "links", "unknown end {end!r}", "two ends")
    assert problems == [
        "links[1]: links[0] already joins 'y' and 'x'; merge them into one",
        "links[2]: joins 'x' to itself; two ends",
        "links[3]: unknown end 'z'",
        "links[4]: unknown end 'q'",  # named once, though it is both ends
        "links[4]: joins 'q' to itself; two ends",
    ]
    assert edges == [("x", "y"), ("y", "x")]  # the repeated pair is still an edge: its problem is named
