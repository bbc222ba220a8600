"""`syncsim` command line: run, real, calibrate, validate, emulate, search, check, sweep, plot, profile, list.

Exit codes: 0 success; 1 a policy failed mid-run (results so far are written); 2 invalid config, or
a run whose cost estimate exceeds a `simulation.max_estimated_*` limit (sim/cost.py); 3 the output
folder is held by another running syncsim command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Optional

from sim.errors import ConfigError, OutputBusy, SyncsimError
from sim.gpus import PRECISIONS

TABLE_COLUMNS = {
    "policy": "policy",
    "mean_iteration_s": "mean iter (ms)",
    "p50_iteration_s": "p50 (ms)",
    "p99_iteration_s": "p99 (ms)",
    "throughput_samples_s": "samples/s",
    "mean_comm_s": "comm (ms)",
    "mean_wait_s": "wait (ms)",
    "scaling_efficiency": "scaling eff.",
}


# numerics mode adds these (the time to the target only when the config sets one)
ACCURACY_COLUMNS = {"final_accuracy": "final acc.", "time_to_target_s": "to target (s)"}


def summary_table(summary) -> str:  # type: ignore[no-untyped-def]
    """The summary as the commands print it: milliseconds, and accuracy where the run measured it."""
    columns = dict(TABLE_COLUMNS)
    columns.update({k: v for k, v in ACCURACY_COLUMNS.items() if k in summary and summary[k].notna().any()})
    df = summary[list(columns)].rename(columns=columns).copy()
    for col in ("mean iter (ms)", "p50 (ms)", "p99 (ms)", "comm (ms)", "wait (ms)"):
        df[col] = df[col] * 1e3
    if "final acc." in df:
        df["final acc."] = df["final acc."].map(lambda v: f"{v:.3f}")
    return df.to_string(index=False, float_format=lambda v: f"{v:,.2f}")


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the config, e.g. --set cluster.uplink_gbps=25 --set policies[0].group_size=4 "
        "(the value is read as YAML; repeat for several)",
    )


def _cmd_run(args: argparse.Namespace) -> int:
    from sim.config import load_config
    from sim.cost import check_limits

    config = load_config(args.config, args.set)  # a sweep's file is refused here, naming `syncsim sweep`
    check_limits(config)  # a run estimated over the limits is refused before its output folder exists
    from sim.api import simulate  # pandas and the engine: only for a run that goes ahead
    from sim.faults import late_faults

    out = _hold(args, Path(args.out) if args.out else Path("results") / config.name)
    first_save = True

    def save(partial) -> None:  # type: ignore[no-untyped-def]
        nonlocal first_save
        if first_save:  # an older run's summary must not describe the rows this run now replaces
            (out / "summary.csv").unlink(missing_ok=True)
            first_save = False
        partial.write(out, plot=False, trace=False)  # tables only: cheap, and enough to lose nothing

    try:
        result = simulate(config, progress=not args.quiet and sys.stderr.isatty(), on_policy_done=save)
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished policies are in {out}/", file=sys.stderr)
        return 130
    result.write(out, plot=not args.no_plot)
    print(summary_table(result.summary))
    tables = "summary, iterations, phases, ops, links, utilization, staleness" + (
        ", accuracy" if config.numerics_on else ""
    )
    print(f"\nresults: {out}/ ({tables}: .csv; trace.json; plots)")
    for label, error in result.errors.items():
        print(f"policy {label!r} stopped early: {error}", file=sys.stderr)
    for line in late_faults(config, {run.label: run.sim_time_s for run in result.runs if run.error is None}):
        print(f"note: {line}", file=sys.stderr)
    return 1 if result.errors else 0


def _hold(args: argparse.Namespace, out: Path) -> Path:
    """Lock the output folder for the rest of the command (another run into it is refused)."""
    from sim.output import hold_output

    args.held.enter_context(hold_output(out, command=f"syncsim {args.command} {args.config}"))
    return out


def _require_torch(command: str) -> None:
    """The real backend needs torch; say how to install it instead of a ModuleNotFoundError traceback."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise ConfigError(
            f"`syncsim {command}` runs torch.distributed and torch is not installed; install it with: "
            "pip install -c constraints.txt -e '.[numerics]' "
            "(README.md, 'Which PyTorch you get': the CPU or the CUDA build)"
        ) from None


