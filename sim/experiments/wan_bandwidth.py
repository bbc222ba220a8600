"""`syncsim bandwidth`: the smallest WAN bandwidth at which each policy of a config (and each H of one
with a `period`) keeps its GPUs computing a target share of the time (`compute_utilization`, docs/wan.md).

Every WAN link's bandwidth is scaled together, the config's `cluster.wan.bandwidth_gbps` being the figure
reported. Utilization does not fall as bandwidth rises, so each target is found by a bracketing search in
log space (`needed`), every simulation cached and shared between the targets of a case.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from sim.errors import ConfigError, UsageError

if TYPE_CHECKING:  # imported by `bandwidth_sweep`: `syncsim`'s parser reads this module's defaults
    import pandas as pd

TARGETS = (0.5, 0.8, 0.9, 0.95)
PERIODS = (10, 50, 100, 500)
TOLERANCE = 0.02  # the answer B is within this of the true threshold: u(B / (1 + tolerance)) < target <= u(B)
PERIODS_PER_RUN = 1  # a periodic policy runs warm-up + H (+ its overlap) steps: one whole period, as every later one
LOWEST_GBPS, HIGHEST_GBPS = 1e-3, 1e6  # the bounds of any bandwidth a config accepts (sim/config/wan.py)
NO_RTT_MS = 1e-6  # the least round trip to try when asking whether the WAN's latency is the floor
MAX_PROBES = 60  # per target; bisection alone needs log2(ln(1e9) / ln(1.02)) ~ 10 from the widest bracket
COLUMNS = ["policy", "name", "period", "target", "gbps", "utilization", "lower_gbps", "simulations", "status"]


@dataclass(frozen=True)
class Case:
    """One policy entry at one H (`period` None: the entry as configured) and the steps it runs."""

    label: str
    name: str
    index: int  # the entry's place in the config's policies (each run holds it alone, as policies[0])
    period: Optional[int]
    entry: dict[str, Any]
    iterations: int
    skipped: int  # the summary's warm-up: the policy's data-parallel steps (and its overlap's shift)


@dataclass
class Probe:
    """u(B) for one case, each bandwidth simulated once; `data` the validated config mapping."""

    data: Mapping[str, Any]
    case: Case
    seen: dict[float, float] = field(default_factory=dict)
    other: dict[tuple[float, tuple[tuple[str, Any], ...]], float] = field(default_factory=dict)  # other WAN settings
    runs: int = 0
    hint: float = 0.0  # a bandwidth below every target's answer: bytes over the busiest WAN link x u / compute

    def __call__(self, gbps: float, **wan: Any) -> float:
        if not wan and gbps in self.seen:
            return self.seen[gbps]
        key = (gbps, tuple(sorted(wan.items())))
        if wan and key in self.other:
            return self.other[key]
        config = case_config(self.data, self.case, gbps, **wan)
        self.runs += 1
        utilization, wan_bytes, compute_s = simulate_case(config)
        if not wan:
            self.seen[gbps] = utilization
            # the link moves wan_bytes within the run, which lasts compute_s / u when u is reached, so
            # u needs B >= wan_bytes u / compute_s: per unit of u, this
            self.hint = max(self.hint, wan_bytes * 8e-9 / compute_s if compute_s > 0 else 0.0)
        else:
            self.other[key] = utilization
        return utilization

    def below(self, target: float) -> float:
        """A bandwidth under the answer for `target` (the link's bytes in the run's time at that u)."""
        return self.hint * target

    def bracket(self, target: float) -> tuple[Optional[float], Optional[float]]:
        """The highest bandwidth seen below `target` under the lowest one seen at or above it."""
        above = [b for b, u in self.seen.items() if u >= target]
        hi = min(above) if above else None
        below = [b for b, u in self.seen.items() if u < target and (hi is None or b < hi)]
        return (max(below) if below else None), hi


class RunFailed(Exception):
    """A case's simulation did not finish (its summary's status)."""


def check_arguments(targets: Sequence[float], periods: Sequence[int], tolerance: float) -> None:
    """One line naming the flag for any value outside its range."""
    if not targets:
        raise UsageError("--targets: give at least one utilization, strictly between 0 and 1")
    for t in targets:
        if not (isinstance(t, (int, float)) and 0 < t < 1):
            raise UsageError(f"--targets: {t!r} is not a utilization; allowed: numbers strictly between 0 and 1")
    if not periods:
        raise UsageError("--periods: give at least one H, an integer from 1 to 100000")
    for h in periods:
        if isinstance(h, bool) or not isinstance(h, int) or not 1 <= h <= 100_000:
            raise UsageError(f"--periods: {h!r} is not a period; allowed: integers from 1 to 100000")
    if not (isinstance(tolerance, (int, float)) and 0 < tolerance <= 1):
        raise UsageError(f"--tolerance: {tolerance!r}; allowed: a relative tolerance above 0, at most 1")


def wan_of(data: Mapping[str, Any]) -> dict[str, Any]:
    """The config's `cluster.wan` (validated); a config without one is refused naming it."""
    from sim.config import parse_config

    config = parse_config(copy.deepcopy(dict(data)))
    if getattr(config.cluster, "topology", None) != "multi_datacenter":
        raise ConfigError(
            f"cluster.wan: `syncsim bandwidth` scales the WAN's bandwidth and this cluster has none (topology "
            f"{config.cluster.topology}); allowed: cluster.topology: multi_datacenter with a wan: section (docs/wan.md)"
        )
    return dict(data["cluster"]["wan"])


