"""The `syncsim` command line as one CLI: `--set` on every command that reads a config, applied as `run`
applies it; `--nproc` defaulting to the cluster's GPUs; `--version`; argument errors in one line,
labelled as such, exit 2."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.cli import main
from sim.cli.common import version
from sim.cli.main import build_parser

ROOT = Path(__file__).parent.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
REAL = ROOT / "configs" / "real_2x2_digits.yaml"
SEARCH = ROOT / "configs" / "sync_switch_search_digits.yaml"


def one_argument_error(err: str, command: str, flag: str) -> None:
    """`err` is one line: `syncsim COMMAND: argument error: FLAG...`, no usage dump, no config blamed."""
    assert err.count("\n") == 1, err
    assert err.startswith(f"syncsim {command}: argument error: {flag}"), err
    assert "usage:" not in err and "config error" not in err and "Traceback" not in err


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == f"syncsim {importlib.metadata.version('syncsim')}\n"


def test_version_falls_back_to_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)  # a checkout run without installing it
    assert (
        version()
        == "0.1.0"
        == next(
            line.split('"')[1]
            for line in (ROOT / "pyproject.toml").read_text().splitlines()
            if line.startswith("version")
        )
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", str(QUICKSTART)],
        ["check", str(QUICKSTART)],
        ["sweep", str(QUICKSTART)],
        ["real", str(REAL)],
        ["calibrate", str(REAL), "--out", "c.yaml"],
        ["validate", str(REAL), "--out", "v"],
        ["search", str(SEARCH), "--out", "s"],
        ["emulate", "up", str(REAL)],
        ["emulate", "down", str(REAL)],
    ],
    ids=lambda argv: " ".join(argv[:2]) if argv[0] == "emulate" else argv[0],
)
def test_every_command_that_reads_a_config_takes_set(argv: list[str]) -> None:
    from sim.cli.main import build_parser

    args = build_parser().parse_args([*argv, "--set", "iterations=2", "--set", "cluster.nic_gbps=1"])
    assert args.set == ["iterations=2", "cluster.nic_gbps=1"]


@pytest.mark.parametrize("command", ["run", "check", "sweep", "real", "calibrate", "validate", "search"])
def test_a_malformed_set_is_one_argument_error(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import real.launch

    monkeypatch.setattr(real.launch, "launch", lambda *a, **k: pytest.fail("launched despite a bad --set"))
    config = {"search": SEARCH, "real": REAL, "calibrate": REAL, "validate": REAL}.get(command, QUICKSTART)
    out = [] if command in ("check",) else ["--out", str(tmp_path / "out")]
    assert main([command, str(config), *out, "--set", "iterations"]) == 2
    one_argument_error(capsys.readouterr().err, command, "--set 'iterations': write KEY=VALUE")
    assert main([command, str(config), *out, "--set", "policies[9].name=ring"]) == 2
    one_argument_error(capsys.readouterr().err, command, "--set policies[9].name: policies has")


def test_real_applies_set_and_defaults_nproc_to_the_clusters_gpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    import real.launch
    import real.results

    launched: dict[str, Any] = {}

    def fake_launch(config_path: Path, out: Path, nproc: Any = None, *args: Any, **kwargs: Any) -> Any:
        launched.update(kwargs, nproc=nproc)
        return real.launch.Outcome(codes={0: 0})

    monkeypatch.setattr(real.launch, "launch", fake_launch)
    monkeypatch.setattr(real.results, "print_real_results", lambda out: None)
    # 4 racks of 1 host x 2 GPUs: 8 workers, so the default follows the overridden cluster
    argv = ["real", str(REAL), "--out", str(tmp_path / "r"), "--set", "cluster.racks=4", "--set", "iterations=5"]
    assert main(argv) == 0
    assert launched["overrides"] == ["cluster.racks=4", "iterations=5"] and launched["nproc"] == 8
    assert "starting 8 workers" in capsys.readouterr().err
    assert main([*argv, "--nproc", "8"]) == 0  # still accepted when it agrees
    capsys.readouterr()
    assert main([*argv, "--nproc", "4"]) == 2  # a mismatch: one line naming --nproc, nothing started
    one_argument_error(capsys.readouterr().err, "real", "--nproc: the config's cluster has 8 GPUs")


def test_calibrate_and_validate_apply_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    import real.launch
    import real.validate

    seen: dict[str, Any] = {}

    def fake_launch(config_path: Path, out: Path, *args: Any, **kwargs: Any) -> Any:
        seen["calibrate"] = kwargs["overrides"]
        return real.launch.Outcome(codes={0: 0})

    def fake_validate(*args: Any, overrides: Any = (), **kwargs: Any) -> Any:
        seen["validate"] = overrides
        return real.validate.Validation(pd.DataFrame({"policy": ["ring"], "within": [True]}), tmp_path)

    monkeypatch.setattr(real.launch, "launch", fake_launch)
    monkeypatch.setattr(real.validate, "validate", fake_validate)
    out = str(tmp_path / "c.yaml")
    assert main(["calibrate", str(REAL), "--out", out, "--set", "iterations=5", "--repeats", "3"]) == 0
    assert seen["calibrate"] == ["iterations=5", "calibration.repeats=3"]  # the flag after --set: it wins
    assert main(["validate", str(REAL), "--out", str(tmp_path / "v"), "--set", "iterations=5"]) == 0
    assert seen["validate"] == ["iterations=5"]


def test_search_applies_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sim.experiments.search as search

    seen: list[Any] = []

    def fake_search(config: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(config)
        raise search.SearchError("stopped by the test")

    monkeypatch.setattr(search, "offline_search", fake_search)
    assert main(["search", str(SEARCH), "--out", str(tmp_path / "s"), "--set", "iterations=7"]) == 1
    assert seen[0].iterations == 7


def test_emulate_up_applies_set(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import real.emulate.plan as emulate_plan
    from real.emulate import EmulationError

    seen: list[Any] = []

    def fake_plan(config: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(config)
        raise EmulationError("stopped by the test")

    monkeypatch.setattr(emulate_plan, "plan_config", fake_plan)  # `emulate up` imports it when it runs
    assert main(["emulate", "up", str(REAL), "--set", "cluster.nic_gbps=0.5"]) == 3
    assert seen[0].cluster.nic_gbps == 0.5
    assert main(["emulate", "up", str(REAL), "--set", "nokey"]) == 2
    assert capsys.readouterr().err.endswith(
        "emulate: argument error: --set 'nokey': write KEY=VALUE, e.g. --set cluster.uplink_gbps=25\n"
    )


def test_an_unknown_flag_is_one_line_naming_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, command in (
        (["real", str(REAL), "--bogus", "1"], "real"),
        (["emulate", "up", "c.yaml", "-z"], "emulate up"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "usage:" not in err, err
        assert err.startswith(f"syncsim {command}: argument error: unrecognized arguments: ")
        assert f"`syncsim {command} --help` lists the arguments" in err
    with pytest.raises(SystemExit):
        main(["run", str(QUICKSTART), "--set"])  # --set without its value
    err = capsys.readouterr().err
    assert (
        err == "syncsim run: argument error: --set: expected one argument (`syncsim run --help` lists the arguments)\n"
    )


def test_plot_and_sweep_flags_are_argument_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sim.experiments.sweep_runner import TABLE_FILE

    folder = tmp_path / "sweep"
    folder.mkdir()
    table = pd.DataFrame(
        {
            "key": ["a", "b"],
            "cluster.uplink_gbps": [5, 50],
            "seed": [0, 0],
            "policy": ["ring", "ring"],
            "status": ["ok", "ok"],
            "throughput_samples_s": [1.0, 2.0],
        }
    )
    table.to_csv(folder / TABLE_FILE, index=False)
    assert main(["plot", str(folder), "--x", "seed"]) == 2
    one_argument_error(capsys.readouterr().err, "plot", "--x: 'seed' is not an axis of this sweep; allowed: cluster")
    assert main(["plot", str(folder), "--metric", "nope"]) == 2
    one_argument_error(capsys.readouterr().err, "plot", "--metric: no column 'nope' in the sweep table; allowed:")
    assert main(["plot", str(tmp_path / "nothing")]) == 2
    one_argument_error(capsys.readouterr().err, "plot", "folder: ")
    for argv, command in (
        (["sweep", str(QUICKSTART), "--jobs", "0"], "sweep"),
        (["search", str(SEARCH), "--out", str(tmp_path / "s"), "--seeds", "0"], "search"),
    ):
        with pytest.raises(SystemExit) as stop:  # refused while parsing, before the config is read
            main(argv)
        assert stop.value.code == 2
        one_argument_error(capsys.readouterr().err, command, f"{argv[-2]}: expected an integer >= 1, got 0")
    assert main(["search", str(SEARCH), "--out", str(tmp_path / "s"), "--start", "0.1", "--smallest", "0.2"]) == 2
    one_argument_error(capsys.readouterr().err, "search", "--smallest, --start: need 0 < --smallest (0.2) <= --start")


Flag = tuple[tuple[str, ...], str, Any]  # (command, flag, type)


def typed_flags(parser: argparse.ArgumentParser, command: tuple[str, ...] = ()) -> Iterator[Flag]:
    """(command, flag, type) for every flag of every (sub)command that converts its value."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from typed_flags(sub, (*command, name))
        elif action.type is not None and action.option_strings:
            yield command, action.option_strings[-1], action.type