def _cmd_real(args: argparse.Namespace) -> int:
    from sim.api import as_config

    config = as_config(args.config)
    _require_torch("real")
    from real.backends import backend_for
    from real.launch import launch
    from real.session import placement
    from real.timing_run import with_timing_numerics

    timing = not config.numerics_on
    config = with_timing_numerics(config)  # no numerics section: the workload's zoo model, for timing
    out = _hold(args, Path(args.out) if args.out else Path("results") / f"{config.name}-real")
    need = placement(config)
    if args.nproc is not None and args.nproc != need.workers:  # before announcing anything
        raise ConfigError(
            f"--nproc: the config's cluster has {need.workers} GPUs (one worker process each), got {args.nproc}"
        )
    backend = backend_for(args.backend)
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
    outcome = launch(Path(args.config), out, args.nproc, args.timeout, args.backend, emulation=args.emulate)
    print_real_results(out)
    if not outcome.ok:
        print(f"real run failed: {outcome.failed}; results measured so far are in {out}/", file=sys.stderr)
        return 1
    return 0


def print_real_results(out: Path) -> None:
    """A real run's summary table and what its folder holds (`syncsim real`, or rank 0 under torchrun)."""
    summary = out / "summary.csv"
    if not summary.exists():
        return
    import pandas as pd

    print(summary_table(pd.read_csv(summary)))
    figures = ", ".join(sorted(p.stem for p in out.glob("*.png")))
    print(
        f"\nresults: {out}/ (summary, iterations, phases, ops, staleness, accuracy: .csv; parameters.npz"
        + ("; trace.json" if (out / "trace.json").exists() else "")
        + (f"; figures: {figures}" if figures else "")
        + ")",
        flush=True,
    )


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
    from sim.config_calibration import CalibrationConfig
    from sim.config_errors import describe

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
    _require_torch("calibrate")
    from real.launch import launch

    overrides, problems = _calibration_overrides(args)
    for line in problems:
        print(f"syncsim calibrate: {line}", file=sys.stderr)
    if problems:
        return 2
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


def _cmd_profile(args: argparse.Namespace) -> int:
    _require_torch("profile")
    import torch

    from real.profiler import measure_profile
    from sim.profile import write_profile

    args.config = "the command line"  # what a bad flag's message names
    for flag, least in (("batch", 1), ("warmup", 0), ("repeats", 1)):
        if getattr(args, flag) < least:
            raise ConfigError(f"--{flag}: expected an integer >= {least}, got {getattr(args, flag)}")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device: {args.device!r} needs a CUDA device and this machine has none; allowed here: cpu")
    device = None if args.device == "auto" else args.device
    profile = measure_profile(args.model, args.batch, args.precision, device, args.warmup, args.repeats, args.seed)
    path = write_profile(profile, args.out)
    print(
        f"{profile.model} at batch {profile.batch_size}, {profile.precision}, on {profile.device}: forward "
        f"{profile.forward_s * 1e3:.2f} ms, backward {profile.backward_s * 1e3:.2f} ms over {len(profile.layers)} "
        f"layers (median of {args.repeats})\nprofile: {path} (use it with workload.profile)"
    )
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    _require_torch("validate")
    from real.validate import validate

    result = validate(
        Path(args.config), _hold(args, Path(args.out)), args.emulate, args.timeout, args.warmup, args.queue
    )
    print(result.table.to_string(index=False, float_format=lambda v: f"{v:,.3f}"))
    print(f"\nvalidation: {result.out}/ (validation.md, validation.csv, validation.png; sim/, real/, calibrated.yaml)")
    return 0 if result.passed else 1


