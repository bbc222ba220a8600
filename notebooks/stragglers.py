# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Stragglers: BSP vs SSP vs ASP vs Sync-Switch
#
# A transient straggler is a worker that is slow for a while, here because its network adds delay.
# BSP (`ps`) waits for it every step. ASP never waits but trains on stale parameters. SSP waits only
# when a worker falls more than `staleness` steps behind. Sync-Switch runs BSP and switches to ASP: at
# a fixed point (offline), or while a straggler lasts (online). This notebook runs all of them on the
# bundled `sync_switch_straggler.yaml` (8 K80 workers, parameter-server shards on their own hosts, 30 ms
# of extra delay on 2 workers for the middle third of the run; docs/sync_switch.md), then measures what
# asynchrony costs: staleness, and accuracy in numerics mode on sklearn's digits.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch

from sim import load_config, simulate
from sim.bundled import bundled
from sim.results.plots import line_styles  # syncsim's own: coinciding curves stay visible

WINDOW = 5  # the online policy's `window`: slow (or recovered) iterations in a row before it switches
D = {"placement": "dedicated"}  # every policy's shards on their own hosts, as in the bundled config
policies = [
    {"name": "ps", **D},
    {"name": "ssp", "label": "ssp_s2", "staleness": 2, **D},
    {"name": "ssp", "label": "ssp_s8", "staleness": 8, **D},
    {"name": "asp", **D},
    {"name": "sync_switch", "label": "online", "switching": "online", "threshold": 1.3, "window": WINDOW,
     "first": {"name": "ps", **D}, "then": {"name": "asp", **D}},
    {"name": "sync_switch", "label": "bsp25_asp", "switch_at": 0.25,
     "first": {"name": "ps", **D}, "then": {"name": "asp", **D}},
]  # fmt: skip
config = load_config(bundled("sync_switch_straggler.yaml"), ["policies=" + str(policies)])
result = simulate(config)
straggler = result.faults.iloc[0]  # the same window for every policy
t0, t1 = straggler["start_s"], straggler["end_s"]
slow_ranks = config.faults.stragglers[0].ranks
print(f"ranks {slow_ranks}: +{straggler['value']:g} ms from {t0:g} s to {t1:g} s")
summary = result.summary.set_index("policy")
table = summary[["throughput_samples_s", "sim_time_s", "mean_wait_s", "switches", "synchronous_s", "asynchronous_s"]]
table.assign(vs_bsp=summary["throughput_samples_s"] / summary.loc["ps", "throughput_samples_s"]).round(3)

# %% [markdown]
# ## Iteration times through the straggler
#
# One panel per scheme: every iteration of a fast worker (rank 0, dots) and of a straggler (crosses),
# against the simulated time it ended. Grey: the straggler window. Blue: the policy's asynchronous
# phases, from `result.phases` (SSP and ASP are asynchronous throughout).

# %%
it = result.iterations
phases = result.phases
labels = list(summary.index)
fig, axes = plt.subplots(len(labels), 1, figsize=(8, 1.5 * len(labels)), sharex=True, sharey=True)
window = Patch(color="0.85", label=f"straggler window (ranks {', '.join(map(str, slow_ranks))})")
asynchronous = Patch(color="tab:blue", alpha=0.12, label="asynchronous phase")
for ax, label in zip(axes, labels):
    rows = it[it["policy"] == label]
    ax.axvspan(t0, t1, color=window.get_facecolor(), lw=0)
    for _, ph in phases[(phases["policy"] == label) & ~phases["synchronous"]].iterrows():
        ax.axvspan(ph["start_s"], ph["end_s"], color="tab:blue", alpha=0.12, lw=0)
    for rank, color, marker, kind in ((0, "tab:green", "o", "fast"), (slow_ranks[0], "tab:red", "x", "straggler")):
        mine = rows[rows["rank"] == rank]
        ax.plot(mine["end_s"], mine["iteration_s"] * 1e3, marker, ms=2.5, color=color, label=f"rank {rank} ({kind})")
    ax.set_ylabel(label, rotation=0, ha="right", labelpad=12)
# one legend above the panels, over no data: the two workers, and what the shading means
handles = [*axes[0].get_legend_handles_labels()[0], window, asynchronous]
axes[0].legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.02), ncol=2, frameon=False, markerscale=2)
axes[-1].set_xlabel("Simulated time (s)")
fig.supylabel("Iteration time (ms)")
plt.tight_layout()