NUMERIC_FLAGS = list(typed_flags(build_parser()))


def test_the_numeric_flags_are_all_found() -> None:
    """The walk below sees the flags issue 45 named (so a parametrization over nothing cannot pass)."""
    found = {(" ".join(command), flag) for command, flag, _ in NUMERIC_FLAGS}
    assert {("validate", "--timeout"), ("real", "--timeout"), ("real", "--nproc"), ("sweep", "--jobs")} <= found
    assert len(found) >= 18


@pytest.mark.parametrize("command, flag, kind", NUMERIC_FLAGS, ids=[f"{' '.join(c)} {f}" for c, f, _ in NUMERIC_FLAGS])
def test_every_numeric_flag_refuses_nan_inf_and_negatives_while_parsing(
    command: tuple[str, ...], flag: str, kind: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare int or float type takes -1 (and float takes nan, inf): every numeric flag states its range,
    and a value outside it is one argument error naming the flag, exit 2, before anything is read or
    launched (no config is given: the parse stops at the flag)."""
    assert kind not in (int, float), f"syncsim {' '.join(command)} {flag}: a bare {kind.__name__} takes nan or -1"
    for value in ("nan", "inf", "-inf", "-1", "-0.5"):
        with pytest.raises(SystemExit) as stop:
            main([*command, f"{flag}={value}"])  # = keeps argparse from reading -inf as a flag
        assert stop.value.code == 2
        err = capsys.readouterr().err
        one_argument_error(err, " ".join(command), f"{flag}: expected ")
        assert err.rstrip("\n").split(", got ")[1].startswith(f"{value} ("), err


@pytest.mark.parametrize(
    "argv",
    [
        ["real", "c.yaml", "--timeout", "0"],
        ["validate", "c.yaml", "--out", "o", "--timeout", "0"],
        ["calibrate", "c.yaml", "--out", "o", "--timeout", "0"],
        ["real", "c.yaml", "--nproc", "0"],
        ["sweep", "c.yaml", "--jobs", "0"],
        ["profile", "resnet32", "--out", "o", "--batch", "0"],
        ["emulate", "up", "c.yaml", "--scale", "0"],
    ],
)
def test_zero_is_refused_where_it_means_nothing(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A zero timeout (every peer dead at once), zero processes, jobs, samples or link rate."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    assert stop.value.code == 2
    command = " ".join(argv[:2] if argv[0] == "emulate" else argv[:1])
    one_argument_error(capsys.readouterr().err, command, f"{argv[-2]}: expected ")
