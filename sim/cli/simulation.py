"""`syncsim run`, `check` and `list`: simulate a config, check one without running it, list what exists."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sim.cli.common import Subparsers, add_set, exit_code, hold, progress, writing
from sim.cli.report import Provenance, add_report_flag, report_after
from sim.errors import ConfigError


def add_run(sub: Subparsers) -> None:
    """`syncsim run CONFIG`: every policy of the config, simulated; results written as they finish."""
    run = sub.add_parser("run", help="run every policy of a config and write the results")
    run.add_argument("config", help="YAML config file")
    run.add_argument("--out", help="output folder (default: results/<config name>)")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--no-plot", action="store_true", help="skip every figure (.png); tables and trace still written")
    add_report_flag(run)
    add_set(run)
    run.set_defaults(func=_cmd_run)


def _cmd_run(args: argparse.Namespace) -> int:
    from sim.config import load_config
    from sim.estimate.cost import check_limits

    config = load_config(args.config, args.set)  # a sweep's file is refused here, naming `syncsim sweep`
    record = Provenance(args.argv, config.seed, config.name)
    check_limits(config)  # a run estimated over the limits is refused before its output folder exists
    from sim.api import simulate  # pandas and the engine: only for a run that goes ahead
    from sim.engine.faults import late_faults
    from sim.results.console import decisions_text, summary_table
    from sim.results.result import clear_run_files, run_files_text

    out = hold(args, Path(args.out) if args.out else Path("results") / config.name)
    with writing(out, "clearing the previous run's files"):
        clear_run_files(out)  # an older run's files must not sit beside this run's (its accuracy.csv, figures)
    from sim.errors import RunInterrupted

    saved = []  # the result the last save wrote

    def save(partial) -> None:  # type: ignore[no-untyped-def]
        with writing(out, "writing the finished policies' tables"):
            partial.write(out, plot=False, trace=False)  # tables only, and enough to lose nothing
        saved[:] = [partial]

    try:
        result = simulate(config, progress=not args.quiet and sys.stderr.isatty(), on_policy_done=save)
    except RunInterrupted as stop:  # every policy still gets its summary row: the unfinished ones say why
        with writing(out, "writing the finished policies' tables"):
            stop.result.write(out, plot=False, trace=False)
        record.write(out)
        status = stop.result.summary["status"]
        finished = f"{sum(~status.str.startswith('interrupted'))} of {len(status)} policies finished"
        print(f"\nstopped by {stop.signal}; {finished}, kept in {out}/", file=sys.stderr)
        return exit_code(stop)
    with writing(out, "writing the results"):  # the last policy's save wrote the tables of this very result
        result.write(out, plot=not args.no_plot, tables=not saved or saved[0] is not result)
    record.write(out)
    print(summary_table(result.summary))
    if decided := decisions_text(result.decisions):
        print("\n" + decided)
    print(f"\nresults: {out}/ ({run_files_text(out)})")  # what is there: no trace or figures unless written
    if args.report:
        report_after(out)
    for label, error in result.errors.items():
        print(f"policy {label!r} stopped early: {error}", file=sys.stderr)
    for line in late_faults(config, {run.label: run.sim_time_s for run in result.runs if run.error is None}):
        print(f"note: {line}", file=sys.stderr)
    return 1 if result.errors else 0


# `check` builds the cluster (to check fault targets and policy placement against it) only when the
# estimate says that takes at most this long; a larger cluster is answered from the estimate alone.
CHECK_BUILD_BUDGET_S = 2.0


def add_check(sub: Subparsers) -> None:
    """`syncsim check CONFIG`: validate a config (or a sweep: `sim.experiments.sweep_check`) and estimate its cost."""
    check = sub.add_parser("check", help="validate a config and estimate its cost, without running it")
    check.add_argument("config")
    add_set(check)
    check.set_defaults(func=_cmd_check)


def _cmd_check(args: argparse.Namespace) -> int:
    from sim.config import load_config
    from sim.estimate.cost import estimate, limit_problems
    from sim.experiments.sweep import is_sweep

    if is_sweep(args.config):
        return _check_sweep(args)
    config = load_config(args.config, args.set)
    cost = estimate(config)
    if problems := limit_problems(cost, config):  # refused before building the cluster: check stays fast
        print(cost, flush=True)  # before the error lines on stderr
        raise ConfigError("\n".join(problems))
    build_s = dict(cost.wall_terms).get("building the cluster", 0.0)
    if build_s > CHECK_BUILD_BUDGET_S:  # answer from the estimate: building alone would take longer than check may
        print(
            f"{args.config}: ok as far as the config and its estimate go - {cost.workers:,} GPUs on {cost.hosts:,} "
            f"hosts, {cost.links:,} links; policies: " + ", ".join(p.display for p in config.policies)
        )
        print(cost)
        print(
            f"note: the cluster was not built (~{build_s:,.0f} s for {cost.links:,} links): what needs it (fault "
            "targets, policy placement, server hosts) is checked when `syncsim run` starts, before simulating"
        )
        return 0
    from sim.api import prepare

    if build_s > 0.5 and sys.stderr.isatty() or build_s > 1.0:
        print(
            f"building the cluster ({cost.links:,} links, ~{build_s:.0f} s) to check it ...",
            file=sys.stderr,
            flush=True,
        )
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


def _check_sweep(args: argparse.Namespace) -> int:
    """The sweep's points validated (every one of a small sweep; of a large one, every axis setting and a
    sample: `sim.experiments.sweep_check`) and its estimated cost."""
    from sim.experiments.sweep import read_sweep
    from sim.experiments.sweep_check import check_sweep

    # counted first: too many is refused at once
    check = check_sweep(read_sweep(args.config, args.set), progress("validating"))
    points, bad = check.sweep.points, check.sweep.bad
    done = len(points) - len(bad)
    average = "" if check.estimated == done else f" (the mean of {check.estimated} points' estimates)"
    wall = f"estimated {'~' if average else ''}{check.wall_s:,.0f} s of simulation in all{average}"
    if check.whole:
        print(
            f"{args.config}: sweep of {check.total:,} points over {', '.join(check.sweep.axes)}; "
            f"{done:,} validate, {wall}"
        )
    else:
        if check.settings is None:
            which = "as many as check's time allowed, chosen by axis setting"
        else:
            settings, in_all = check.settings
            each = "every setting" if settings == in_all else f"{settings:,} of the {in_all:,} settings"
            which = f"{each} of each axis beside the first point's others, the last point and a seeded sample"
        print(
            f"{args.config}: sweep of {check.total:,} points over {', '.join(check.sweep.axes)}; {len(points):,} "
            f"validated in full ({which}), {done:,} of them valid; {wall}, counting the others as valid\n"
            f"note: the other {check.total - len(points):,} points are validated when `syncsim sweep` builds "
            "them; one that fails there gets its row in errors.csv, and the rest run"
        )
    if bad:
        raise ConfigError("\n".join(f"point {p.index} ({p.label()}): {p.error}" for p in bad))
    return 0


def add_list(sub: Subparsers) -> None:
    """`syncsim list`: the policies, models and GPUs a config may name."""
    lst = sub.add_parser("list", help="list policies, models and GPUs")
    lst.add_argument("-v", "--verbose", action="store_true", help="one line each: what it is, its figures")
    lst.set_defaults(func=_cmd_list)


def _cmd_list(args: argparse.Namespace) -> int:
    from policies.registry import available
    from sim.catalog.gpus import GPU_NAMES
    from sim.catalog.zoo import MODEL_NAMES

    if args.verbose:
        from sim.cli.listing import verbose_listing

        print(verbose_listing())
        return 0

    print("policies:", ", ".join(sorted(available())))
    print("models:   synthetic,", ", ".join(MODEL_NAMES))
    print("          transformer (workload.transformer: numbers or a config.json), profiled (your module's profile)")
    print("gpus:    ", ", ".join(GPU_NAMES))
    return 0
