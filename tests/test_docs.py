"""The examples in the docs run as a reader would paste them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from sim.api import prepare
from sim.config import parse_config

ROOT = Path(__file__).parent.parent
PYTHON = re.compile(r"```python\n(.*?)```", re.S)
YAML = re.compile(r"```yaml\n(.*?)```", re.S)


@pytest.fixture(autouse=True)
def registrations_end_with_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's example may `register` a policy (docs/policies.md's local_sgd); it must not outlive the
    test, or later tests in the same process (an xdist worker) see a policy list other processes lack."""
    import policies.registry as registry

    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))


def run_blocks(page: Path) -> None:
    blocks = PYTHON.findall(page.read_text())
    assert blocks, f"{page.name} has no python examples"
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for code in blocks:
        exec(compile(code, str(page), "exec"), namespace)


@pytest.mark.parametrize("page", ["policies.md", "zoo.md", "sparse.md"])
def test_docs_page_examples_run(page: str) -> None:
    run_blocks(ROOT / "docs" / page)


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    run_blocks(ROOT / "README.md")
    assert (tmp_path / "results" / "quickstart" / "summary.csv").exists()


def test_readme_config_tour_is_valid() -> None:
    (tour,) = [b for b in YAML.findall((ROOT / "README.md").read_text()) if "policies:" in b]
    cluster, _ = prepare(parse_config(yaml.safe_load(tour)))
    assert cluster.world_size == 16


def test_wan_page_config_is_valid() -> None:
    (example,) = [b for b in YAML.findall((ROOT / "docs" / "wan.md").read_text()) if "policies:" in b]
    cluster, _ = prepare(parse_config(yaml.safe_load(example)))
    assert cluster.world_size == 2 * 8 + 2 * 2 * 8
    assert [(w.a, w.b, w.rtt, w.flow_cap) for w in cluster.wan] == [("east", "west", 0.04, 4 * 16e6 / 0.04)]


def test_config_reference_is_current() -> None:
    from sim.config.reference import render

    assert (ROOT / "docs" / "config.md").read_text() == render(), "run: python -m sim.config.reference > docs/config.md"


def test_readme_validation_figures_are_the_stored_runs() -> None:
    """The README quotes the bundled 2x2 validation (its validation.csv), names it and the command that
    measures it again: no figure from a run whose tables were not kept."""
    import pandas as pd

    stored = "docs/validation/validate_2x2/validation.csv"
    table = pd.read_csv(ROOT / stored).set_index("policy")["error"].abs() * 100
    readme = " ".join((ROOT / "README.md").read_text().split())
    sync = table.drop("asp").max()
    assert f"[{stored}]({stored}): every synchronous scheme within {sync:.1f}%" in readme
    assert f"ASP's throughput within {table['asp']:.1f}%" in readme
    assert "`syncsim validate configs/validate_2x2.yaml --out results/validate_2x2` measures it again" in readme


def test_the_plug_in_variant_on_the_policies_page_is_the_example_file() -> None:
    """docs/policies.md shows examples/outer_adam_diloco.py whole; the two must not drift apart."""
    shown = PYTHON.findall((ROOT / "docs" / "policies.md").read_text())
    assert (ROOT / "examples" / "outer_adam_diloco.py").read_text() in shown


@pytest.mark.slow
def test_the_plug_in_variant_runs_on_gloo_and_ends_on_numerics_modes_parameters(tmp_path: Path) -> None:
    """docs/policies.md: `syncsim real examples/outer_adam_diloco.yaml` (4 gloo processes, the plug-in file beside
    the config) ends with numerics mode's parameters and global models, for the plug-in and the built-in."""
    pytest.importorskip("sklearn")
    import numpy as np

    from real.launch import launch
    from sim.api import simulate

    config = ROOT / "examples" / "outer_adam_diloco.yaml"
    outcome = launch(config, tmp_path / "out", nproc=4, timeout_s=90)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    runs = simulate(config).runs
    assert [run.label for run in runs] == ["outer_adam_diloco", "diloco"]  # a plug-in is labelled by its class's name
    for run in runs:
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(real[f"{run.label}/consensus"], run.consensus, rtol=1e-5, atol=1e-6)
    plug_in, built_in = (real[f"{run.label}/consensus"] for run in runs)
    assert not np.allclose(plug_in, built_in, atol=1e-4)  # the outer optimizers differ


def test_profiles_page_takes_your_own_model_to_1024_gpus_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/profiles.md, "Your own model": its shell commands run as written in a copy of examples/, and the
    config it shows is examples/my_model_1024.yaml."""
    import shlex
    import sys

    import pandas as pd

    pytest.importorskip("torch")
    from sim.cli import main

    section = (ROOT / "docs" / "profiles.md").read_text().split("## Your own model", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", section, re.S)[0]
    assert (ROOT / "examples" / "my_model_1024.yaml").read_text() in YAML.findall(section)
    shutil.copytree(ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__", "results"))
    monkeypatch.chdir(tmp_path)
    try:
        for line in commands.splitlines():
            words = shlex.split(line)
            if words[0] == "cd":
                monkeypatch.chdir(Path.cwd() / words[1])
            else:
                assert words[0] == "syncsim" and main(words[1:]) == 0, line
    finally:  # loaded from the copy: another test may load another copy
        sys.modules.pop("my_model", None)
    summary = pd.read_csv(tmp_path / "examples" / "results" / "my_model_1024" / "summary.csv")
    assert summary["status"].tolist() == ["ok", "ok"]
