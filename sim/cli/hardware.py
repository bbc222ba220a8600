"""`syncsim real`, `calibrate`, `validate` and `profile`: commands that run torch on this machine's
devices (or an emulated cluster's namespaces) and measure."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from real.emulate.shaping import QUEUES  # stdlib only: the parser is built without torch
from real.model_input import FORM, TARGET_FORM, parse_input, parse_target  # stdlib only, likewise
from sim.catalog.gpus import PRECISIONS
from sim.catalog.zoo import TORCH_MODELS, canonical_name
from sim.cli.common import Subparsers, add_set, hold, require_torch
from sim.errors import ConfigError, UsageError
from sim.flags import SECONDS, count


def add_real(sub: Subparsers) -> None:
    """`syncsim real CONFIG`: every policy of the config on real torch.distributed processes."""
    real = sub.add_parser("real", help="run every policy of a config on real torch.distributed processes")
    real.add_argument(
        "config", help="YAML config file (its numerics: model is trained; without one, the workload's zoo model)"
    )
    real.add_argument(
        "--nproc",
        type=count(1),
        help="worker processes (default: the cluster's GPU count, which it must equal; servers are added)",
    )
    real.add_argument("--out", help="output folder (default: results/<config name>-real)")
    real.add_argument("--timeout", type=SECONDS, default=60.0, help="seconds before a silent peer counts as dead")
    real.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default="auto",
        help="auto: nccl with a GPU per worker, or gloo",
    )
    real.add_argument("--emulate", metavar="TAG", help="run each rank in its host's namespace of `syncsim emulate up`")
    real.add_argument(
        "--cpu-memory",
        action="store_true",
        help="measure each CPU worker's peak memory for ranks.csv (watches every op of its first 3 iterations, "
        "several times slower; a GPU's peak is always measured)",
    )
    add_set(real)
    real.set_defaults(func=_cmd_real)


def _cmd_real(args: argparse.Namespace) -> int:
    from sim.config import load_config

    config = load_config(args.config, args.set)
    require_torch("real")
    from real.backends import backend_for
    from real.device_use import CPU_MEMORY_ENV
    from real.launch import launch
    from real.layout import placement
    from real.results import print_real_results
    from real.timing_run import with_timing_numerics

    timing = not config.numerics_on
    config = with_timing_numerics(config)  # no numerics section: the workload's zoo model, for timing
    out = hold(args, Path(args.out) if args.out else Path("results") / f"{config.name}-real")
    need = placement(config)
    if args.nproc is not None and args.nproc != need.workers:  # before announcing anything
        raise UsageError(
            f"--nproc: the config's cluster has {need.workers} GPUs (one worker process each), got {args.nproc}"
        )
    backend = backend_for(args.backend, node_workers=need.workers)  # every worker on this machine
    if timing:
        print(f"no numerics: section: training {config.workload.model} on synthetic data, for timing", file=sys.stderr)
    print(
        f"starting {need.workers} workers"
        + (f" + {need.servers} parameter-server shards" if need.servers else "")
        + f" on {backend}"
        + (" (--backend auto)" if args.backend == "auto" else "")
        + f"; a silent peer counts as dead after {args.timeout:g} s",
        file=sys.stderr,
    )
    if args.cpu_memory:  # the launched ranks inherit it (real/device_use.py)
        os.environ[CPU_MEMORY_ENV] = "1"
    outcome = launch(
        Path(args.config), out, need.workers, args.timeout, args.backend, emulation=args.emulate, overrides=args.set
    )
    print_real_results(out)
    if not outcome.ok:
        print(f"real run failed: {outcome.failed}; results measured so far are in {out}/", file=sys.stderr)
        return 1
    return 0


def add_calibrate(sub: Subparsers) -> None:
    """`syncsim calibrate CONFIG --out YAML`: measure a cluster and write a calibrated config."""
    cal = sub.add_parser("calibrate", help="measure a cluster with real processes and write a calibrated config")
    cal.add_argument("config", help="YAML config (its cluster: shape and numerics: model are measured)")
    cal.add_argument("--out", required=True, help="the calibrated YAML to write")
    cal.add_argument("--emulate", metavar="TAG", help="measure the emulated cluster `syncsim emulate up` built")
    cal.add_argument("--timeout", type=SECONDS, default=120.0, help="seconds before a silent peer counts as dead")
    cal.add_argument(
        "--backend", choices=["auto", "gloo", "nccl"], default="auto", help="auto: nccl with a GPU per worker, or gloo"
    )
    cal.add_argument("--repeats", type=count(1), help="timed repeats per measurement (default: calibration.repeats, 5)")
    cal.add_argument("--statistic", help="median, mean or min over repeats (default: calibration.statistic, median)")
    cal.add_argument(
        "--uplink-bytes",
        dest="uplink_bytes",
        type=count(1),
        help="bytes per host in the rack-egress test (default: probed)",
    )
    cal.add_argument(
        "--max-bytes",
        dest="max_bytes",
        type=count(1),
        help="the largest message the probe may choose (default: 64 MiB)",
    )
    add_set(cal)
    cal.set_defaults(func=_cmd_calibrate)


# `syncsim calibrate` flags that set a key of the config's `calibration:` section
CALIBRATION_FLAGS = {
    "repeats": "--repeats",
    "statistic": "--statistic",
    "uplink_bytes": "--uplink-bytes",
    "max_bytes": "--max-bytes",
}


def _calibration_overrides(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(`calibration.KEY=VALUE` overrides from the flags given, one line per bad flag naming it)."""
    from pydantic import ValidationError

    from real.backends import backend_for
    from sim.config.calibration import CalibrationConfig
    from sim.config.messages import describe

    given = {key: getattr(args, key) for key in CALIBRATION_FLAGS if getattr(args, key) is not None}
    problems = []
    try:
        CalibrationConfig.model_validate(given)
    except ValidationError as exc:
        for line in describe(exc.errors(), given, CalibrationConfig):
            key = line.split(":", 1)[0]
            problems.append(f"{CALIBRATION_FLAGS[key]}{line[len(key) :]}" if key in CALIBRATION_FLAGS else line)
    try:
        backend_for(args.backend, calibrate=True)
    except ConfigError as exc:
        problems.append(f"--{exc}")
    return [f"calibration.{key}={value}" for key, value in given.items()], problems