def _cmd_search(args: argparse.Namespace) -> int:
    from sim.output import atomic_write
    from sim.search import SearchError, offline_search

    out = _hold(args, Path(args.out))

    def save(points) -> None:  # type: ignore[no-untyped-def]
        atomic_write(out / "search_points.csv", points.to_csv(index=False))  # every point as it is measured

    try:
        result = offline_search(
            args.config,
            args.policy,
            tolerance=args.tolerance,
            start=args.start,
            smallest=args.smallest,
            seeds=args.seeds,
            on_point=save,
        )
    except SearchError as exc:
        print(f"search stopped: {exc}; the points measured so far are in {out}/search_points.csv", file=sys.stderr)
        return 1
    result.write(out)
    shown = result.table.copy()
    shown["fraction"] = shown["fraction"].map(lambda v: f"{v:.2%}")
    print(shown.to_string(index=False, float_format=lambda v: f"{v:,.4f}"))
    print(
        f"\nsmallest BSP fraction within {args.tolerance:g} of full BSP's accuracy ({result.reference:.4f}): "
        f"{result.best:.2%}\nresults: {out}/ (search.csv, search_points.csv, search.png)"
    )
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.sweep import load_sweep
    from sim.sweep_runner import ERRORS_FILE, PARQUET_FILE, TABLE_FILE, run_sweep

    if args.jobs is not None and args.jobs < 1:
        raise ConfigError(f"--jobs: expected an integer >= 1, got {args.jobs}")
    sweep = load_sweep(args.config, args.set)
    out = _hold(args, Path(args.out) if args.out else Path("results") / f"{sweep.name}-sweep")
    bad = sweep.bad
    print(f"{args.config}: {len(sweep.points)} points over {', '.join(sweep.axes)}; {len(bad)} do not validate")
    for point in bad:  # reported before anything runs; the good points still run
        print(f"  point {point.index} ({point.label()}): {point.error}", file=sys.stderr)
    bar = None
    if not args.quiet and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=len(sweep.points) - len(bad), desc="sweep", unit=" points", dynamic_ncols=True)

    def done(point, error) -> None:  # type: ignore[no-untyped-def]
        if bar is not None:
            bar.update(1)
        if error is not None:
            print(f"  point {point.index} ({point.label()}) failed: {error}", file=sys.stderr)

    try:
        outcome = run_sweep(sweep, out, args.jobs, on_done=done, dask=args.dask)
    except KeyboardInterrupt:
        print(f"\ninterrupted; finished points are kept in {out}/points/ (run again to go on)", file=sys.stderr)
        return 130
    finally:
        if bar is not None:
            bar.close()
    errors = f", errors in {out / ERRORS_FILE}" if len(outcome.errors) else ""
    print(
        f"ran {outcome.ran} points, {outcome.skipped} finished before, {len(outcome.errors)} failed; "
        f"{len(outcome.table)} rows in {out / TABLE_FILE} and {PARQUET_FILE}{errors}"
    )
    return 1 if len(outcome.errors) else 0


