"""The WAN links of a cluster across datacenters (`cluster.wan`, docs/wan.md) and their bandwidth traces.

A WAN link has a bandwidth, a round-trip time, and optionally a TCP-like ceiling per flow: a collective
opens `connections` connections, each moving at most one `connection_window_mb` window per round trip.
A trace (a CSV file of `time_s,gbps` rows) changes the link's bandwidth over time. Traces are read when
the cluster is built (`syncsim check` builds it), checked like profiles: a regular file under a size
and row limit, finite numbers, times strictly increasing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, Field

from sim.config.link_ends import link_end_problems
from sim.config.reading import MB, read_bounded, resolved
from sim.config.types import MAX_GBPS, MAX_SECONDS, MIN_GBPS, Gbps, Strict
from sim.errors import ConfigError

MAX_RTT_MS = 2000.0  # a one-way latency of one second, the most any link takes (types.MAX_LATENCY_US)
MAX_WINDOW_MB = 2**30 / MB  # TCP's largest window: 65,535 bytes scaled by 2^14 (RFC 7323), about 1 GiB
MAX_CONNECTIONS = 1024
MAX_TRACE_BYTES = 2 * MB
MAX_TRACE_ROWS = 100_000
TRACE_HEADER = "time_s,gbps"


def _trace_path(value: str) -> str:
    if not value or len(value) > 4096 or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError("a file path of 1 to 4096 printable characters")
    return value


TracePath = Annotated[str, AfterValidator(_trace_path)]
RttMs = Annotated[float, Field(gt=0, le=MAX_RTT_MS)]
WindowMb = Annotated[float, Field(gt=0, le=MAX_WINDOW_MB)]
Connections = Annotated[int, Field(ge=1, le=MAX_CONNECTIONS)]

_DESCRIPTIONS = {
    "bandwidth_gbps": "the link's bandwidth, each direction its own",
    "rtt_ms": "round-trip time; every message crossing the link is delivered rtt_ms / 2 later (one way)",
    "connection_window_mb": f"TCP window per connection (at most {MAX_WINDOW_MB:g} MB, TCP's largest): a flow "
    "crossing the link moves at most connections * window / rtt; default: no per-flow limit",
    "connections": "parallel connections each flow opens across the link (with connection_window_mb)",
    "bandwidth_trace": f"a CSV file (header `{TRACE_HEADER}`) whose rows set the bandwidth from each time on; "
    "bandwidth_gbps holds before the first row; a relative path is relative to the config file",
}


class WanLink(Strict):
    """One WAN link between two datacenters; unset settings come from `cluster.wan`."""

    a: str = Field(description="one datacenter (a name under cluster.datacenters)")
    b: str = Field(description="the other datacenter")
    bandwidth_gbps: Optional[Gbps] = Field(None, description="default: cluster.wan.bandwidth_gbps")
    rtt_ms: Optional[RttMs] = Field(None, description="default: cluster.wan.rtt_ms")
    connection_window_mb: Optional[WindowMb] = Field(None, description="default: cluster.wan.connection_window_mb")
    connections: Optional[Connections] = Field(None, description="default: cluster.wan.connections")
    bandwidth_trace: Optional[TracePath] = Field(None, description="default: cluster.wan.bandwidth_trace")


class WanSettings(Strict):
    """The WAN links joining the datacenters: every pair (full mesh) unless `links` names the pairs."""

    bandwidth_gbps: Gbps = Field(description=_DESCRIPTIONS["bandwidth_gbps"])
    rtt_ms: RttMs = Field(description=_DESCRIPTIONS["rtt_ms"])
    connection_window_mb: Optional[WindowMb] = Field(None, description=_DESCRIPTIONS["connection_window_mb"])
    connections: Connections = Field(1, description=_DESCRIPTIONS["connections"])
    bandwidth_trace: Optional[TracePath] = Field(None, description=_DESCRIPTIONS["bandwidth_trace"])
    links: Optional[list[WanLink]] = Field(
        None,
        description="the pairs of datacenters a WAN link joins, each with optional settings of its own; "
        "default: one link between every pair with the settings above",
    )


@dataclass(frozen=True)
class ResolvedWan:
    """One WAN link with every setting filled in; `where`: its config path, for error messages."""

    a: str
    b: str
    bandwidth_gbps: float
    rtt_ms: float
    connection_window_mb: Optional[float]
    connections: int
    bandwidth_trace: Optional[str]
    where: str


def resolve_links(wan: WanSettings, datacenters: list[str]) -> list[ResolvedWan]:
    """Every WAN link with its settings; the full mesh when `wan.links` is unset."""
    if wan.links is None:
        entries = [("cluster.wan", WanLink(a=a, b=b)) for i, a in enumerate(datacenters) for b in datacenters[i + 1 :]]
    else:
        entries = [(f"cluster.wan.links[{i}]", link) for i, link in enumerate(wan.links)]
    out = []
    for where, link in entries:
        own = link.bandwidth_trace is not None
        out.append(
            ResolvedWan(
                link.a,
                link.b,
                link.bandwidth_gbps or wan.bandwidth_gbps,
                link.rtt_ms or wan.rtt_ms,
                link.connection_window_mb or wan.connection_window_mb,
                link.connections or wan.connections,
                link.bandwidth_trace if own else wan.bandwidth_trace,
                where if own else "cluster.wan",
            )
        )
    return out


def wan_problems(wan: WanSettings, datacenters: list[str]) -> list[str]:
    """One line per problem: links naming unknown datacenters, a datacenter to itself, a pair twice, a
    WAN leaving some datacenter unreachable, several connections without a window (they would change nothing)."""
    known = set(datacenters)
    allowed = ", ".join(datacenters)
    reach = {name: {name} for name in datacenters}
    problems, edges = link_end_problems(
        wan.links or [],
        known,
        "wan.links",
        "unknown datacenter {end!r}; allowed: " + allowed,
        "a WAN link joins two datacenters",
    )
    for a, b in edges:  # merge the two groups of datacenters that reach each other
        group = reach[a] | reach[b]
        for name in group:
            reach[name] = group
    for i, link in enumerate(wan.links or []):
        if (link.connections or 1) > 1 and (link.connection_window_mb or wan.connection_window_mb) is None:
            problems.append(f"wan.links[{i}].connections: applies only with connection_window_mb (the per-flow limit)")
    if wan.links is not None and not problems and len(reach[datacenters[0]]) < len(datacenters):
        cut = sorted(known - reach[datacenters[0]])
        problems.append(f"wan.links: no WAN route joins {datacenters[0]!r} and {cut[0]!r}; link every datacenter")
    windowed = wan.connection_window_mb is not None or any(x.connection_window_mb for x in wan.links or [])
    if wan.connections > 1 and not windowed:  # (1, the default, is what a written config.yaml repeats)
        problems.append("wan.connections: applies only with connection_window_mb (the per-flow limit)")
    return problems


def traces_beside(data: Any, folder: Path) -> Any:
    """`cluster.wan`'s bandwidth traces given relative to the config file, made absolute."""
    cluster = data.get("cluster") if isinstance(data, dict) else None
    wan = cluster.get("wan") if isinstance(cluster, dict) else None
    if not isinstance(wan, dict):
        return data

    def absolute(entry: dict, where: str) -> dict:
        path = entry.get("bandwidth_trace")
        if isinstance(path, str) and path and not Path(path).is_absolute():
            return {**entry, "bandwidth_trace": str(resolved(folder / path, f"{where}.bandwidth_trace"))}
        return entry

    wan = absolute(wan, "cluster.wan")
    if isinstance(wan.get("links"), list):
        links = [
            absolute(x, f"cluster.wan.links[{i}]") if isinstance(x, dict) else x for i, x in enumerate(wan["links"])
        ]
        wan = {**wan, "links": links}
    return {**data, "cluster": {**cluster, "wan": wan}}