def _cmd_calibrate(args: argparse.Namespace) -> int:
    require_torch("calibrate")
    from real.launch import launch

    flags, problems = _calibration_overrides(args)
    if problems:
        raise UsageError("\n".join(problems))
    overrides = [*args.set, *flags]  # the calibration flags win over a --set of the same key
    from real.calibrate.datacenters import check_calibratable
    from sim.config import load_config
    from sim.config.schema import PROFILED

    # a bad config or --set, or a cluster whose calibrated config could not keep its shape: one line, before
    # any process starts
    config = load_config(args.config, overrides)
    check_calibratable(config.cluster)
    if config.workload.model == PROFILED and not config.numerics_on:  # the ranks profile a zoo model's twin
        raise ConfigError(
            "workload.model: calibration profiles the workload's zoo model on every rank, and cannot build a "
            "profiled module there; add a numerics: section, or calibrate a config of a zoo model"
        )
    outcome = launch(
        Path(args.config),
        Path(args.out),
        None,
        args.timeout,
        args.backend,
        emulation=args.emulate,
        calibrate=True,
        overrides=overrides,
    )
    if not outcome.ok:
        print(f"calibration failed: {outcome.failed}", file=sys.stderr)
        return 1
    print(f"calibrated config: {args.out} (raw measurements beside it: .csv)")
    return 0


def add_validate(sub: Subparsers) -> None:
    """`syncsim validate CONFIG --out DIR`: calibrate, run real and simulated, compare."""
    val = sub.add_parser("validate", help="calibrate, run each policy real and simulated, compare (root: emulates)")
    val.add_argument("config")
    val.add_argument("--out", required=True, help="output folder")
    val.add_argument("--emulate", metavar="TAG", help="use this running emulation (default: build one from the config)")
    val.add_argument("--timeout", type=SECONDS, default=120.0, help="seconds before a silent peer counts as dead")
    val.add_argument(
        "--warmup",
        type=count(0),
        help="iterations dropped on both sides (default: the config's warmup_iterations, else 3)",
    )
    val.add_argument(
        "--queue",
        choices=QUEUES,
        default="fair",
        help="links' queueing when the emulation is built here (docs/emulation.md)",
    )
    add_set(val)
    val.set_defaults(func=_cmd_validate)


def _cmd_validate(args: argparse.Namespace) -> int:
    from sim.config import load_config

    load_config(args.config, args.set)  # a bad config or --set is one line, before anything is built
    require_torch("validate")
    from real.validate import validate

    out = hold(args, Path(args.out))
    result = validate(Path(args.config), out, args.emulate, args.timeout, args.warmup, args.queue, overrides=args.set)
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"\nvalidation: {result.out}/ (validation.md, validation.csv, validation.png; sim/, real/, calibrated.yaml)")
    return 0 if result.passed else 1


def profile_model(text: str) -> str:
    """`syncsim profile`'s MODEL (argparse `type`): a zoo model with a torch.nn twin, or `module:factory`."""
    if ":" in text:
        parse_target(text)  # an argument error naming what is wrong; nothing is imported
        return text
    if canonical_name(text) in TORCH_MODELS:
        return canonical_name(text)
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected a zoo model with a torch.nn version ({', '.join(TORCH_MODELS)}) or your own {TARGET_FORM}"
    )