# %% [markdown]
# What the panels show, and the next cell checks:
#
# * **BSP waits.** While the straggler lasts, a fast worker's iterations take more than 1.4x as long
#   as outside the window, and the difference is waiting.
# * **ASP does not.** A fast worker's iterations are within 3% of their usual length; only the
#   stragglers are slow.
# * **SSP is bounded.** The most advanced worker is never more than s + 1 iterations ahead of the
#   least advanced (ASP's lead grows far beyond that), and every step c begins only after all workers
#   finished step c - s - 1. The fast workers use up their s steps of slack early in the window and then
#   run at the straggler's pace: over the window BSP > SSP(2) > SSP(8) > ASP in iteration time, and in
#   its second half both SSP runs are within 3% of BSP.

# %%
fast = it[~it["rank"].isin(slow_ranks)]
inside = (fast["start_s"] >= t0) & (fast["end_s"] <= t1)
outside = (fast["end_s"] <= t0) | (fast["start_s"] >= t1 + 0.5)  # + 0.5 s: the stragglers' backlog drains
pace = pd.DataFrame(
    {
        "inside_ms": fast[inside].groupby("policy")["iteration_s"].mean() * 1e3,
        "outside_ms": fast[outside].groupby("policy")["iteration_s"].mean() * 1e3,
        "wait_inside_ms": fast[inside].groupby("policy")["wait_s"].mean() * 1e3,
    }
).loc[labels]
pace.round(1)

# %%
# the claims above, checked
bsp, asp = pace.loc["ps"], pace.loc["asp"]
assert bsp["inside_ms"] > 1.4 * bsp["outside_ms"]  # BSP waits for the straggler ...
assert bsp["wait_inside_ms"] > 0.8 * (bsp["inside_ms"] - bsp["outside_ms"])  # ... and the extra time is waiting
assert abs(asp["inside_ms"] / asp["outside_ms"] - 1) < 0.03 and asp["wait_inside_ms"] == 0  # ASP does not wait
slow = it[it["rank"].isin(slow_ranks) & (it["start_s"] >= t0) & (it["end_s"] <= t1)]
assert slow[slow["policy"] == "asp"]["iteration_s"].mean() > 1.4 * asp["outside_ms"] / 1e3  # the straggler is slow


def lead(rows: pd.DataFrame, times: np.ndarray) -> np.ndarray:
    """Iterations finished by the most advanced worker minus the least advanced, at each time."""
    done = [np.searchsorted(np.sort(g["end_s"].to_numpy()), times, side="right") for _, g in rows.groupby("rank")]
    return np.max(done, axis=0) - np.min(done, axis=0)


times = np.linspace(0, summary["sim_time_s"].max(), 4000)
leads = {label: int(lead(it[it["policy"] == label], times).max()) for label in ("ps", "ssp_s2", "ssp_s8", "asp")}
print("largest lead (iterations):", leads)
assert leads["ps"] <= 1
for label, s in (("ssp_s2", 2), ("ssp_s8", 8)):
    assert leads[label] <= s + 1  # the staleness bound holds
    rows = it[it["policy"] == label]
    finished = rows.groupby("iteration")["end_s"].max()  # when every worker had finished step c
    later = rows[rows["iteration"] > s]
    assert (later["begin_end_s"].to_numpy() >= finished.reindex(later["iteration"] - s - 1).to_numpy() - 1e-12).all()
assert leads["asp"] > 2 * (8 + 1)  # ASP has no bound
assert bsp["inside_ms"] > pace.loc["ssp_s2", "inside_ms"] > pace.loc["ssp_s8", "inside_ms"] > asp["inside_ms"]
late = fast[(fast["start_s"] >= (t0 + t1) / 2) & (fast["end_s"] <= t1)].groupby("policy")["iteration_s"].mean()
assert all(abs(late[label] / late["ps"] - 1) < 0.03 for label in ("ssp_s2", "ssp_s8"))

# %% [markdown]
# ## Throughput, and when Sync-Switch switches
#
# Over the whole run ASP beats BSP by more than 8%, and SSP sits in between, gaining with its bound.
# The online policy runs BSP, switches to ASP once the stragglers have been slow for `window` steps,
# and back once every worker has been fast again for `window` iterations: each switch lands after the
# edge of the straggler window, within `window` + 2 straggled BSP iterations of it. It trains
# synchronously most of the time and still recovers more than half of ASP's gain over BSP. Offline
# Sync-Switch switches at 25% of the steps, before the straggler arrives, so it meets the straggler in
# ASP and runs within 2% of ASP's throughput.