def cases(data: Mapping[str, Any], periods: Iterable[int]) -> list[Case]:
    """Every policy entry, at each H in `periods` when its settings have a `period`."""
    from policies.registry import create, resolve

    out = []
    for index, raw in enumerate(data["policies"]):
        entry = dict(raw)
        label, name = entry.get("label") or entry["name"], entry["name"]
        settings = {k: v for k, v in entry.items() if k not in ("name", "label")}
        if "period" not in resolve(name).Settings.model_fields:
            out.append(Case(label, name, index, None, entry, int(data.get("iterations", 1)), _config_warmup(data)))
            continue
        for h in periods:
            made = create(name, {**settings, "period": h}).settings
            warmup = int(getattr(made, "warmup_steps", 0))
            # a launched average is waited overlap_steps later: shifting the window by them puts every
            # launch of the periods summarised and its wait inside it
            shift = int(getattr(made, "overlap_steps", 0))
            steps = warmup + PERIODS_PER_RUN * h + shift
            out.append(Case(label, name, index, h, {**entry, "period": h}, steps, warmup + shift))
    return out


def _config_warmup(data: Mapping[str, Any]) -> int:
    return int(data.get("warmup_iterations") or 0)


def case_config(data: Mapping[str, Any], case: Case, gbps: float, **wan: Any) -> Any:
    """The config of `case` with every WAN link's bandwidth scaled so that `cluster.wan`'s is `gbps`
    (`wan`: other WAN settings for every link, as `rtt_ms`, `connection_window_mb`)."""
    from sim.config import parse_config

    d = copy.deepcopy(dict(data))
    cluster_wan = d["cluster"]["wan"]
    scale = gbps / float(cluster_wan["bandwidth_gbps"])
    cluster_wan["bandwidth_gbps"] = gbps
    for link in cluster_wan.get("links") or []:
        if "bandwidth_gbps" in link:
            link["bandwidth_gbps"] = float(link["bandwidth_gbps"]) * scale
        for key in wan:
            link.pop(key, None)  # the override holds for every link
    cluster_wan.update(wan)
    d.update(policies=[case.entry], iterations=case.iterations, warmup_iterations=case.skipped)
    d["simulation"] = {**(d.get("simulation") or {}), "trace": False}
    return parse_config(d)


