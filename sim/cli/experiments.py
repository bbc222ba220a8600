"""`syncsim sweep`, `search`, `bandwidth` and `plot`: many simulations of one config, and figures redrawn
from saved tables."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sim.cli.common import Subparsers, add_set, exit_code, hold, progress, writing
from sim.cli.report import Provenance, add_report_flag, report_after
from sim.errors import ConfigError, UsageError
from sim.files import atomic_write
from sim.flags import count, number
from sim.report.names import SWEEP_CONFIG_FILE


def add_search(sub: Subparsers) -> None:
    """`syncsim search CONFIG --out DIR`: Sync-Switch's offline policy in numerics mode."""
    search = sub.add_parser(
        "search", help="Sync-Switch's offline policy: the smallest BSP fraction that keeps BSP's accuracy (numerics)"
    )
    search.add_argument("config", help="YAML config with a numerics: section and a sync_switch policy")
    search.add_argument("--out", required=True, help="output folder")
    search.add_argument("--policy", help="the sync_switch entry's label (default: the first sync_switch)")
    fraction = number(0, above=True, what="a fraction")  # below 1 too: checked with the other flag
    search.add_argument(
        "--tolerance",
        type=number(0, what="an accuracy difference"),
        default=0.01,
        help="accuracy a fraction may lose to full BSP",
    )
    search.add_argument("--start", type=fraction, default=0.5, help="the first fraction tried (then halved)")
    search.add_argument("--smallest", type=fraction, default=0.0625, help="stop halving below this fraction")
    search.add_argument(
        "--seeds", type=count(1), default=3, help="seeds per fraction (config's seed, +1, ...); decides on their mean"
    )
    add_set(search)
    search.set_defaults(func=_cmd_search)


def _cmd_search(args: argparse.Namespace) -> int:
    from sim.config import load_config
    from sim.experiments.search import SearchError, offline_search, planned_runs
    from sim.files import atomic_write

    if not 0 < args.smallest <= args.start < 1:
        raise UsageError(f"--smallest, --start: need 0 < --smallest ({args.smallest}) <= --start ({args.start}) < 1")
    config = load_config(args.config, args.set)
    out = hold(args, Path(args.out))
    report = search_progress(planned_runs(args.start, args.smallest, args.seeds))

    def save(points) -> None:  # type: ignore[no-untyped-def]
        atomic_write(out / "search_points.csv", points.to_csv(index=False))  # every point as it is measured
        report(points)

    try:
        result = offline_search(
            config,
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
    finally:
        report(None)
    result.write(out)
    shown = result.table.copy()
    shown["fraction"] = shown["fraction"].map(lambda v: f"{v:.2%}")
    print(shown.to_string(index=False, float_format=lambda v: f"{v:,.4f}"))
    print(
        f"\nsmallest BSP fraction within {args.tolerance:g} of full BSP's accuracy (mean of {args.seeds} "
        f"seed{'s' * (args.seeds != 1)}: {result.reference:.4f}): {result.best:.2%}"
    )
    for line in result.verdicts():
        print(f"  {line}")
    print(f"results: {out}/ (search.csv, search_points.csv, search_separation.csv, search.png)")
    return 0


def search_progress(most: int) -> Callable[[Any], None]:
    """`report(points)` after each run of a search: a bar on a terminal; else (a pipe, a log file) a
    line per finished run, so a search of minutes is never silent. `report(None)` ends it."""
    start = time.monotonic()
    bar = None
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=most, desc="search", unit=" runs", dynamic_ncols=True, leave=False)

    def report(points: Any) -> None:
        if points is None:
            if bar is not None:
                bar.close()
            return
        last = points.iloc[-1]
        said = f"fraction {last['fraction']:.2%}, seed {int(last['seed'])}: final accuracy {last['final_accuracy']:.4f}"
        if bar is not None:
            bar.update(len(points) - bar.n)
            bar.set_postfix_str(said)
        else:
            line = f"search: run {len(points)} of at most {most} done ({said}), {time.monotonic() - start:.0f} s"
            print(line, file=sys.stderr, flush=True)

    return report