def add_profile(sub: Subparsers) -> None:
    """`syncsim profile MODEL`: per-layer compute times of a zoo model, or your own module, on this machine's device."""
    prof = sub.add_parser(
        "profile", help="measure a zoo model's or your own module's per-layer compute times on this machine's device"
    )
    prof.add_argument(
        "model",
        type=profile_model,
        help=f"a zoo model with a torch.nn version ({', '.join(TORCH_MODELS)}), or your own module: {TARGET_FORM} "
        "and factory() returns a torch.nn.Module (docs/profiles.md)",
    )
    prof.add_argument("--batch", type=count(1), required=True, help="samples per iteration (per GPU)")
    prof.add_argument(
        "--input",
        dest="inputs",
        type=parse_input,
        action="append",
        metavar="SPEC",
        help=f"your module only, required: one sample of a forward argument, {FORM}; repeat it for each argument",
    )
    prof.add_argument(
        "--classes",
        type=count(2),
        help="your module only: the loss is cross-entropy over this many classes (the output's last dimension) "
        "against uniform targets; default: the output's mean",
    )
    prof.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="tf32: TF32 matmuls and convolutions; fp16, bf16: under autocast (real/precision.py)",
    )
    prof.add_argument("--out", required=True, help="the profile (YAML) to write")
    prof.add_argument("--device", default="auto", help="auto (the current CUDA device, else the CPU), cpu, cuda:N")
    prof.add_argument("--warmup", type=count(0), default=3, help="untimed iterations first")
    prof.add_argument(
        "--repeats", type=count(1), default=10, help="timed iterations; each layer's median is kept, with its spread"
    )
    prof.add_argument("--seed", type=count(0), default=0, help="seeds the model's weights and the synthetic batch")
    prof.set_defaults(func=_cmd_profile)


def _cmd_profile(args: argparse.Namespace) -> int:
    own = ":" in args.model
    if not own and (args.inputs or args.classes is not None):
        flag = "--input" if args.inputs else "--classes"
        raise UsageError(f"{flag}: only for your own module ({TARGET_FORM}); a zoo model brings its own input and loss")
    if own and not args.inputs:
        raise UsageError(f"--input: required for {args.model}: one sample of each forward argument, {FORM}")
    require_torch("profile")
    import torch

    from real.profiler import measure_module_profile, measure_profile
    from sim.compute.profile import unsteady_spans, write_profile

    args.config = "the command line"  # what another error's message names
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device: {args.device!r} needs a CUDA device and this machine has none; allowed here: cpu")
    device = None if args.device == "auto" else args.device
    settings = (args.precision, device, args.warmup, args.repeats, args.seed)
    if own:
        profile = measure_module_profile(args.model, args.inputs, args.batch, args.classes, *settings)
    else:
        profile = measure_profile(args.model, args.batch, *settings)
    path = write_profile(profile, args.out)
    params = f", {sum(t.params for t in profile.layers):,} parameters" if profile.shaped else ""
    use = "workload.model: profiled and workload.profile" if profile.shaped else "workload.profile"
    saved = profile.saved_bytes or 0  # measured for every layer by `syncsim profile`
    print(
        f"{profile.model} at batch {profile.batch_size}, {profile.precision}, on {profile.device}: forward "
        f"{profile.forward_s * 1e3:.2f} ms, backward {profile.backward_s * 1e3:.2f} ms over {len(profile.layers)} "
        f"layers{params} (median of {args.repeats}); activations saved for backward {saved:,} bytes "
        f"({saved / profile.batch_size:,.0f} a sample)\nprofile: {path} (use it with {use})"
    )
    if unsteady := unsteady_spans(profile):
        _warn_unsteady(unsteady, args.repeats)
    return 0


def _warn_unsteady(spans: list[str], repeats: int, shown: int = 5) -> None:
    """One warning naming what varied between the repeats (the step first, then up to `shown` spans)."""
    from sim.compute.profile import UNSTEADY_IQR, UNSTEADY_RANGE

    more = f"; and {len(spans) - shown} more" if len(spans) > shown else ""
    print(
        f"warning: timings varied a lot between the {repeats} repeats (IQR over {UNSTEADY_IQR:.0%} of the median, "
        f"or max over {UNSTEADY_RANGE:g}x min): {'; '.join(spans[:shown])}{more}. Other work sharing the "
        "device or the CPU that launches its kernels, or changing clocks, can do this, and the medians may then "
        "be far from a quiet run's: re-run on a quiet machine (or with more --repeats); each span's min, "
        "quartiles and max are in the profile. A run can also be steady and still slow: compare step_s across runs",
        file=sys.stderr,
    )