def _check_sweep(args: argparse.Namespace) -> int:
    """Every point validated, and the sweep's estimated cost (the sum over its points)."""
    from sim.cost import estimate
    from sim.sweep import load_sweep

    sweep = load_sweep(args.config, args.set)
    good = [p for p in sweep.points if p.config is not None]
    wall = sum(estimate(p.config).wall_s for p in good)  # type: ignore[arg-type]
    print(
        f"{args.config}: sweep of {len(sweep.points)} points over {', '.join(sweep.axes)}; "
        f"{len(good)} validate, estimated {wall:,.0f} s of simulation in all (before parallel processes)"
    )
    if sweep.bad:
        raise ConfigError("\n".join(f"point {p.index} ({p.label()}): {p.error}" for p in sweep.bad))
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    import pandas as pd

    from sim.results import Result
    from sim.sweep_plot import FORMATS, pick_x, sweep_plot
    from sim.sweep_runner import TABLE_FILE

    folder = Path(args.folder)
    args.config = str(folder)  # error messages name the folder
    if (folder / TABLE_FILE).is_file():
        table = pd.read_csv(folder / TABLE_FILE)
        if table.empty:
            raise ConfigError(f"{folder / TABLE_FILE}: no finished points to draw")
        x = pick_x(table, args.x)
        name = folder.name
        title = f"{name}: {args.metric} " + (f"vs {x}" if x is not None else "per policy")
        files = sweep_plot(table, args.metric, x, folder / f"sweep_{args.metric}", title)
        print("wrote " + ", ".join(str(f) for f in files))
        return 0
    try:
        result = Result.read(folder)
    except FileNotFoundError as exc:
        raise ConfigError(f"{exc} (nor {TABLE_FILE} of a sweep)") from None
    files = result.plot(folder, FORMATS)
    print(f"wrote {len(files)} figures in {folder} ({', '.join(FORMATS)})")
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    from sim.config import load_config
    from sim.cost import estimate, limit_problems
    from sim.sweep import is_sweep

    if is_sweep(args.config):
        return _check_sweep(args)
    config = load_config(args.config, args.set)
    cost = estimate(config)
    if problems := limit_problems(cost, config):  # refused before building the cluster: check stays fast
        print(cost, flush=True)  # before the error lines on stderr
        raise ConfigError("\n".join(problems))
    from sim.api import prepare

    cluster, plan = prepare(config)
    view = cluster.view
    buckets = f"{len(plan.buckets)} bucket" + ("s" if len(plan.buckets) != 1 else "")
    print(
        f"{args.config}: ok - {view.world_size} GPUs on {len(view.worker_hosts)} hosts"
        f"{f' in {len(view.racks)} racks' if view.racks else ''}, {len(cluster.links)} links; "
        f"{plan.model}: {plan.gradient_bytes / 1e6:,.1f} MB of gradients in {buckets}, "
        f"{plan.compute_s * 1e3:,.1f} ms compute per iteration; policies: "
        + ", ".join(p.display for p in config.policies)
    )
    print(cost)
    if config.workload.bucket_mb * 1e6 > plan.gradient_bytes:
        print(
            f"note: workload.bucket_mb: {config.workload.bucket_mb:g} MB is more than the model's "
            f"{plan.gradient_bytes / 1e6:,.1f} MB of gradients: one bucket holds every dense gradient (as DDP "
            "does with such a bucket_cap_mb)"
        )
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from policies.registry import available
    from sim.gpus import GPU_NAMES
    from sim.zoo import MODEL_NAMES

    print("policies:", ", ".join(sorted(available())))
    print("models:   synthetic,", ", ".join(MODEL_NAMES))
    print("gpus:    ", ", ".join(GPU_NAMES))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from real.emulate.shaping import QUEUES  # stdlib only, like real.emulate.cli below
    from sim.zoo import MODEL_NAMES

    parser = argparse.ArgumentParser(prog="syncsim", description="Simulate synchronization schemes on a cluster.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every policy of a config and write the results")
    run.add_argument("config", help="YAML config file")
    run.add_argument("--out", help="output folder (default: results/<config name>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--no-plot", action="store_true", help="skip every figure (.png); tables and trace still written")
    _add_set(run)
    run.set_defaults(func=_cmd_run)
    real = sub.add_parser("real", help="run every policy of a config on real torch.distributed processes")
    real.add_argument(
        "config", help="YAML config file (its numerics: model is trained; without one, the workload's zoo model)"
    )
    real.add_argument("--nproc", type=int, help="worker processes (must equal the cluster's GPUs; servers are added)")
    real.add_argument("--out", help="output folder (default: results/<config name>-real)")
    real.add_argument("--timeout", type=float, default=60.0, help="seconds before a silent peer counts as dead")
    real.add_argument(
        "--backend",
        choices=["auto", "gloo", "nccl"],
        default="auto",
        help="auto: gloo (training keeps tensors on the CPU)",
    )
    real.add_argument("--emulate", metavar="TAG", help="run each rank in its host's namespace of `syncsim emulate up`")
    real.set_defaults(func=_cmd_real)
    cal = sub.add_parser("calibrate", help="measure a cluster with real processes and write a calibrated config")
    cal.add_argument("config", help="YAML config (its cluster: shape and numerics: model are measured)")
    cal.add_argument("--out", required=True, help="the calibrated YAML to write")
    cal.add_argument("--emulate", metavar="TAG", help="measure the emulated cluster `syncsim emulate up` built")
    cal.add_argument("--timeout", type=float, default=120.0)
    cal.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto", help="auto: nccl with GPUs")
    cal.add_argument("--repeats", type=int, help="timed repeats per measurement (default: calibration.repeats, 5)")
    cal.add_argument("--statistic", help="median, mean or min over repeats (default: calibration.statistic, median)")
    cal.add_argument(
        "--uplink-bytes", dest="uplink_bytes", type=int, help="bytes per host in the rack-egress test (default: probed)"
    )
    cal.add_argument(
        "--max-bytes", dest="max_bytes", type=int, help="the largest message the probe may choose (default: 64 MiB)"
    )
    cal.set_defaults(func=_cmd_calibrate)
    val = sub.add_parser("validate", help="calibrate, run each policy real and simulated, compare (root: emulates)")
    val.add_argument("config")
    val.add_argument("--out", required=True, help="output folder")
    val.add_argument("--emulate", metavar="TAG", help="use this running emulation (default: build one from the config)")
    val.add_argument("--timeout", type=float, default=120.0)
    val.add_argument("--warmup", type=int, default=3, help="iterations dropped on both sides before comparing")
    val.add_argument(
        "--queue",
        choices=QUEUES,
        default="fair",
        help="links' queueing when the emulation is built here (docs/emulation.md)",
    )
    val.set_defaults(func=_cmd_validate)
    from real.emulate.cli import add_parser as add_emulate

    add_emulate(sub)
    search = sub.add_parser(
        "search", help="Sync-Switch's offline policy: the smallest BSP fraction that keeps BSP's accuracy (numerics)"
    )
    search.add_argument("config", help="YAML config with a numerics: section and a sync_switch policy")
    search.add_argument("--out", required=True, help="output folder")
    search.add_argument("--policy", help="the sync_switch entry's label (default: the first sync_switch)")
    search.add_argument("--tolerance", type=float, default=0.01, help="accuracy a fraction may lose to full BSP")
    search.add_argument("--start", type=float, default=0.5, help="the first fraction tried (then halved)")
    search.add_argument("--smallest", type=float, default=0.0625, help="stop halving below this fraction")
    search.add_argument("--seeds", type=int, default=1, help="average the final accuracy over this many seeds")
    search.set_defaults(func=_cmd_search)
    check = sub.add_parser("check", help="validate a config and estimate its cost, without running it")
    check.add_argument("config")
    _add_set(check)
    check.set_defaults(func=_cmd_check)

    sweep = sub.add_parser("sweep", help="run every point of a config's sweep: section; re-runs skip finished points")
    sweep.add_argument("config", help="YAML config with a sweep: section")
    sweep.add_argument("--out", help="output folder (default: results/<config name>-sweep)")
    sweep.add_argument("--jobs", type=int, help="points run at once, each in its own process (default: the cores)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument("--dask", metavar="ADDRESS", help="run the points on this Dask scheduler (tcp://HOST:8786)")
    _add_set(sweep)
    sweep.set_defaults(func=_cmd_sweep)

    plot = sub.add_parser("plot", help="re-draw the figures of a run or a sweep folder from its saved tables")
    plot.add_argument("folder", help="a folder `syncsim run` or `syncsim sweep` wrote")
    plot.add_argument("--metric", default="throughput_samples_s", help="sweeps: the summary column to draw")
    plot.add_argument("--x", help="sweeps: the axis on the x axis (default: the first numeric axis that varies)")
    plot.set_defaults(func=_cmd_plot)
    prof = sub.add_parser("profile", help="measure a zoo model's per-layer compute times on this machine's device")
    prof.add_argument("model", choices=MODEL_NAMES, help="a zoo model")
    prof.add_argument("--batch", type=int, required=True, help="samples per iteration (per GPU)")
    prof.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="fp32",
        help="tf32: TF32 matmuls and convolutions; fp16, bf16: under autocast (real/precision.py)",
    )
    prof.add_argument("--out", required=True, help="the profile (YAML) to write")
    prof.add_argument("--device", default="auto", help="auto (the current CUDA device, else the CPU), cpu, cuda:N")
    prof.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    prof.add_argument("--repeats", type=int, default=10, help="timed iterations; each layer's median is kept")
    prof.add_argument("--seed", type=int, default=0, help="seeds the model's weights and the synthetic batch")
    prof.set_defaults(func=_cmd_profile)
    lst = sub.add_parser("list", help="list policies, models and GPUs")
    lst.set_defaults(func=_cmd_list)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with ExitStack() as args.held:  # output folders locked by the command
            return int(args.func(args))
    except ConfigError as exc:
        print(f"config error in {getattr(args, 'config', '?')}:", file=sys.stderr)
        for line in str(exc).splitlines():
            print(f"  {line}", file=sys.stderr)
        return 2
    except OutputBusy as exc:
        print(f"syncsim: {exc}", file=sys.stderr)
        return 3
    except SyncsimError as exc:  # a step that could not run (calibration, emulation, a policy): its message
        print(f"syncsim {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