def simulate_case(config: Any) -> tuple[float, float, float]:
    """compute_utilization, the bytes the busiest WAN link carried and a rank's mean compute time (s)."""
    from sim.api import simulate
    from sim.cluster.topology import build_cluster

    result = simulate(config)
    row = result.summary.iloc[0]
    if row["status"] != "ok":
        raise RunFailed(str(row["status"]).removeprefix("failed: "))
    links = [i for cable in build_cluster(config.cluster, config.seed).wan for i in cable.links]
    carried = result.runs[0].link_bytes
    wan_bytes = float(max(carried[i] for i in links)) if carried is not None and links else 0.0
    compute_s = float(result.iterations.groupby("rank")["compute_s"].sum().mean())
    return float(row["compute_utilization"]), wan_bytes, compute_s


def scale_bounds(wan: Mapping[str, Any]) -> tuple[float, float]:
    """The lowest and highest `cluster.wan.bandwidth_gbps` at which every link, scaled alike, stays within
    the bounds a config accepts."""
    base = float(wan["bandwidth_gbps"])
    own = [float(link["bandwidth_gbps"]) for link in wan.get("links") or [] if "bandwidth_gbps" in link]
    ratios = [1.0, *(b / base for b in own)]
    return LOWEST_GBPS / min(ratios), HIGHEST_GBPS / max(ratios)


def needed(probe: Callable[[float], float], target: float, tolerance: float, lowest: float, highest: float,
           bracket: Callable[[float], tuple[Optional[float], Optional[float]]],
           below: Callable[[float], float] = lambda t: 0.0) -> Optional[float]:  # fmt: skip
    """The smallest bandwidth in [lowest, highest] at which u reaches `target`, to `tolerance`: the top of
    a bracket lo < B <= hi with u(lo) < target <= u(hi) and hi <= lo (1 + tolerance); None when u(highest)
    stays below it. `below(target)`: a bandwidth thought under the answer, tried first as the bracket's
    bottom (then a decade lower each time it is not).

    Each step tries the bandwidth where the line through the bracket's ends in (1/B, 1/u) meets the
    target, nudged half a tolerance up (when every WAN transfer is exposed, 1/u = a + b/B exactly, so
    that point closes the bracket from above and the next, just under it, from below); a step that does
    not halve the bracket's log width, twice in a row, is followed by a plain bisection in log space, so
    the bracket halves at least every third step whatever u looks like."""
    if probe(highest) < target:
        return None
    width, slow = math.inf, 0
    for _ in range(MAX_PROBES):
        lo, hi = bracket(target)
        assert hi is not None  # highest reaches the target
        if lo is None:  # nothing seen below it yet: the hint, else a decade down
            if hi <= lowest:
                return lowest
            hint = below(target)
            probe(max(lowest, hint if lowest <= hint < hi / (1 + tolerance) else hi / 10))
            continue
        if hi <= lo * (1 + tolerance):
            return hi
        log_width = math.log(hi / lo)
        step = 1 + tolerance
        slow = slow + 1 if log_width > width / 2 else 0
        if slow >= 2:  # two interpolations in a row did not halve the bracket: bisect
            guess, slow = math.sqrt(lo * hi), 0
        else:
            guess = _secant(probe(lo), probe(hi), lo, hi, target)
            if hi <= guess * step:
                guess = hi / step**0.98  # just under hi: a miss closes the bracket
            elif guess <= lo * step:
                guess = lo * step**0.98  # just over lo: a hit closes it
            else:
                guess *= step**0.5
        width = log_width
        probe(min(max(guess, lo * step**0.01), hi / step**0.01))
    raise RuntimeError(f"no bracket within {tolerance:g} after {MAX_PROBES} simulations")  # pragma: no cover


def _secant(u_lo: float, u_hi: float, lo: float, hi: float, target: float) -> float:
    """Where 1/u, taken linear in 1/B through (lo, u_lo) and (hi, u_hi), equals 1/target."""
    y_lo, y_hi = 1 / max(u_lo, 1e-12), 1 / u_hi
    if y_lo <= y_hi:  # flat: nothing to interpolate
        return math.sqrt(lo * hi)
    x = 1 / lo + (1 / target - y_lo) * (1 / hi - 1 / lo) / (y_hi - y_lo)
    return 1 / x if x > 0 else hi


