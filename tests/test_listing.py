"""`syncsim list --verbose` (sim/cli/listing.py): a line per policy, model and GPU."""

from __future__ import annotations

import pytest

from policies.base import Policy
from sim.catalog.gpus import GPU_NAMES
from sim.catalog.zoo import MODEL_NAMES
from sim.cli import main
from sim.cli.listing import first_sentence, policy_line


class Described(Policy):
    """The class's own text."""

    description = "What it does. More."


class Documented(Policy):
    """Averages every
    second step. Then more."""


def test_a_policy_line_is_its_description_else_the_first_sentence_of_its_docstring() -> None:
    assert policy_line(Described, builtin=False) == "What it does."
    assert policy_line(Documented, builtin=False) == "Averages every second step."
    # a built-in's module holds one scheme: its module's docstring speaks first
    assert policy_line(Documented, builtin=True) == first_sentence(__doc__)


def test_a_long_sentence_is_cut() -> None:
    line = first_sentence("word " * 40 + ".")
    assert len(line) == 110 and line.endswith("...")


def test_list_verbose_gives_every_name_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--verbose"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    for name in ("ring", "ds_sync", *MODEL_NAMES, *GPU_NAMES):
        assert name in lines and len(lines[name].split()) > 2, name
    assert "25.6M parameters; a sample: one 224x224 RGB image; He et al. 2016" in lines["resnet50"]
    assert "80 GB at 2039 GB/s" in lines["A100"]
    assert lines["ring"].split(None, 1)[1].startswith("Ring all-reduce of every gradient bucket")
    assert main(["list", "-v"]) == 0 and capsys.readouterr().out == out