def add_sweep(sub: Subparsers) -> None:
    """`syncsim sweep CONFIG`: every point of a config's `sweep:` section."""
    sweep = sub.add_parser("sweep", help="run every point of a config's sweep: section; re-runs skip finished points")
    sweep.add_argument("config", help="YAML config with a sweep: section")
    sweep.add_argument("--out", help="output folder (default: results/<config name>-sweep)")
    sweep.add_argument("--jobs", type=count(1), help="points run at once, each in its own process (default: the cores)")
    sweep.add_argument("--quiet", action="store_true", help="no progress bar")
    sweep.add_argument("--dask", metavar="ADDRESS", help="run the points on this Dask scheduler (tcp://HOST:8786)")
    add_report_flag(sweep)
    add_set(sweep)
    sweep.set_defaults(func=_cmd_sweep)


def _cmd_sweep(args: argparse.Namespace) -> int:
    from sim.experiments.sweep import load_sweep
    from sim.experiments.sweep_runner import ERRORS_FILE, PARQUET_FILE, TABLE_FILE, run_sweep

    sweep = load_sweep(args.config, args.set, None if args.quiet else progress("validating"))
    record = Provenance(args.argv, None, sweep.name)  # each point has its own seed (its summary row says it)
    out = hold(args, Path(args.out) if args.out else Path("results") / f"{sweep.name}-sweep")
    with writing(out, "copying the sweep's config"):
        atomic_write(out / SWEEP_CONFIG_FILE, Path(args.config).read_text())
    bad = sweep.bad
    print(f"{args.config}: {len(sweep.points)} points over {', '.join(sweep.axes)}; {len(bad)} do not validate")
    for point in bad:  # reported before anything runs; the good points still run
        print(f"  point {point.index} ({point.label()}): {point.error}", file=sys.stderr)
    bar = None
    if not args.quiet and sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=len(sweep.points) - len(bad), desc="sweep", unit=" points", dynamic_ncols=True)

    piped = not args.quiet and bar is None  # a pipe or a log file: a line per point, never minutes of silence
    started, finished = time.perf_counter(), [0]

    def done(point, error) -> None:  # type: ignore[no-untyped-def]
        finished[0] += 1
        if bar is not None:
            bar.update(1)
        if piped:
            print(
                f"sweep: point {point.index} ({point.label()}) done, {finished[0]} of {len(sweep.points) - len(bad)}, "
                f"{time.perf_counter() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )
        if error is not None:
            print(f"  point {point.index} ({point.label()}) failed: {error}", file=sys.stderr)

    try:
        outcome = run_sweep(sweep, out, args.jobs, on_done=done, dask=args.dask)
    except KeyboardInterrupt as stop:
        from sim.errors import signal_name

        record.write(out)
        print(
            f"\nstopped by {signal_name(stop)}; finished points are kept in {out}/points/ (run again to go on)",
            file=sys.stderr,
        )
        return exit_code(stop)
    finally:
        if bar is not None:
            bar.close()
    record.write(out)
    if args.report:
        report_after(out)
    errors = f", errors in {out / ERRORS_FILE}" if len(outcome.errors) else ""
    print(
        f"ran {outcome.ran} points, {outcome.skipped} finished before, {len(outcome.errors)} failed; "
        f"{len(outcome.table)} rows in {out / TABLE_FILE} and {PARQUET_FILE}{errors}"
    )
    return 1 if len(outcome.errors) else 0


def add_plot(sub: Subparsers) -> None:
    """`syncsim plot DIR`: the figures of a run or a sweep, redrawn from its tables."""
    plot = sub.add_parser("plot", help="re-draw the figures of a run or a sweep folder from its saved tables")
    plot.add_argument("folder", help="a folder `syncsim run` or `syncsim sweep` wrote")
    plot.add_argument("--metric", default="throughput_samples_s", help="sweeps: the summary column to draw")
    plot.add_argument("--x", help="sweeps: the axis on the x axis (default: the first numeric axis that varies)")
    plot.add_argument("--xlabel", help="sweeps: the x axis's label (default: the axis's name in words, with its unit)")
    plot.add_argument("--ylabel", help="sweeps: the y axis's label (default: the metric in words, with its unit)")
    plot.add_argument(
        "--logx",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sweeps: a log x axis, or --no-logx a linear one (default: log when the values are log-spaced)",
    )
    plot.add_argument("--logy", action="store_true", help="sweeps: a log y axis")
    plot.set_defaults(func=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    import pandas as pd

    from sim.experiments.sweep_plot import FORMATS, pick_x, sweep_plot
    from sim.experiments.sweep_runner import TABLE_FILE, config_name
    from sim.results import Result

    folder = Path(args.folder)
    args.config = str(folder)  # error messages name the folder
    if (folder / TABLE_FILE).is_file():
        table = pd.read_csv(folder / TABLE_FILE)
        if table.empty:
            raise ConfigError(f"{folder / TABLE_FILE}: no finished points to draw")
        x = pick_x(table, args.x)
        scales = {"xlabel": args.xlabel, "ylabel": args.ylabel, "logx": args.logx, "logy": args.logy}
        name = config_name(folder)  # a sweep from before the name was kept is titled by its folder
        title = f"config: {name}" if name else f"{folder.name} (config not recorded)"
        files = sweep_plot(table, args.metric, x, folder / f"sweep_{args.metric}", title, **scales)
        print("wrote " + ", ".join(str(f) for f in files))
        return 0
    flags = {"--x": args.x, "--xlabel": args.xlabel, "--ylabel": args.ylabel, "--logy": args.logy or None}
    flags["--logx" if args.logx else "--no-logx"] = args.logx
    given = [flag for flag, value in flags.items() if value is not None]
    if given:  # a run's figures have fixed axes
        raise UsageError(f"{', '.join(given)}: only for a sweep folder (one with {TABLE_FILE})")
    try:
        result = Result.read(folder)
    except FileNotFoundError as exc:
        raise UsageError(
            f"folder: {exc} (nor {TABLE_FILE} of a sweep); name a folder `syncsim run` or `sweep` wrote"
        ) from None
    files = result.plot(folder, FORMATS)
    print(f"wrote {len(files)} figures in {folder} ({', '.join(FORMATS)})")
    return 0


def add_fidelity(sub: Subparsers) -> None:
    """`syncsim fidelity`: every published nccl-tests figure and training scaling against the simulator's."""
    fidelity = sub.add_parser(
        "fidelity",
        help="published nccl-tests figures and 1-to-8-GPU training scaling against the simulator's (docs/fidelity.md)",
    )
    fidelity.add_argument("--out", help="also write the tables to this folder (collectives.csv, scaling.csv)")
    fidelity.set_defaults(func=_cmd_fidelity)


def _cmd_fidelity(args: argparse.Namespace) -> int:
    import pandas as pd

    from sim.experiments.fidelity import fidelity_table, summary
    from sim.experiments.scaling_all import one_host_pairs
    from sim.files import atomic_write

    collectives, scaling = fidelity_table(), one_host_pairs()
    if args.out:
        out = hold(args, Path(args.out))
        atomic_write(out / "collectives.csv", collectives.to_csv(index=False))
        atomic_write(out / "scaling.csv", scaling.to_csv(index=False))

    def shown(table: pd.DataFrame, hidden: tuple[str, ...]) -> str:
        table = table.drop(columns=list(hidden))
        signed = {c: table[c].map(lambda v: f"{v:+.1%}") for c in ("error", "null_error") if c in table}
        return table.assign(**signed).to_string(index=False)

    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(shown(collectives, ("source", "system")))
        print()
        print(summary(collectives).to_string(float_format=lambda v: f"{v:.1%}"))
        print("\n1-to-8-GPU training scaling (PyTorch DDP, one DGX host):")
        print(shown(scaling, ("source", "row", "base_row", "seq_len", "nodes", "gpus", "base_gpus")))
        errors, null = scaling["error"].abs(), scaling["null_error"].abs()
        print(
            f"\n{len(scaling)} pairs: median |error| {errors.median():.1%}, worst {errors.max():.1%}; "
            f"perfect scaling (null): median {null.median():.1%}, worst {null.max():.1%}"
        )
    return 0


def add_bandwidth(sub: Subparsers) -> None:
    """`syncsim bandwidth CONFIG`: the WAN bandwidth each policy (and H) needs for each utilization target."""
    from sim.experiments.wan_bandwidth import PERIODS, TARGETS, TOLERANCE

    bandwidth = sub.add_parser(
        "bandwidth",
        help="the smallest WAN bandwidth at which each policy (and each H) reaches each compute utilization "
        "(docs/wan.md)",
    )
    bandwidth.add_argument("config", help="YAML config of a multi_datacenter cluster (with a wan: section)")
    bandwidth.add_argument(
        "--targets", type=_utilization, nargs="+", default=list(TARGETS), help="compute utilizations, each in (0, 1)"
    )
    bandwidth.add_argument(
        "--periods", type=count(1, "a period"), nargs="+", default=list(PERIODS),
        help="H of every policy with a period setting (others run once, as configured)",
    )  # fmt: skip
    bandwidth.add_argument(
        "--tolerance", type=number(0, above=True, what="a relative tolerance"), default=TOLERANCE,
        help="relative width of the bracket each answer is the top of",
    )  # fmt: skip
    bandwidth.add_argument("--out", help="output folder for bandwidth.csv (default: results/<config name>-bandwidth)")
    add_set(bandwidth)
    bandwidth.set_defaults(func=_cmd_bandwidth)  # exit 1 when a case could not run (its rows say why)


def _utilization(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a utilization strictly between 0 and 1, got {text}")
    return value


def _cmd_bandwidth(args: argparse.Namespace) -> int:
    import pandas as pd

    from policies.registry import add_search_folder
    from sim.config import read_config
    from sim.experiments.wan_bandwidth import bandwidth_sweep, check_arguments, shown
    from sim.files import atomic_write

    check_arguments(args.targets, args.periods, args.tolerance)
    data = read_config(args.config, args.set)
    add_search_folder(Path(args.config).parent)
    name = data.get("name", Path(args.config).stem) if isinstance(data, dict) else Path(args.config).stem
    out = hold(args, Path(args.out) if args.out else Path("results") / f"{name}-bandwidth")

    def started(case) -> None:  # type: ignore[no-untyped-def]
        h = f" H={case.period}" if case.period is not None else ""
        print(f"  {case.label}{h}: {case.iterations} iterations per run", file=sys.stderr, flush=True)

    table = bandwidth_sweep(data, args.targets, args.periods, args.tolerance, on_case=started)
    with writing(out, "cannot write bandwidth.csv"):
        atomic_write(out / "bandwidth.csv", table.to_csv(index=False))
    wan = data["cluster"]["wan"]
    print(
        f"WAN bandwidth (Gb/s, each direction, cluster.wan.bandwidth_gbps with every link scaled alike) "
        f"for each compute utilization; RTT {wan['rtt_ms']:g} ms; within {args.tolerance:.0%}:"
    )
    with pd.option_context("display.width", 200, "display.max_rows", None):
        print(shown(table).to_string(index=False))
    notes = table[table["status"] != "ok"].astype({"period": object})
    for (policy, period, status), rows in notes.groupby(["policy", "period", "status"], dropna=False, sort=False):
        h = f" H={int(period)}" if pd.notna(period) else ""
        print(f"  {policy}{h}, {', '.join(f'{t:.0%}' for t in rows['target'])}: {status}")
    runs = int(table.groupby(["policy", "period"], dropna=False)["simulations"].max().sum())
    print(f"{runs} simulations; {out}/bandwidth.csv")
    return 1 if table["status"].str.startswith("failed").any() else 0
