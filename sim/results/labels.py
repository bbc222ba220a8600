"""Words for figures: human labels with units for summary columns and config paths, compact names for
links, and whether an axis's values are log-spaced.

A figure should not show `throughput_samples_s` or `cluster.uplink_gbps`: `LABELS` names the common
ones, and any other name is derived from its last dotted part, its unit suffix (`_s`, `_gbps`, ...)
becoming the unit in parentheses.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

LABELS = {
    # summary columns
    "throughput_samples_s": "Throughput (samples/s)",
    "mean_iteration_s": "Mean iteration time (s)",
    "p50_iteration_s": "Median iteration time (s)",
    "p99_iteration_s": "p99 iteration time (s)",
    "mean_compute_s": "Compute per iteration (s)",
    "mean_comm_s": "Exposed communication per iteration (s)",
    "mean_wait_s": "Waiting per iteration (s)",
    "scaling_efficiency": "Scaling efficiency",
    "compute_utilization": "Compute utilization (mean over workers)",
    "min_compute_utilization": "Compute utilization (lowest worker)",
    "network_bytes_per_iteration": "Network traffic per iteration (bytes)",
    "mean_staleness": "Mean staleness (updates)",
    "p99_staleness": "p99 staleness (updates)",
    "max_staleness": "Max staleness (updates)",
    "mean_recv_imbalance": "Mean receive imbalance",
    "sim_time_s": "Time to finish (s)",
    "switch_s": "Time spent switching (s)",
    "synchronous_s": "Time synchronous (s)",
    "asynchronous_s": "Time asynchronous (s)",
    "final_accuracy": "Final accuracy",
    "best_accuracy": "Best accuracy",
    "time_to_target_s": "Time to target accuracy (s)",
    "iterations_to_target": "Iterations to target accuracy",
    # config paths
    "cluster.uplink_gbps": "Uplink bandwidth (Gbit/s)",
    "cluster.nic_gbps": "NIC bandwidth (Gbit/s)",
    "cluster.link_latency_us": "Link latency (µs)",
    "cluster.placement": "Rank placement",
    "cluster.racks": "Racks",
    "cluster.hosts_per_rack": "Hosts per rack",
    "cluster.gpus_per_host": "GPUs per host",
    "cluster.gpu": "GPU",
    "workload.model": "Model",
    "workload.batch_size": "Batch size (samples per worker)",
    "workload.sparsity.topk": "Top-k density",
}

# unit suffixes of column and field names, longest first so `_samples_s` wins over `_s`
UNITS = (
    ("_samples_s", "samples/s"),
    ("_gbps", "Gbit/s"),
    ("_mbps", "Mbit/s"),
    ("_gb", "GB"),
    ("_mb", "MB"),
    ("_bytes", "bytes"),
    ("_ms", "ms"),
    ("_us", "µs"),
    ("_ns", "ns"),
    ("_s", "s"),
    ("_pct", "%"),
)


def label(name: str) -> str:
    """The human label of a summary column or config path: `LABELS`, else derived from the name."""
    if name in LABELS:
        return LABELS[name]
    last = name.rsplit(".", 1)[-1]
    for suffix, unit in UNITS:
        if last.endswith(suffix) and len(last) > len(suffix):
            return f"{words(last[: -len(suffix)])} ({unit})"
    return words(last)


def words(name: str) -> str:
    """`mean_wait` -> `Mean wait`."""
    text = name.replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def split_unit(text: str) -> tuple[str, str]:
    """`Uplink bandwidth (Gbit/s)` -> (`Uplink bandwidth`, `Gbit/s`); no unit gives ``."""
    if text.endswith(")") and " (" in text:
        head, unit = text[:-1].rsplit(" (", 1)
        return head, unit
    return text, ""


def value_label(name: str, value: object) -> str:
    """An axis value for a legend: `uplink bandwidth: 25 Gbit/s`, `rank placement: packed`."""
    head, unit = split_unit(label(name))
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{head[:1].lower() + head[1:]}: {shown}" + (f" {unit}" if unit and unit != "%" else unit)


def log_spaced(values: Iterable[float]) -> bool:
    """Whether values read best on a log axis: at least 3 distinct positive ones spanning a factor of
    10 or more, spaced more evenly in log than in linear terms (1, 10, 100 or 6.25 ... 100, not 10 ... 40)."""
    try:
        xs = sorted({float(v) for v in values if v is not None and not math.isnan(float(v))})
    except (TypeError, ValueError):
        return False
    if len(xs) < 3 or xs[0] <= 0 or xs[-1] / xs[0] < 10:
        return False
    return spread([math.log(v) for v in xs]) < spread(xs)


def spread(xs: list[float]) -> float:
    """The coefficient of variation of the gaps between sorted `xs`: 0 when evenly spaced."""
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    mean = sum(gaps) / len(gaps)
    return math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean


def link_names(names: list[str], shown: int = 3) -> str:
    """Links drawn as one curve, compactly: a pair `a->b`, `b->a` becomes `a↔b`, links sharing an end
    are joined (`tor0, tor1 ↔ core0`), and beyond `shown` groups the rest is counted."""
    pairs = [tuple(n.split("->", 1)) if "->" in n else (n, "") for n in names]
    directed = {p for p in pairs if p[1]}
    both = [p for p in pairs if p[1] and (p[1], p[0]) in directed]
    degree = Counter(end for p in both for end in p)
    edges: list[tuple[str, str, str]] = []  # (from, arrow, to) in first-seen order
    for a, b in pairs:
        if not b:
            edge = (a, "", "")
        elif (a, b) in both:
            a, b = (b, a) if degree[a] > degree[b] else (a, b)  # the shared end (a core switch) on the right
            edge = (a, "↔", b)
        else:
            edge = (a, "→", b)
        if edge not in edges and (edge[2], "↔", edge[0]) not in edges:
            edges.append(edge)
    chain = path_of([(a, b) for a, arrow, b in edges if arrow == "→"])
    if chain and len(chain) == len(edges) + 1:  # one route through the network: `tor0 → core0 → tor1`
        return " → ".join(chain)
    groups: dict[tuple[str, str], list[str]] = {}  # (arrow, to) -> froms
    for a, arrow, b in edges:
        groups.setdefault((arrow, b), []).append(a)
    texts = [f"{ends(froms)} {arrow} {to}" if arrow else ends(froms) for (arrow, to), froms in groups.items()]
    more = len(texts) - shown
    return "; ".join(texts[:shown]) + (f" (+{more} more)" if more > 0 else "")


def path_of(edges: list[tuple[str, str]]) -> list[str] | None:
    """The nodes of the one path that uses every directed edge once, or None."""
    nexts = dict(edges)
    starts = set(nexts) - set(nexts.values())
    if len(nexts) != len(edges) or len(starts) != 1:
        return None
    path = [starts.pop()]
    while path[-1] in nexts and len(path) <= len(edges):
        path.append(nexts[path[-1]])
    return path if len(path) == len(edges) + 1 else None


def ends(names: list[str]) -> str:
    """`a, b, c`, or `a, b … h (8)` for a long list."""
    return ", ".join(names) if len(names) <= 4 else f"{names[0]}, {names[1]} … {names[-1]} ({len(names)})"