# %%
x = summary["throughput_samples_s"]
assert x["ps"] < x["ssp_s2"] < x["ssp_s8"] < x["asp"] and x["asp"] > 1.08 * x["ps"]
assert x["ps"] < x["online"] < x["asp"] and (x["online"] - x["ps"]) > 0.5 * (x["asp"] - x["ps"])
assert summary.loc["online", "synchronous_s"] > summary.loc["online", "asynchronous_s"]


def switch_times(result, label: str, window: int) -> tuple[float, float, float]:
    """The online policy's switches, checked against the straggler window; returns (to ASP, back, unit)."""
    ph = result.phases[result.phases["policy"] == label]
    assert list(ph["phase_policy"]) == ["ps", "asp", "ps"], ph
    f = result.faults.iloc[0]
    its = result.iterations
    fast = its[(its["policy"] == "ps") & ~its["rank"].isin(slow_ranks)]
    unit = fast[(fast["start_s"] >= f["start_s"]) & (fast["end_s"] <= f["end_s"])]["iteration_s"].mean()
    to_asp, back = ph["start_s"].iloc[1], ph["start_s"].iloc[2]
    assert f["start_s"] < to_asp < f["start_s"] + (window + 2) * unit
    assert f["end_s"] < back < f["end_s"] + (window + 2) * unit
    return to_asp, back, unit


to_asp, back, unit = switch_times(result, "online", WINDOW)
print(f"straggler {t0:g}-{t1:g} s; online: ASP from {to_asp:.2f} s to {back:.2f} s (one straggled step: {unit:.3f} s)")
offline = phases[phases["policy"] == "bsp25_asp"]
assert list(offline["phase_policy"]) == ["ps", "asp"]
assert offline["start_step"].iloc[1] == round(0.25 * config.iterations) and offline["start_s"].iloc[1] < t0
assert abs(x["bsp25_asp"] / x["asp"] - 1) < 0.02

# %% [markdown]
# Without the straggler the online policy has nothing to react to: it never switches and is BSP.

# %%
calm_policies = [p for p in policies if p.get("label", p["name"]) in ("ps", "online")]
calm_config = load_config(bundled("sync_switch_straggler.yaml"), ["faults.stragglers=[]", f"policies={calm_policies}"])
calm = simulate(calm_config)
calm_summary = calm.summary.set_index("policy")
xc = calm_summary["throughput_samples_s"]
assert calm_summary.loc["online", "switches"] == 0 and (calm.phases["phase_policy"] == "ps").all()
assert abs(xc["online"] / xc["ps"] - 1) < 0.01
calm_summary[["throughput_samples_s", "switches"]].round(1)

# %% [markdown]
# ## What asynchrony costs: staleness
#
# `result.staleness` counts every asynchronously applied update by its staleness: how many other
# updates reached the same shard between the worker's read and its push. With 8 workers at one pace an
# ASP update is overtaken by about one update of every other worker, so its mean staleness is close to
# p - 1 = 7. The stragglers' updates are the stalest, the more so for the online policy, whose ASP
# phase is the straggler window. SSP's bound lowers the mean, more so with a smaller s. BSP applies
# nothing stale, and the Sync-Switch runs only count updates of their ASP phases.

# %%
st = result.staleness
share = st.pivot_table(index="staleness", columns="policy", values="updates", aggfunc="sum", fill_value=0)
share = share / share.sum()
st = st.assign(straggler=st["rank"].isin(slow_ranks), weighted=st["staleness"] * st["updates"])
by = st.groupby(["policy", "straggler"])[["weighted", "updates"]].sum()
mean_staleness = (by["weighted"] / by["updates"]).unstack("straggler")
mean_staleness = mean_staleness.rename(columns={False: "others", True: "stragglers"})
fig, ax = plt.subplots(figsize=(8, 3))
shown = ("ssp_s2", "ssp_s8", "asp", "online")
for label, style in zip(shown, line_styles(len(shown), markers=True)):
    ax.plot(share.index, share[label], label=label, **style)
ax.set_xlabel("Staleness (updates applied between read and push)")
ax.set_ylabel("Share of updates")
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
mean_staleness.assign(all=summary["mean_staleness"]).loc[[p for p in labels if p != "ps"]].round(2)

# %%
# the staleness story, checked
assert "ps" not in set(st["policy"])  # BSP: no stale updates
per_update = st[st["policy"] == "asp"]["updates"].sum() / summary.loc["asp", "updates"]  # a push reaches every shard
for label in ("online", "bsp25_asp"):
    async_updates = phases[(phases["policy"] == label) & ~phases["synchronous"]]["updates"].sum()
    assert st[st["policy"] == label]["updates"].sum() == per_update * async_updates
