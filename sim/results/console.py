"""A result's summary as the commands print it to the terminal."""

from __future__ import annotations

import pandas as pd

TABLE_COLUMNS = {
    "policy": "policy",
    "mean_iteration_s": "mean iter (ms)",
    "p50_iteration_s": "p50 (ms)",
    "p99_iteration_s": "p99 (ms)",
    "throughput_samples_s": "samples/s",
    "mean_comm_s": "comm (ms)",
    "mean_wait_s": "wait (ms)",
    "scaling_efficiency": "scaling eff.",
    "compute_utilization": "compute util.",
    "peak_memory_gib": "peak mem (GiB)",
}


# numerics mode adds these (the time to the target only when the config sets one)
ACCURACY_COLUMNS = {"final_accuracy": "final acc.", "time_to_target_s": "to target (s)"}


def summary_table(summary: pd.DataFrame) -> str:
    """The summary as the commands print it: milliseconds, and accuracy where the run measured it."""
    columns = dict(TABLE_COLUMNS)
    columns.update({k: v for k, v in ACCURACY_COLUMNS.items() if k in summary and summary[k].notna().any()})
    if "peak_memory_gib" not in summary or summary["peak_memory_gib"].isna().all():  # a real run predicts none
        columns.pop("peak_memory_gib")
    df = summary[list(columns)].rename(columns=columns).copy()
    for col in ("mean iter (ms)", "p50 (ms)", "p99 (ms)", "comm (ms)", "wait (ms)"):
        df[col] = df[col] * 1e3
    if "final acc." in df:
        df["final acc."] = df["final acc."].map(lambda v: f"{v:.3f}")
    return df.to_string(index=False, float_format=lambda v: f"{v:,.2f}") + _warmup_note(summary)


def _warmup_note(summary: pd.DataFrame) -> str:
    """A line saying which iterations the timings leave out, where the summary left any out."""
    if "warmup_dropped" not in summary:
        return ""
    rows = summary[["policy", "warmup_dropped"]].dropna()
    dropped = rows["warmup_dropped"].astype(int)
    if not (dropped > 0).any():
        return ""
    if dropped.nunique() == 1:
        which = f"each worker's first {dropped.iloc[0]} iterations"
    else:
        which = "each worker's first " + ", ".join(f"{n} ({p})" for p, n in zip(rows["policy"], dropped))
    return f"\ntimings leave out {which} as warm-up (warmup_iterations; iterations.csv keeps every one)"


def decisions_text(decisions: pd.DataFrame, limit: int = 12) -> str:
    """What the run chose where the config said `auto`, one line per choice (setting: value), at most
    `limit` lines; a choice every policy shares is printed once. decisions.csv has every one, each with
    its reason. Empty when there are none."""
    if decisions is None or not len(decisions):
        return ""
    policies = decisions["policy"].unique()
    pairs = list(zip(decisions["setting"], decisions["value"]))
    counts = pd.Series(pairs).value_counts()
    shared = {pair for pair, n in counts.items() if n == len(policies) > 1}
    lines = [f"  every policy: {s}: {v}" for s, v in dict.fromkeys(p for p in pairs if p in shared)]
    lines += [
        f"  {row.policy}: {row.setting}: {row.value}"
        for row, pair in zip(decisions.itertuples(index=False), pairs)
        if pair not in shared
    ]
    tail = f"\n  ... {len(lines) - limit} more in decisions.csv" if len(lines) > limit else ""
    return "decisions (why: decisions.csv):\n" + "\n".join(lines[:limit]) + tail
