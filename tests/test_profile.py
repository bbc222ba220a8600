"""Measured compute profiles: the file format, what the simulator takes from one (exactly the
measured per-layer times), and the refusals that name `workload.profile`."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

import sim.compute.profile
from sim.api import prepare, simulate
from sim.catalog.zoo import TORCH_MODELS, get_model
from sim.cli import main
from sim.compute.profile import (
    MAX_BREAKS,
    MAX_BYTES,
    MAX_LAYERS,
    MAX_SPAN_S,
    ComputeProfile,
    LayerTime,
    Spread,
    read_profile,
    unsteady_spans,
    write_profile,
)
from sim.config import load_config
from sim.errors import ConfigError

torch = pytest.importorskip("torch")

from real.profiler import measure_profile  # noqa: E402


def config_file(folder: Path, **workload: object) -> Path:
    data = {
        "name": "profiled",
        "iterations": 2,
        "cluster": {"topology": "star", "hosts": 2, "gpu": "V100", "nic_gbps": 25},
        "workload": {"model": "resnet32", "batch_size": 4, "bucket_mb": 0.3, **workload},
        "policies": [{"name": "no_sync"}],
    }
    path = folder / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def fake(model: str = "resnet32", batch: int = 4, precision: str = "fp32") -> ComputeProfile:
    layers = tuple(
        LayerTime(layer.name, 1e-4 * (i + 1), 3e-4 / (i + 1)) for i, layer in enumerate(get_model(model).layers)
    )
    return ComputeProfile(model, batch, precision, layers, "test")


def test_a_measured_profile_gives_the_simulator_exactly_its_times(tmp_path: Path) -> None:
    profile = measure_profile("resnet32", 4, warmup=0, repeats=1)
    write_profile(profile, tmp_path / "profiles" / "r32.yaml")
    back = read_profile(tmp_path / "profiles" / "r32.yaml")
    assert back.layers == profile.layers and back.forward_s == profile.forward_s  # floats survive YAML
    # what autograd saved, by hand at batch 4: conv1 its input images (3 x 32 x 32 fp32); bn1 the 16 x 32 x 32
    # feature map it normalizes, its 16 channels' mean and inverse std, and the ReLU's output after it; the
    # next conv saves that same output as its input (counted once, for bn1) and its weight (not an activation)
    image, features = 4 * 3 * 32 * 32 * 4, 4 * 16 * 32 * 32 * 4
    assert [t.saved_bytes for t in back.layers[:3]] == [image, 2 * features + 2 * 16 * 4, 0]
    config = load_config(config_file(tmp_path, profile="profiles/r32.yaml"))  # relative to the config file
    _, plan = prepare(config)
    assert plan.forward_s == profile.forward_s
    for bucket in plan.buckets:  # every bucket: the measured backward of its layers, nothing else
        assert bucket.backward_s == sum(profile.layers[i].backward_s for i in bucket.layers)
    assert sorted(i for b in plan.buckets for i in b.layers) == list(range(len(profile.layers)))
    assert math.isclose(plan.backward_s, profile.backward_s, rel_tol=1e-12)
    iterations = simulate(config).iterations
    assert iterations["compute_s"].tolist() == pytest.approx([plan.compute_s] * 4, rel=1e-12)


def test_every_layer_gets_its_own_measured_span() -> None:
    profile = measure_profile("deepfm", 16, warmup=1, repeats=2)
    assert [t.name for t in profile.layers] == [layer.name for layer in get_model("deepfm").layers]
    assert all(t.backward_s > 0 for t in profile.layers)  # every layer's gradients get ready at their own time
    # the first-order term's weight is indexed directly, not called as a module: its forward time
    # stays inside the span of the layer in use around it, as documented; every called layer has its own
    assert profile.layers[0].name == "fm.linear" and profile.layers[0].forward_s == 0
    assert all(t.forward_s > 0 for t in profile.layers[1:])
    # each median comes with its spread over the repeats, as does the whole step's
    for t in profile.layers:
        for median, spread in ((t.forward_s, t.forward_spread), (t.backward_s, t.backward_spread)):
            assert spread is not None and spread.min_s <= spread.q1_s <= median <= spread.q3_s <= spread.max_s
    step = profile.step_spread
    assert profile.step_s is not None and step is not None and step.min_s <= profile.step_s <= step.max_s
    assert profile.step_s >= max(t.forward_s + t.backward_s for t in profile.layers)


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        (fake(batch=8), "workload.profile: measured at batch_size 8; the workload's is 4"),
        (fake(model="resnet50"), "workload.profile: measured for model 'resnet50'; the workload trains 'resnet32'"),
        (fake(precision="fp16"), "workload.profile: measured at precision fp16; the workload's is fp32"),
        (
            ComputeProfile("resnet32", 4, "fp32", fake().layers[:-1], "test"),
            "workload.profile: its layers differ from the zoo's resnet32 at position 66 (66 layers against 67)",
        ),
    ],
)
def test_a_profile_for_another_workload_is_refused_by_field(
    profile: ComputeProfile, message: str, tmp_path: Path
) -> None:
    write_profile(profile, tmp_path / "p.yaml")
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        prepare(load_config(config_file(tmp_path, profile="p.yaml")))


def test_a_bad_profile_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_profile(fake(), tmp_path / "p.yaml")
    data = yaml.safe_load((tmp_path / "p.yaml").read_text())
    cases = {
        "version": ({**data, "version": 3}, "version 3; this syncsim reads versions 1 and 2"),
        "shapes": ({**data, "version": 2}, "layers[0].shapes: expected a list of tensor shapes"),  # version 2 has them
        "format": ({**data, "format": "x"}, "not a compute profile"),
        "time": ({**data, "layers": [{**data["layers"][0], "backward_s": -1}]}, "layers[0].backward_s: expected"),
        "spread": (
            {
                **data,
                "layers": [{**data["layers"][0], "forward_spread": {"min_s": 2, "q1_s": 1, "q3_s": 3, "max_s": 4}}],
            },
            "layers[0].forward_spread: expected 0 <= min_s <= q1_s <= q3_s <= max_s",
        ),
        "step": ({**data, "step_spread": [1, 2]}, "step_spread: expected a mapping of min_s, q1_s, q3_s, max_s"),
    }
    for case, (broken, message) in cases.items():
        (tmp_path / "p.yaml").write_text(yaml.safe_dump(broken))
        assert main(["check", str(config_file(tmp_path, profile="p.yaml"))]) == 2, case
        err = capsys.readouterr().err
        assert "workload.profile: " in err and message in err and "Traceback" not in err, case
    assert main(["check", str(config_file(tmp_path, profile="missing.yaml"))]) == 2
    assert "cannot read it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("layers[2].forward_s", 1e308),  # summing such layers overflowed (an OverflowError, issue 45)
        ("layers[0].backward_s", float("inf")),
        ("layers[1].forward_s", float("nan")),
        ("layers[0].forward_s", MAX_SPAN_S * 1.01),
        ("step_s", 1e308),
        ("layers[0].forward_spread", {"min_s": 0.0, "q1_s": 0.0, "q3_s": 0.0, "max_s": 1e308}),
    ],
)
def test_a_time_beyond_the_physical_bound_is_one_line_naming_the_row(
    where: str, value: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_profile(fake(), tmp_path / "p.yaml")
    data = yaml.safe_load((tmp_path / "p.yaml").read_text())
    if where.startswith("layers"):
        row, key = where.removeprefix("layers[").split("].")
        data["layers"][int(row)][key] = value
    else:
        data[where] = value
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(data))
    assert main(["check", str(config_file(tmp_path, profile="p.yaml"))]) == 2
    lines = [line.strip() for line in capsys.readouterr().err.splitlines()[1:]]
    assert len(lines) == 1 and lines[0].startswith("workload.profile: "), lines
    assert f": {where}: expected " in lines[0] and f"{MAX_SPAN_S:g}" in lines[0], lines


def test_an_oversize_profile_is_refused_by_counting_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_parse(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed a profile that its count of lines, commas and colons already refuses")

    monkeypatch.setattr(sim.compute.profile, "load", no_parse)
    # each under the byte cap: many lines; one line of many values (a list of zeros), which took Python's
    # YAML parser seconds per MB; and line breaks YAML counts that are not b"\n"
    for body in (
        b"#\n" * (MAX_BREAKS + 1),
        b"notes: [" + b"0," * MAX_BREAKS + b"]",
        "#\u2028".encode() * (MAX_BREAKS + 1),
    ):
        (tmp_path / "p.yaml").write_bytes(body)
        assert len(body) <= MAX_BYTES
        limit = f"{MAX_BREAKS + 1:,} lines, commas and colons, over the {MAX_BREAKS:,} limit for a profile"
        with pytest.raises(
            ConfigError, match=f"^workload.profile: .*p.yaml: {limit} \\(at most {MAX_LAYERS:,} layers\\)"
        ):
            read_profile(tmp_path / "p.yaml")


def test_more_layers_than_the_cap_are_refused_naming_layers(tmp_path: Path) -> None:
    header = "format: syncsim-profile\nversion: 1\nmodel: resnet32\nbatch_size: 4\nprecision: fp32\nlayers:\n"
    rows = "- {name: x, forward_s: 0.001, backward_s: 0.001}\n" * (MAX_LAYERS + 1)
    (tmp_path / "p.yaml").write_text(header + rows)
    with pytest.raises(ConfigError, match=f": layers: {MAX_LAYERS + 1:,} layers; at most {MAX_LAYERS:,}"):
        read_profile(tmp_path / "p.yaml")


def test_the_caps_take_what_syncsim_writes_for_the_most_layers_allowed(tmp_path: Path) -> None:
    # room for deeper models than those `syncsim profile` measures (the zoo's models with a torch twin; a
    # config-described LLM such as gpt3_175b, 771 layers, has no twin and no profile)
    largest = max(len(get_model(name).layers) for name in TORCH_MODELS)
    assert MAX_LAYERS >= 10 * largest
    spread = Spread(0.000123456789012345, 0.000123456789012346, 0.000223456789012345, 0.000323456789012345)
    name = "encoder.layer.23.attention.output.dense_with_a_long_module_path_name"
    layers = tuple(
        LayerTime(f"{name}.{i}", 1.23456789012345e-4, 2.3456789012345e-4, spread, spread, saved_bytes=12_345_678_901)
        for i in range(MAX_LAYERS)
    )
    notes = {"torch": "2.13.0+cu126", "repeats": 20, "warmup": 5, "command": "syncsim profile bert_large --batch 64"}
    profile = ComputeProfile("bert_large", 64, "bf16", layers, "NVIDIA H200 141GB HBM3e", notes, 0.0123, spread)
    path = write_profile(profile, tmp_path / "p.yaml")
    raw = path.read_bytes()
    assert len(raw) <= MAX_BYTES and sum(raw.count(mark) for mark in (b"\n", b",", b":")) <= MAX_BREAKS
    assert read_profile(path).layers == layers


def test_the_caps_take_a_modules_profile_with_its_shapes_for_the_most_layers_allowed(tmp_path: Path) -> None:
    spread = Spread(0.000123456789012345, 0.000123456789012346, 0.000223456789012345, 0.000323456789012345)
    name = "encoder.layer.23.attention.output.dense_with_a_long_module_path_name"
    shapes = ((1024, 1024, 3, 3), (1024,))  # a convolution's weight and bias: what most layers hold
    layers = tuple(
        LayerTime(f"{name}.{i}", 1.2345e-4, 2.3456e-4, spread, spread, shapes, saved_bytes=12_345_678_901)
        for i in range(MAX_LAYERS)
    )
    notes = {"input": ["int64:1024:vocab=32000"], "loss": "cross-entropy over 32000 classes, uniform targets"}
    profile = ComputeProfile("my_model:build", 64, "bf16", layers, "NVIDIA H200 141GB HBM3e", notes, 0.0123, spread)
    raw = write_profile(profile, tmp_path / "p.yaml").read_bytes()
    assert len(raw) <= MAX_BYTES and sum(raw.count(mark) for mark in (b"\n", b",", b":")) <= MAX_BREAKS
    back = read_profile(tmp_path / "p.yaml")
    assert back.layers == layers and back.shaped and back.layers[0].params == 1024 * 1024 * 9 + 1024


def test_profile_settings_that_cannot_apply_are_refused(tmp_path: Path) -> None:
    write_profile(fake(), tmp_path / "p.yaml")
    with pytest.raises(ConfigError, match="efficiency: not used when a profile gives the measured times"):
        load_config(config_file(tmp_path, profile="p.yaml", efficiency=0.5))
    synthetic = {"model": "synthetic", "gradient_mb": 1, "compute_ms": 5, "profile": "p.yaml"}
    with pytest.raises(ConfigError, match="profile: applies only to zoo models"):
        load_config(config_file(tmp_path, **synthetic))


def test_the_profile_command_writes_a_profile_and_refuses_bad_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r32.yaml"
    assert main(["profile", "resnet32", "--batch", "4", "--out", str(out), "--warmup", "0", "--repeats", "1"]) == 0
    assert read_profile(out).batch_size == 4 and "profile: " in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:  # refused while the command line is parsed
        main(["profile", "resnet32", "--batch", "0", "--out", str(out)])
    assert stop.value.code == 2
    assert "--batch: expected an integer >= 1, got 0" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["profile", "resnet32", "--batch", "4", "--device", "cuda", "--out", str(out)]) == 2
        assert "--device: 'cuda' needs a CUDA device and this machine has none" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # argparse: the model must be a zoo model
        main(["profile", "resnet", "--batch", "4", "--out", str(out)])
    assert exit_info.value.code == 2


def test_a_spread_is_unsteady_past_a_quarter_iqr_or_a_doubled_range() -> None:
    assert Spread.of([5.0, 1.0, 4.0, 2.0, 3.0]) == Spread(1.0, 2.0, 4.0, 5.0)  # quartiles within the samples
    assert Spread.of([0.2]) == Spread(0.2, 0.2, 0.2, 0.2)  # one repeat: no spread
    assert Spread(0.100, 0.101, 0.104, 0.150).unsteady(0.102) is None  # a quiet machine's few percent
    assert Spread(0.100, 0.101, 0.140, 0.150).unsteady(0.120) == "IQR 33% of the median"
    # issue 33's loaded run: one repeat of 8.2 s among ~127 ms ones leaves the IQR small, not the range
    assert Spread(0.125, 0.126, 0.128, 8.2).unsteady(0.127) == "max 65.6x min"


def spread_profile(step: Spread, layers: dict[str, tuple[float, Spread]]) -> ComputeProfile:
    rows = tuple(LayerTime(name, s, s, spread, Spread.of([s])) for name, (s, spread) in layers.items())
    return ComputeProfile("resnet32", 4, "fp32", rows, "test", {}, step_s=0.1, step_spread=step)


def test_unsteady_spans_name_the_step_and_the_layers_that_matter() -> None:
    steady, noisy = Spread(0.099, 0.1, 0.1, 0.101), Spread(0.04, 0.045, 0.07, 0.09)
    profile = spread_profile(
        Spread(0.05, 0.08, 0.12, 0.3),  # the step: IQR 40% of 0.1 s, range 6x
        {
            "conv1": (0.05, Spread(0.049, 0.05, 0.05, 0.051)),
            "fc": (0.05, noisy),  # half the step, and its forward spread is large
            "bn1": (0.0005, Spread(0.0001, 0.0002, 0.0009, 0.001)),  # noisy but 0.5% of the step: not judged
        },
    )
    assert unsteady_spans(profile) == [
        "the step (IQR 40% of the median, max 6.0x min)",
        "fc forward (IQR 50% of the median, max 2.2x min)",
    ]
    quiet = spread_profile(steady, {"conv1": (0.05, Spread(0.049, 0.05, 0.05, 0.051))})
    assert unsteady_spans(quiet) == []


def test_spreads_survive_the_file_and_old_profiles_still_read(tmp_path: Path) -> None:
    profile = spread_profile(Spread(0.05, 0.08, 0.12, 0.3), {"conv1": (0.05, Spread(0.04, 0.045, 0.07, 0.09))})
    assert read_profile(write_profile(profile, tmp_path / "new.yaml")) == profile
    old = {  # a version-1 profile written before spreads were recorded
        "format": "syncsim-profile",
        "version": 1,
        "model": "resnet32",
        "batch_size": 4,
        "precision": "fp32",
        "device": "cpu",
        "notes": {"repeats": 10, "statistic": "median"},
        "layers": [{"name": "conv1", "forward_s": 0.001, "backward_s": 0.002}],
    }
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    back = read_profile(tmp_path / "old.yaml")
    assert back.layers == (LayerTime("conv1", 0.001, 0.002),) and back.layers[0].forward_spread is None
    assert back.step_s is None and back.step_spread is None and unsteady_spans(back) == []
    assert back.layers[0].saved_bytes is None and back.saved_bytes is None  # written before saved bytes


def test_saved_bytes_survive_the_file_with_their_sum_and_a_partial_or_bad_set_is_refused(tmp_path: Path) -> None:
    base = fake()
    layers = tuple(replace(t, saved_bytes=1000 * i) for i, t in enumerate(base.layers))
    profile = replace(base, layers=layers)
    path = write_profile(profile, tmp_path / "p.yaml")
    raw = yaml.safe_load(path.read_text())
    assert raw["version"] == 1  # an optional key of either version: a zoo profile stays readable by older syncsims
    assert raw["saved_bytes"] == 1000 * sum(range(len(layers))) == profile.saved_bytes
    assert read_profile(path) == profile
    rows = raw["layers"]
    cases = {
        "partial": ([{**rows[0], "saved_bytes": None}, *rows[1:]], "layers[1].saved_bytes: given where layers[0]'s"),
        "negative": ([*rows[:2], {**rows[2], "saved_bytes": -1}], "layers[2].saved_bytes: expected a whole number"),
        "fraction": ([{**rows[0], "saved_bytes": 1.5}], "layers[0].saved_bytes: expected a whole number of bytes"),
        "bool": ([{**rows[0], "saved_bytes": True}], "layers[0].saved_bytes: expected a whole number of bytes"),
        "huge": ([{**rows[0], "saved_bytes": 10**16}], "0 to 1,000,000,000,000,000; got 10000000000000000"),
    }
    for broken, message in cases.values():
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**raw, "layers": broken}))
        with pytest.raises(ConfigError, match=r"^workload.profile: .*" + re.escape(message)):
            read_profile(tmp_path / "bad.yaml")


def test_the_profile_command_warns_when_the_repeats_disagree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import real.profiler as profiler

    loaded = spread_profile(Spread(0.05, 0.08, 0.12, 0.3), {"conv1": (0.05, Spread(0.04, 0.045, 0.07, 0.09))})
    quiet = spread_profile(Spread(0.099, 0.1, 0.1, 0.101), {"conv1": (0.05, Spread(0.049, 0.05, 0.05, 0.051))})
    argv = ["profile", "resnet32", "--batch", "4", "--out", str(tmp_path / "p.yaml")]
    monkeypatch.setattr(profiler, "measure_profile", lambda *args: loaded)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: timings varied a lot between the 10 repeats (IQR over 25% of the median, ")
    assert "the step (IQR 40% of the median, max 6.0x min); conv1 forward (" in err
    assert "re-run on a quiet machine" in err and err.count("\n") == 1
    assert read_profile(tmp_path / "p.yaml").step_spread == loaded.step_spread  # recorded beside the medians
    monkeypatch.setattr(profiler, "measure_profile", lambda *args: quiet)
    assert main(argv) == 0
    assert capsys.readouterr().err == ""


class FakeCuda:
    """Stand-ins for the `torch.cuda` calls a GPU measurement makes, logging the device each acts on
    (an event: the device of the stream it is recorded on, the current one when none is named)."""

    def __init__(self) -> None:
        self.current, self.log = 0, []

    def _index(self, device: object) -> int:
        index = None if device is None else torch.device(device).index
        return self.current if index is None else index

    def current_device(self) -> int:
        return self.current

    def device(self, device: object) -> object:
        from contextlib import contextmanager

        @contextmanager
        def current():  # type: ignore[no-untyped-def]
            before, self.current = self.current, self._index(device)
            try:
                yield
            finally:
                self.current = before

        return current()

    def current_stream(self, device: object = None) -> tuple[str, int]:
        return ("stream", self._index(device))

    def synchronize(self, device: object = None) -> None:
        self.log.append(("synchronize", self._index(device)))

    def Event(self, enable_timing: bool = False) -> object:  # noqa: N802 - torch.cuda.Event
        cuda = self

        class Event:
            def record(self, stream: object = None) -> None:
                cuda.log.append(("record", cuda.current if stream is None else stream[1]))  # type: ignore[index]

        return Event()


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeCuda:
    cuda = FakeCuda()
    for name in ("current_device", "device", "current_stream", "synchronize", "Event"):
        monkeypatch.setattr(torch.cuda, name, getattr(cuda, name))
    return cuda


def test_the_clock_records_and_waits_on_the_requested_gpu_not_the_current_one(fake_cuda: FakeCuda) -> None:
    from real.profiler import Clock

    clock = Clock(torch.device("cuda", 1))  # GPU 0 is current
    clock.wait()
    clock.stamp()
    clock.stamp()
    clock.wait()
    assert fake_cuda.log == [("synchronize", 1), ("record", 1), ("record", 1), ("synchronize", 1)]


def test_a_profile_on_another_gpu_makes_it_current_while_it_measures(
    fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    import real.profiler as profiler

    seen: list[tuple[int, torch.device]] = []
    monkeypatch.setattr(
        profiler, "_measure", lambda name, batch, precision, where, *_: seen.append((fake_cuda.current, where))
    )
    measure_profile("resnet32", 2, device="cuda:1")
    measure_profile("resnet32", 2, device="cuda")  # no index: the current device, named
    assert seen == [(1, torch.device("cuda", 1)), (0, torch.device("cuda", 0))] and fake_cuda.current == 0
