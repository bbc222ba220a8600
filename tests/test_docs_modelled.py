"""No page says that something the code models is not modelled (issue 49: docs/physics.md said tree and NVLS
were not, after sim/nccl had modelled both).

The rule, precisely. Pages: README.md and docs/*.md, outside fenced code. A page is cut into clauses: a
paragraph or list item is split after `.`, `;`, `:`, `!` or `?`; a heading is one clause and a table row
one per cell; a parenthesis that makes a negative claim of its own is a clause of its own, and one that
does not belongs to its sentence ("other than ring (tree, NVLS) are not modelled" claims tree and NVLS).
A clause is negative when it says not modelled/modeled, not simulated, not supported, unsupported, or
does not model (with or without "yet", "n't" for "not"). Such a clause contradicts the code when it names,
as a whole word (case aside; `_` written as `_`, a space, a hyphen or nothing), something the code
registers: an NCCL algorithm, protocol or transport, a network model, a GPU, a topology, a zoo model or
a built-in policy. Not a naming of the thing itself, and so allowed:
- a part of it, in the possessive, after at most one qualifier: "NCCL's channel count", "the A100
  40GB's bandwidth" (that part may well be left out);
- a file or link target: `ds_sync.md`, `](ds_sync.md)`;
- the word after "other than", "except", "besides" or "apart from" (the exception to the claim);
- the names that are ordinary words or another thing's name outside code (`simple`, `ideal`, `star`,
  `custom`, and `nccl`, which in prose is the library): these count only inside backticks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import pytest

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

NEGATIVE = re.compile(
    r"(?:\bnot|n't)\s+(?:yet\s+)?(?:modell?ed|simulated|supported)\b|\bunsupported\b|\b(?:does|do)(?:\s+not|n't)\s+model\b",
    re.I,
)
EXCEPTION = re.compile(r"\b(?:other than|except(?: for)?|besides|apart from)\s+$", re.I)
POSSESSIVE = re.compile(r"^(?:[ -][\w.]+)?['’]s\b")
FILE = re.compile(r"^\.(?:md|py|csv|yaml|yml|json|txt)\b")
CODE_ONLY = {"simple", "ideal", "star", "custom", "nccl"}
FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```[^\n]*$", re.S | re.M)
LINK_TARGET = re.compile(r"\]\([^)\s]*\)")


def modelled() -> dict[str, str]:
    """Every registered name the code models -> where it is registered."""
    from policies.registry import BUILTIN
    from sim.catalog.gpus import GPU_NAMES
    from sim.catalog.zoo import MODEL_NAMES
    from sim.config.schema import ClusterConfig, SimulationConfig
    from sim.nccl.transports import ALL_ALGORITHMS, ALL_PROTOCOLS, TRANSPORTS

    topologies = [get_args(m.model_fields["topology"].annotation)[0] for m in get_args(get_args(ClusterConfig)[0])]
    registries = {
        "an NCCL algorithm (sim.nccl.transports.ALL_ALGORITHMS)": ALL_ALGORITHMS,
        "an NCCL protocol (sim.nccl.transports.ALL_PROTOCOLS)": ALL_PROTOCOLS,
        "an NCCL transport (sim.nccl.transports.TRANSPORTS)": TRANSPORTS,
        "a network model (simulation.network_model)": get_args(
            SimulationConfig.model_fields["network_model"].annotation
        ),
        "a GPU (sim.catalog.gpus.GPU_NAMES)": GPU_NAMES,
        "a topology (cluster.topology)": topologies,
        "a zoo model (sim.catalog.zoo.MODEL_NAMES)": MODEL_NAMES,
        "a built-in policy (policies.registry.BUILTIN)": tuple(BUILTIN),
    }
    names: dict[str, str] = {}
    for what, registry in registries.items():
        for name in registry:
            names.setdefault(name.lower(), what)
    return names


def _name_pattern(names: dict[str, str]) -> re.Pattern[str]:
    spelled = [r"[_ \-]?".join(map(re.escape, name.split("_"))) for name in sorted(names, key=len, reverse=True)]
    return re.compile(r"(?<![\w/.-])(" + "|".join(spelled) + r")(?![\w])", re.I)


@dataclass(frozen=True)
class Claim:
    line: int
    name: str
    what: str
    clause: str

    def __str__(self) -> str:
        return f"line {self.line}: says {self.name} ({self.what}) is not modelled: {self.clause!r}"


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(first line, text) of every paragraph, list item, heading and table cell outside fenced code."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "|")):
            current = None
            if stripped.startswith("#"):
                out.append((number, [stripped]))
            elif stripped.startswith("|"):
                out += [(number, [cell]) for cell in stripped.strip("|").split("|")]
            continue
        if current is None or re.match(r"([-*+]|\d+\.)\s", stripped):
            current = []
            out.append((number, current))
        current.append(stripped)
    return [(number, "\n".join(lines)) for number, lines in out]


def _clauses(paragraph: str) -> list[str]:
    """A paragraph's clauses: its sentences, with a parenthesis that says "not modelled" itself cut out."""
    own: list[str] = []

    def cut(match: re.Match[str]) -> str:
        if NEGATIVE.search(match.group(0)):
            own.append(match.group(0)[1:-1])
            return ""
        return match.group(0)

    outer = re.sub(r"\([^()]*\)", cut, paragraph)
    return [part for text in (outer, *own) for part in re.split(r"(?<=[.;:!?])\s+", text)]