m = summary["mean_staleness"]
assert abs(m["asp"] - (config.cluster.hosts - 1)) < 0.5
assert m["ssp_s2"] < m["ssp_s8"] < m["asp"]
for label in ("asp", "online"):
    assert mean_staleness.loc[label, "stragglers"] > mean_staleness.loc[label, "others"] + 0.5
assert mean_staleness.loc["online", "stragglers"] > mean_staleness.loc["asp", "stragglers"]

# %% [markdown]
# ## What asynchrony costs: accuracy
#
# In numerics mode every simulated worker trains a real replica. The bundled
# `sync_switch_search_digits.yaml` trains an MLP on sklearn's digits with 8 workers (300 steps, SGD with
# momentum, the rate divided by 10 after a third). Asynchronous updates follow Sync-Switch's recipe:
# the rate scaled to the per-worker batch and momentum / workers. We add the same kind of straggler
# (2 workers, +30 ms, for 2.5 s) and a target of 94% accuracy.

# %%
numerics_policies = [
    {"name": "ps"},
    {"name": "ssp", "label": "ssp_s2", "staleness": 2},
    {"name": "asp"},
    {"name": "sync_switch", "label": "online", "switching": "online", "threshold": 1.3, "window": WINDOW},
    {"name": "sync_switch", "label": "bsp25_asp", "switch_at": 0.25},
]
stragglers = [{"ranks": slow_ranks, "delay_ms": 30, "start_s": 2.5, "duration_s": 2.5}]
overrides = [
    "policies=" + str(numerics_policies),
    "faults.stragglers=" + str(stragglers),
    "numerics.target_accuracy=0.94",
]
trained = simulate(load_config(bundled("sync_switch_search_digits.yaml"), overrides))
acc = trained.accuracy[trained.accuracy["model"] == "consensus"]
w = trained.faults.iloc[0]
fig, (by_time, by_step) = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
by_time.axvspan(w["start_s"], w["end_s"], color="0.85", lw=0, label="straggler window")
curves = list(acc.groupby("policy", sort=False))
for (label, rows), style in zip(curves, line_styles(len(curves), markers=True)):  # BSP-like runs coincide
    (line,) = by_time.plot(rows["time_s"], rows["accuracy"], label=label, **style)
    by_step.plot(rows["iteration"], rows["accuracy"], label=label, color=line.get_color(), **style)
for ax in (by_time, by_step):
    ax.axhline(0.94, color="k", lw=0.8, ls="--", label="target (94%)")
    ax.set_ylim(0.7, 1)
by_time.set_xlabel("Simulated time (s)")
by_step.set_xlabel("Iteration")
by_time.set_ylabel("Test accuracy (consensus model)")
handles, names = by_time.get_legend_handles_labels()  # the policies, the window and the target
by_step.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
plt.tight_layout()
cols = ["throughput_samples_s", "sim_time_s", "switches", "time_to_target_s", "final_accuracy"]
trained.summary.set_index("policy")[cols].round(3)

# %% [markdown]
# ASP and SSP run more iterations per second, but each asynchronous iteration trains less: at the first
# evaluation (iteration 20) they are more than 10 points behind BSP. BSP and both Sync-Switch variants,
# which start in BSP, reach 94% in less than half the simulated time ASP and SSP need. ASP and SSP also
# end more than half a point below BSP. Both Sync-Switch variants end within a point of BSP and finish
# sooner. Online Sync-Switch again switches to ASP and back within `window` + 2 straggled BSP iterations
# after the straggler's start and end.

# %%
# the accuracy story, checked
ts = trained.summary.set_index("policy")
first = acc[acc["iteration"] == acc.loc[acc["iteration"] > 0, "iteration"].min()].set_index("policy")["accuracy"]
for label in ("asp", "ssp_s2"):
    assert ts.loc[label, "throughput_samples_s"] > ts.loc["ps", "throughput_samples_s"]
    assert first[label] < first["ps"] - 0.10
    assert ts.loc[label, "final_accuracy"] < ts.loc["ps", "final_accuracy"] - 0.005
    for sync in ("ps", "online", "bsp25_asp"):
        assert ts.loc[sync, "time_to_target_s"] < 0.5 * ts.loc[label, "time_to_target_s"]
for label in ("online", "bsp25_asp"):
    assert ts.loc[label, "final_accuracy"] >= ts.loc["ps", "final_accuracy"] - 0.01
    assert ts.loc[label, "sim_time_s"] < ts.loc["ps", "sim_time_s"]
to_asp, back, _ = switch_times(trained, "online", WINDOW)
print(f"straggler {w['start_s']:g}-{w['end_s']:g} s; online: ASP from {to_asp:.2f} s to {back:.2f} s")
