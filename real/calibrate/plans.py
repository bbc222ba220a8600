"""Keep the plan the real run used: a calibrated config must predict the same algorithm.

A measured figure can change what a policy plans: DS-Sync's `group_size: auto` and `schedule: auto`
follow the uplinks' oversubscription (none measured on loopback: one group of every rank instead of
one per rack), and the model's measured gradient, cut by the config's `bucket_mb`, can make fewer
buckets, so fewer collectives per step. `keep_plans` compares every policy's plan
(`sim.engine.policy_plans`) in the base config with the calibrated one and, where they differ, pins
the base's: `workload.bucket_mb` scaled so that the measured gradient is cut into the same buckets,
and the policy's settings as its `pinned_settings()` writes them (e.g. DS-Sync's explicit cycle of
groups). Each pin is one note; a plan that no pin restores is a note too (the calibrated config then
predicts another algorithm).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Optional

from sim.catalog.gpus import get_gpu
from sim.compute.workload import compute_plan
from sim.config import Config, parse_config
from sim.engine.policy_plans import PolicyPlan, plan_change, policy_plans
from sim.errors import ConfigError

SHOWN = 80  # a pinned setting longer than this many characters is shown by its length


def keep_plans(base: Mapping[str, Any], calibrated: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`calibrated` with the plan of every policy of `base` pinned where it changed, and one note per
    change. `calibrated` is a config mapping that `sim.config.parse_config` accepts; a `base` it does
    not accept (the API allows one without a cluster) has no plan to keep."""
    data = copy.deepcopy(dict(calibrated))
    try:
        base_config = _plannable(base)
    except ConfigError:  # a partial base (no cluster: the report's alone) has no plan to keep
        return data, []
    before = policy_plans(base_config)
    notes: list[str] = []
    bucket_note = _keep_buckets(base_config, data)
    if bucket_note:
        notes.append(bucket_note)
    after = policy_plans(_plannable(data))
    changed = [i for i, (b, a) in enumerate(zip(before, after)) if b != a]
    entries = copy.deepcopy(data["policies"])
    for i in changed:
        data["policies"][i] = _pinned_entry(entries[i], before[i])
    pinned = policy_plans(_plannable(data)) if changed else after
    for i in changed:
        b, a, p = before[i], after[i], pinned[i]
        what = f"policies[{i}] ({b.label}): the measured figures would plan {plan_change(b, a)} (the real run's)"
        if p == b:
            notes.append(f"plan kept: {what}; pinned to the real run's with {_shown(data['policies'][i], b)}")
        else:  # the entry as it was: a pin that does not restore the plan is no better
            data["policies"][i] = entries[i]
            notes.append(f"PLAN CHANGED: {what}; its settings cannot pin it, so the prediction is of another plan")
    return data, notes


def _keep_buckets(base: Config, data: dict[str, Any]) -> Optional[str]:
    """Scale a synthetic workload's `bucket_mb` so that its gradient is cut into the base's buckets
    (equal layers: every closed bucket holds k layers; a cap halfway between k - 1 and k layers keeps
    k); the note (BUCKETS CHANGED where no cap matches), or None when the buckets are the base's."""
    workload = data.get("workload") or {}
    config = _plannable(data)
    gpu = get_gpu(config.cluster.gpu)
    layers = [b.layers for b in compute_plan(base.workload, get_gpu(base.cluster.gpu)).buckets]
    now = [b.layers for b in compute_plan(config.workload, gpu).buckets]
    w = config.workload
    if now == layers:
        return None
    unmatched = (
        f"BUCKETS CHANGED: the measured workload is cut into {len(now)} bucket(s) where the real run cuts {len(layers)}"
    )
    if w.model != "synthetic" or base.workload.model != "synthetic" or w.gradient_mb is None:
        return unmatched
    if w.synthetic_layers != base.workload.synthetic_layers:
        return unmatched
    per_bucket = max(len(members) for members in layers)
    cap = float(f"{(per_bucket - 0.5) * w.gradient_mb / w.synthetic_layers:.4g}")
    trial = copy.deepcopy(data)
    trial["workload"] = dict(workload) | {"bucket_mb": cap}
    if [b.layers for b in compute_plan(_plannable(trial).workload, gpu).buckets] != layers:
        return unmatched
    data["workload"] = trial["workload"]
    return (
        f"plan kept: workload.bucket_mb {w.bucket_mb:g} -> {cap:g}: the measured gradient ({w.gradient_mb:g} MB) "
        f"would be cut into {len(now)} bucket(s) where the real run cuts {len(layers)}"
    )


def _plannable(data: Mapping[str, Any]) -> Config:
    """`data` parsed without `workload.profile`: a profile's times plan nothing, and the calibrated
    config's profile is written beside it only after this (its path is relative to that file)."""
    workload = {k: v for k, v in (data.get("workload") or {}).items() if k != "profile"}
    return parse_config(dict(data) | {"workload": workload})


def _pinned_entry(entry: Mapping[str, Any], plan: PolicyPlan) -> dict[str, Any]:
    """The policy entry with the base's bound policy's pinned settings (name and label kept)."""
    if plan.policy is None:
        return dict(entry)
    head = {k: entry[k] for k in ("name", "label") if k in entry}
    return head | plan.policy.pinned_settings()


def _shown(entry: Mapping[str, Any], plan: PolicyPlan) -> str:
    """The settings the pin wrote, long ones by their length."""
    given = plan.policy.settings.model_dump(mode="json", exclude_unset=True) if plan.policy else {}
    parts = []
    for key, value in entry.items():
        if key in ("name", "label") or given.get(key) == value:
            continue
        text = json.dumps(value, separators=(",", ":"))
        if len(text) > SHOWN and isinstance(value, list):
            text = f"a list of {len(value)}"
        parts.append(f"{key}: {text}")
    return ", ".join(parts) or "its settings as given"