def contradictions(text: str, names: dict[str, str] | None = None) -> list[Claim]:
    """Every clause of `text` (a page) that says a modelled thing is not modelled, by the rule above."""
    names = modelled() if names is None else names
    pattern = _name_pattern(names)
    found = []
    for first_line, paragraph in _paragraphs(text):
        lines = paragraph.split("\n")
        for clause in _clauses(LINK_TARGET.sub("]", paragraph)):
            negative = NEGATIVE.search(clause)
            if not negative:
                continue
            spans = [m.span() for m in re.finditer(r"`[^`]*`", clause)]
            for match in pattern.finditer(clause):
                name, after = match.group(1), clause[match.end() :]
                key = re.sub(r"[ \-]", "_", name.lower())
                key = key if key in names else next(n for n in names if n.replace("_", "") == key.replace("_", ""))
                in_code = any(a < match.start() < b for a, b in spans)
                if (
                    POSSESSIVE.match(after)
                    or FILE.match(after)
                    or EXCEPTION.search(clause[: match.start()])
                    or (key in CODE_ONLY and not in_code)
                ):
                    continue
                phrase = negative.group(0).split()[0]
                line = first_line + next((i for i, text in enumerate(lines) if phrase in text), 0)
                found.append(Claim(line, name, names[key], " ".join(clause.split())))
    return found


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_no_page_says_a_modelled_thing_is_not_modelled(page: Path) -> None:
    claims = contradictions(page.read_text())
    assert not claims, f"{page.relative_to(ROOT)}:\n" + "\n".join(map(str, claims))


OLD_PHYSICS = """## What the model leaves out

Packet-level effects (TCP slow start, incast, retransmits), NIC or PCIe contention with the GPU's
own memory traffic, and collective algorithms other than ring (tree, NVLS) are not modelled. Link
capacities are effective goodput.
"""


def test_the_old_physics_page_fails_naming_tree_and_nvls_and_the_line() -> None:
    claims = contradictions(OLD_PHYSICS)
    assert [(c.line, c.name) for c in claims] == [(4, "tree"), (4, "NVLS")]
    assert "NCCL algorithm" in claims[0].what


@pytest.mark.parametrize(
    "sentence, named",
    [
        ("The zen policy is not modelled.", ["zen"]),
        ("NVLS-tree isn't supported.", ["NVLS-tree"]),
        ("Unsupported: LL128 on EFA.", []),  # `:` ends the clause, and the rest is another
        ("LL128 is unsupported over EFA.", ["LL128", "EFA"]),
        ("The simulator does not model H100 hosts.", ["H100"]),
        ("The `ideal` network model is not simulated.", ["ideal"]),
        ("An ideal network is not simulated.", []),  # an ordinary word outside code
        ("NCCL's channel count is not modelled.", []),  # a part of NCCL
        ("The A100 40GB's bandwidth is not modelled.", []),  # a part of a variant
        ("Algorithms other than ring are not modelled.", []),  # the exception to the claim
        ("Details of what is not modelled in [ds_sync.md](ds_sync.md).", []),  # a file
        ("BERT-large (cuDNN's choice is not modelled) is within 5%.", []),  # the parenthesis claims alone
        ("Tree all-reduce is modelled.", []),  # not negative
    ],
)
def test_the_rule(sentence: str, named: list[str]) -> None:
    assert [c.name for c in contradictions(sentence)] == named


def test_a_table_cell_and_a_list_item_are_clauses_of_their_own() -> None:
    text = "| PAT (not modelled) | ring |\n\n- SHARP is not modelled\n- ring runs\n"
    assert contradictions(text) == []
    assert [c.line for c in contradictions("intro\n\n- a\n- tree is not modelled\n")] == [4]
