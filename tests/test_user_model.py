"""A user's own module for `syncsim profile module:factory`: the file found as plug-ins are (and the
refusals), its layers in forward order of first use, and the profile measured from it."""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sim.errors import UsageError

torch = pytest.importorskip("torch")

from real.model_input import InputSpec  # noqa: E402
from real.profiler import measure_module_profile  # noqa: E402
from real.user_model import ROOT_LAYER, build_module, first_calls, module_layout  # noqa: E402

# Every kind of parameter owner: the top module's own tensor, a layer inside a container, a frozen layer
# (no gradient), a layer whose weight another module's code reads without calling it, declared before a
# called one, and a head whose weight is tied to the embedding's.
EDGES = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(4))
        self.embed = nn.Embedding(10, 4)
        self.block = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
        self.frozen = nn.Linear(3, 3)
        self.frozen.requires_grad_(False)
        self.unused = nn.Linear(3, 4)
        self.out = nn.Linear(4, 10)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        h = self.frozen(self.block(self.embed(ids) * self.scale))
        return self.out(h @ self.unused.weight.t() + self.unused.bias)


def build():
    return Net()


VALUE = 3


def not_a_module():
    return 3


def broken():
    raise RuntimeError("boom")


def frozen():
    return nn.Linear(2, 2).requires_grad_(False)
"""


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A folder holding the module files; the modules loaded from it leave sys.modules after the test."""
    before = set(sys.modules)
    (tmp_path / "i47_edges.py").write_text(textwrap.dedent(EDGES))
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("i47_"):
            del sys.modules[name]


def test_layers_are_the_parameter_owners_in_forward_order_then_the_uncalled(folder: Path) -> None:
    module = build_module("i47_edges:build", folder)
    called, out = first_calls(module, lambda: module(torch.zeros(2, 5, dtype=torch.int64)), "i47_edges:build")
    assert out.shape == (2, 5, 10)
    assert module_layout(module, called) == [
        (ROOT_LAYER, ["scale"]),
        ("embed", ["embed.weight"]),  # the head's tied weight is the embedding's: listed once, here
        ("block.0", ["block.0.weight", "block.0.bias"]),
        ("out", ["out.bias"]),
        ("unused", ["unused.weight", "unused.bias"]),  # never called: after the called, with no forward span
    ]  # and no `frozen`: its parameters get no gradient


def test_a_module_profile_records_each_layers_shapes_and_spans(folder: Path) -> None:
    ids = InputSpec("int64", (5,), 10)
    profile = measure_module_profile("i47_edges:build", [ids], 3, classes=10, warmup=1, repeats=2, folder=folder)
    assert profile.model == "i47_edges:build" and profile.batch_size == 3 and profile.shaped
    shapes = {t.name: t.shapes for t in profile.layers}
    assert shapes == {
        ROOT_LAYER: ((4,),),
        "embed": ((10, 4),),
        "block.0": ((3, 4), (3,)),
        "out": ((10,),),
        "unused": ((4, 3), (4,)),
    }
    # every trainable value once: 4 + 40 + 15 + 10 + 16 (the frozen 12 and the tied 40 are not counted again)
    assert sum(t.params for t in profile.layers) == 4 + 10 * 4 + (3 * 4 + 3) + 10 + (4 * 3 + 4)
    forward = {t.name: t.forward_s for t in profile.layers}
    assert forward["unused"] == 0 and all(forward[name] > 0 for name in (ROOT_LAYER, "embed", "block.0", "out"))
    assert all(t.backward_s > 0 for t in profile.layers)  # each layer's gradients are ready at their own time
    assert profile.notes["input"] == ["int64:5:vocab=10"]
    assert profile.notes["loss"] == "cross-entropy over 10 classes, uniform targets"


def test_without_classes_the_loss_is_the_outputs_mean(folder: Path) -> None:
    ids = InputSpec("int64", (5,), 10)
    profile = measure_module_profile("i47_edges:build", [ids], 2, warmup=0, repeats=1, folder=folder)
    assert profile.notes["loss"] == "mean of the output" and len(profile.layers) == 5


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("i47_missing:build", "i47_missing:build: no file i47_missing.py in "),
        ("i47_edges:nope", "i47_edges:nope: i47_edges.py defines no 'nope'"),
        ("i47_edges:VALUE", "'VALUE' is not callable; expected a function or class returning an nn.Module"),
        ("i47_edges:not_a_module", "i47_edges:not_a_module: returned a int, not a torch.nn.Module"),
        ("i47_edges:broken", "i47_edges:broken: calling it raised RuntimeError: boom"),
        ("i47_edges:frozen", "the module has no trainable parameters: nothing to synchronize"),
        ("i47_edges.py:build", "is not a file's name"),
        ("json:build", "would shadow the standard library's 'json'"),
    ],
)
def test_a_target_that_builds_no_trainable_module_is_one_line_naming_it(
    folder: Path, target: str, message: str
) -> None:
    with pytest.raises(UsageError) as error:
        build_module(target, folder)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_file_that_would_shadow_a_module_of_another_file_is_refused(folder: Path) -> None:
    (folder / "yaml.py").write_text("def build(): ...\n")  # yaml is imported (installed) already
    with pytest.raises(UsageError, match="yaml.py would shadow the module 'yaml' already imported; rename the file"):
        build_module("yaml:build", folder)
    if "pip" not in sys.modules:  # installed, not imported: found on the path, elsewhere
        (folder / "pip.py").write_text("def build(): ...\n")
        with pytest.raises(UsageError, match="pip.py would shadow the installed module 'pip'"):
            build_module("pip:build", folder)
        assert "pip" not in sys.modules


def test_a_file_whose_own_code_fails_is_one_line_and_not_kept(folder: Path) -> None:
    (folder / "i47_bad.py").write_text("import torch\nraise ValueError('no GPU here')\n")
    with pytest.raises(UsageError, match="^i47_bad:build: running i47_bad.py raised ValueError: no GPU here$"):
        build_module("i47_bad:build", folder)
    assert "i47_bad" not in sys.modules  # a corrected file is run afresh


def test_a_forward_that_refuses_the_input_or_an_output_without_the_classes_is_one_line(folder: Path) -> None:
    wrong = InputSpec("float32", (5,))  # an embedding takes ids
    with pytest.raises(UsageError, match="^i47_edges:build: forward on the --input batch raised RuntimeError: "):
        measure_module_profile("i47_edges:build", [wrong], 2, warmup=0, repeats=1, folder=folder)
    ids = InputSpec("int64", (5,), 10)
    with pytest.raises(UsageError, match=r"^--classes: 7, but the output of i47_edges:build is shaped \(2, 5, 10\)"):
        measure_module_profile("i47_edges:build", [ids], 2, classes=7, warmup=0, repeats=1, folder=folder)


def test_the_layers_spans_tile_the_step(folder: Path) -> None:
    profile = measure_module_profile(
        "i47_edges:build", [InputSpec("int64", (5,), 10)], 2, warmup=0, repeats=1, folder=folder
    )
    # one repeat: the step and every span are the same iteration, and the spans tile it
    assert profile.step_s is not None
    assert math.isclose(profile.forward_s + profile.backward_s, profile.step_s, rel_tol=1e-9)