def floor_reason(probe: Probe, wan: Mapping[str, Any], highest: float, target: float) -> str:
    """Why u at the highest bandwidth stays under `target`: the per-flow window, the round trip, or
    neither (communication inside the datacenters, or work that no WAN speeds up). At most two runs."""
    reached = probe(highest)
    head = f"unreachable: {reached:.3f} at {highest:g} Gb/s"
    window = wan.get("connection_window_mb")
    rtt = float(wan["rtt_ms"])
    if window is not None:
        ceiling = int(wan.get("connections") or 1) * float(window) * 8e-3 / (rtt * 1e-3)
        if probe(highest, connection_window_mb=None) >= target:
            return f"{head}; the per-flow window ceiling (connections x window / RTT = {ceiling:.3g} Gb/s) binds"
    if probe(highest, connection_window_mb=None, rtt_ms=NO_RTT_MS) >= target:
        return f"{head}; the WAN's round trip ({rtt:g} ms, RTT/2 per WAN crossing) is the floor"
    return f"{head}; even without the WAN's latency and window: communication inside the datacenters bounds it"


def bandwidth_sweep(
    data: Mapping[str, Any],
    targets: Sequence[float] = TARGETS,
    periods: Sequence[int] = PERIODS,
    tolerance: float = TOLERANCE,
    on_case: Optional[Callable[[Case], None]] = None,
) -> pd.DataFrame:
    """One row per (policy, H, target): the bandwidth needed (Gb/s), u there, the highest bandwidth tried
    below it, the simulations the case took and a status (`ok`, `unreachable: ...`, `failed: ...`).
    `data`: a config mapping as `sim.config.read_config` returns it."""
    import pandas as pd

    check_arguments(targets, periods, tolerance)
    wan = wan_of(data)
    lowest, highest = scale_bounds(wan)
    rows = []
    for case in cases(data, periods):
        if on_case is not None:
            on_case(case)
        probe, failed = Probe(data, case), ""
        for target in sorted(targets):
            gbps: Optional[float] = None
            try:
                if failed:  # a case that cannot run fails alike at every target
                    raise RunFailed(failed)
                gbps = needed(probe, target, tolerance, lowest, highest, probe.bracket, probe.below)
                status = "ok" if gbps is not None else floor_reason(probe, wan, highest, target)
            except (RunFailed, ConfigError) as exc:
                failed = " ".join(str(exc).split()).replace("policies[0]", f"policies[{case.index}]")
                status = f"failed: {failed}"
            lo, _ = probe.bracket(target)
            u = probe.seen.get(gbps, math.nan) if gbps is not None else probe.seen.get(highest, math.nan)
            rows.append(
                (case.label, case.name, case.period, target, gbps if gbps is not None else math.nan, u,
                 lo if lo is not None and gbps is not None else math.nan, probe.runs, status)
            )  # fmt: skip
    table = pd.DataFrame(rows, columns=COLUMNS)
    table["period"] = table["period"].astype("Int64")
    return table


def shown(table: pd.DataFrame) -> pd.DataFrame:
    """policy, H, then one column per target: the Gb/s needed, `unreachable` or `failed`."""

    def cell(row: pd.Series) -> str:
        if row["status"] == "ok":
            return f"{row['gbps']:.3g}"
        return row["status"].split(":")[0]

    wide = table.assign(
        cell=table.apply(cell, axis=1), H=table["period"].astype(object).where(table["period"].notna(), "-")
    )
    wide["target"] = wide["target"].map(lambda t: f"{t:.0%}")
    out = wide.pivot_table(index=["policy", "H"], columns="target", values="cell", aggfunc="first", sort=False)
    return out.reset_index().rename_axis(columns=None)