def read_trace(path: str, field: str) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """A bandwidth trace's times (s) and bandwidths (Gbit/s); ConfigError naming `field` and the row."""
    where = f"{field}: {path}"
    try:
        raw = read_bounded(path, field, MAX_TRACE_BYTES, "a bandwidth trace")
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror})") from None
    if raw.count(b"\n") > MAX_TRACE_ROWS + 1000:  # counted in C before anything is split
        raise ConfigError(f"{where}: over {MAX_TRACE_ROWS:,} rows, the limit for a bandwidth trace")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text; a trace is a CSV file") from None
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line) for n, line in lines if line and not line.startswith("#")]
    if not lines or lines[0][1].replace(" ", "") != TRACE_HEADER:
        raise ConfigError(f"{where}: the first line must be the header `{TRACE_HEADER}`")
    rows = lines[1:]
    if not rows:
        raise ConfigError(f"{where}: no rows after the header; at least one `time_s,gbps` row")
    if len(rows) > MAX_TRACE_ROWS:
        raise ConfigError(f"{where}: {len(rows):,} rows; at most {MAX_TRACE_ROWS:,}")
    times: list[float] = []
    gbps: list[float] = []
    for n, line in rows:
        cells = line.split(",")
        try:
            t, g = (float(c) for c in cells) if len(cells) == 2 else (math.nan, math.nan)
        except ValueError:
            t = g = math.nan
        if not (0 <= t <= MAX_SECONDS):  # NaN fails too
            raise ConfigError(f"{where}: line {n}: time_s must be a number from 0 to {MAX_SECONDS:g}; got {line!r}")
        if not (MIN_GBPS <= g <= MAX_GBPS):
            raise ConfigError(
                f"{where}: line {n}: gbps must be a number from {MIN_GBPS:g} to {MAX_GBPS:g}; got {line!r}"
            )
        if times and t <= times[-1]:
            raise ConfigError(f"{where}: line {n}: time_s {t:g} is not after the previous row's {times[-1]:g}")
        times.append(t)
        gbps.append(g)
    return tuple(times), tuple(gbps)
