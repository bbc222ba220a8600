# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Sparse gradients: Zen and its baselines against density
#
# Four ways to synchronize a sparse gradient (docs/sparse.md): `zen` (an all-to-all to hashed
# owners, who sum, then an all-gather of the sums), `sparse_allgather` (every worker sends its whole
# sparse tensor to every other), `sparse_ps` (pushes of non-zero rows to colocated shards, reads of
# the rows a round updated) and dense `ring` all-reduce as the reference. `zen` sends row ids as a
# list or a bitmap, whichever is smaller; `zen_list` is Zen with list ids only, the coding the two
# baselines use by default.
#
# Part 1 sweeps a top-k density from 0.1% to 50% and compares time and bytes with the closed forms.
# Part 2 sets the density of DeepFM's embedding gradients through the batch size. Part 3 is Zen's
# hash partition against contiguous ranges. Every claim is checked by an `assert` on the tables.

# %%
import matplotlib.pyplot as plt
import pandas as pd
from IPython.display import display

from sim import load_config, simulate
from sim.bundled import bundled
from sim.compute.sparse_costs import crossover_density
from sim.experiments.sweep import load_sweep

SCHEMES = ["ring", "zen", "zen_list", "sparse_allgather", "sparse_ps"]
COLORS = dict(zip(SCHEMES, ["black", "tab:blue", "tab:cyan", "tab:red", "tab:green"]))
STYLES = {p: dict(color=COLORS[p], marker="s" if p == "zen_list" else "o", markersize=4) for p in SCHEMES}
STYLES["zen_list"].update(linestyle="--", zorder=3)  # drawn on top: it lies on sparse_ps's line in part 1


def steady(result):
    """Per policy, iterations 1 and later: a sparse PS reads back the rows the previous round updated,
    so its first iteration has nothing to read; every scheme is measured from the second on."""
    it = result.iterations[result.iterations["iteration"] >= 1]
    by = it.groupby("policy", sort=False)
    span = by["end_s"].max() - by["start_s"].min()
    return pd.DataFrame(
        {
            "comm_s": by["comm_s"].mean(),
            "compute_s": by["compute_s"].mean(),
            "iteration_s": by["iteration_s"].mean(),
            "throughput": by["samples"].sum() / span,
        }
    )


# %% [markdown]
# ## 1. Top-k density: where each scheme stops beating dense all-reduce
#
# The bundled sweep `configs/sweeps/zen_density.yaml`: one 8 MB gradient tensor (2M values),
# top-k sparsified to a per-worker density d, half of each worker's positions common to all workers,
# 16 single-V100 hosts with 25 Gbps NICs on one switch, 30 ms of compute, one bucket. The notebook
# takes the sweep's points and simulates each one itself, to keep the `iterations` table (the sweep
# runner keeps only summaries); `syncsim sweep` runs the same grid from the command line.

# %%
sweep = load_sweep(bundled("sweeps/zen_density.yaml"))
AXIS = "workload.sparsity.topk"
rows = []
for point in sweep.points:
    result = simulate(point.config)
    summary = result.summary.set_index("policy")
    rows.append(
        steady(result).assign(
            density=point.coords[AXIS],
            bytes_per_worker=summary["network_bytes_per_iteration"] / summary["workers"],
            imbalance=summary["mean_recv_imbalance"],
        )
    )
topk = pd.concat(rows).rename_axis("policy").reset_index()
config = sweep.points[0].config
n = int(summary["workers"].iloc[0])
M = config.workload.gradient_mb * 1e6 / 4  # fp32 values
overlap = config.workload.sparsity.topk_overlap
compute_s, batch, iterations = config.workload.compute_ms / 1e3, config.workload.batch_size, config.iterations
comm = topk.pivot(index="density", columns="policy", values="comm_s")[SCHEMES]
(comm * 1e3).round(3)

# %% [markdown]
# ### Closed forms
#
# Bytes each worker sends (and, by symmetry, receives) per iteration (docs/sparse.md), with
# b_v = b_i = 4 bytes per value and per id, and D the aggregated density (rows non-zero on any
# worker) that top-k sets with overlap o give:
#
# | scheme | bytes per worker |
# | --- | --- |
# | `ring` | 2 (n-1)/n · M b_v, whatever the density |
# | `sparse_allgather` | (n-1) · d M (b_v + b_i): n times Zen's first phase, at any overlap |
# | `zen_list` | (n-1)/n · (d + D) M (b_v + b_i) |
# | `zen` | the same, each phase's ids min(list, bitmap): a bitmap costs M/8 per phase |
# | `sparse_ps` | Zen's two phases with list ids, in steady state; the first iteration only pushes |
#
# Dense ring moves fewer bytes than the all-gather once d > 2 b_v / (n (b_v + b_i)) = 1/n, and
# fewer than `zen_list` and `sparse_ps` once d + D > 2 b_v / (b_v + b_i) = 1. With bitmaps Zen moves
# at most (d + D) M b_v + 2 · M/8, which stays below ring's bytes for every d here.

# %%
BV = BI = 4


def aggregated(d):
    """D for top-k sets: a share `overlap` of each worker's d is common, the rest independent."""
    shared = overlap * d
    q = (d - shared) / (1 - shared)
    return shared + (1 - shared) * (1 - (1 - q) ** n)


def expected_bytes(scheme, d):
    D, f = aggregated(d), (n - 1) / n
    push, pull = f * d * M * (BV + BI), f * D * M * (BV + BI)
    return {
        "ring": 2 * f * M * BV,
        "sparse_allgather": (n - 1) * d * M * (BV + BI),
        "zen_list": push + pull,
        "zen": f * (d * M * BV + min(d * M * BI, M / 8)) + f * (D * M * BV + min(D * M * BI, M / 8)),
        # the summary averages every iteration; the first has no read
        "sparse_ps": push + pull * (iterations - 1) / iterations,
    }[scheme]


def bisect(f, lo=1e-6, hi=1.0):
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < 0 else (lo, mid)
    return lo


crossing = {
    "sparse_allgather": 2 * BV / (n * (BV + BI)),
    "zen_list": bisect(lambda d: (d + aggregated(d)) * (BV + BI) - 2 * BV),
}
crossing["sparse_ps"] = crossing["zen_list"]
topk["expected_bytes"] = [expected_bytes(p, d) for p, d in zip(topk["policy"], topk["density"])]
topk["bytes_ratio"] = topk["bytes_per_worker"] / topk["expected_bytes"]
pd.Series(crossing, name="closed-form crossover d").round(4)

# %%
# the simulator's bytes are the closed forms', at every density and for every scheme
assert (topk["bytes_ratio"] - 1).abs().max() < 0.02, topk[["policy", "density", "bytes_ratio"]]
# the closed forms agree with the library's (sim.compute.sparse_costs, docs/sparse.md)
assert abs(crossing["sparse_allgather"] - crossover_density(n, overlap, scheme="sparse_allgather")) < 1e-6
assert abs(crossing["zen_list"] - crossover_density(n, overlap, scheme="zen")) < 1e-6
# Zen's list-id bytes over the all-gather's: (d + D) / (n d), less than 1 whenever sets overlap
sent = topk.pivot(index="density", columns="policy", values="bytes_per_worker")
for d in sent.index:
    assert abs(sent.loc[d, "zen_list"] / sent.loc[d, "sparse_allgather"] / ((d + aggregated(d)) / (n * d)) - 1) < 0.03
    assert sent.loc[d, "zen_list"] < sent.loc[d, "sparse_allgather"]
assert (sent["zen"] < sent["ring"]).all()  # with bitmaps Zen moves fewer bytes than ring at every density
# hashing gives every owner its share of uniformly placed rows: Zen's collectives stay balanced
assert (topk[topk["policy"].isin(["zen", "zen_list", "sparse_allgather"])]["imbalance"] < 1.1).all()

# %% [markdown]
# ### Time against density
#
# Vertical lines: the closed-form crossovers. The all-gather loses to ring from d = 1/n on, whatever
# the overlap, since it never reduces before sending. Zen with list ids, and the sparse PS (the same
# two phases through colocated shards: their lines coincide), lose once d + D passes 1. Zen with
# bitmaps beats ring at every density of the sweep. With one bucket after the backward pass nothing
# hides the communication, so throughput is n × batch / (compute + communication) and ranks the
# schemes as their communication does.

# %%
fig, (ax_t, ax_x) = plt.subplots(1, 2, figsize=(11, 4))
for policy in SCHEMES:
    line = topk[topk["policy"] == policy]
    ax_t.plot(line["density"], line["comm_s"] * 1e3, label=policy, **STYLES[policy])
    ax_x.plot(line["density"], line["throughput"], label=policy, **STYLES[policy])
for policy, what in (("sparse_allgather", "d = 1/n"), ("zen_list", "d + D = 1")):
    for ax in (ax_t, ax_x):
        ax.axvline(crossing[policy], color=COLORS[policy], linestyle=":", linewidth=1.2, label=what)
ax_t.set(xscale="log", yscale="log", xlabel="per-worker density d", ylabel="communication per iteration (ms)")
ax_x.set(xscale="log", xlabel="per-worker density d", ylabel="throughput (samples/s)")
ax_t.legend(fontsize=8)
for ax in (ax_t, ax_x):
    ax.grid(alpha=0.3, which="both")
fig.suptitle(f"{n} workers, 8 MB tensor, top-k with overlap {overlap} (dotted: closed-form crossovers)", fontsize=10)
plt.tight_layout()

# %%
# each sparse scheme beats ring below its closed-form crossover and loses above it (the grid
# has densities on both sides of each, none within 25% of one)
for policy, d_star in crossing.items():
    below, above = comm.index[comm.index < d_star / 1.25], comm.index[comm.index > d_star * 1.25]
    assert len(below) and len(above) and len(below) + len(above) == len(comm)
    assert (comm.loc[below, policy] < comm.loc[below, "ring"]).all(), policy
    assert (comm.loc[above, policy] > comm.loc[above, "ring"]).all(), policy
assert (comm["zen"] < comm["ring"]).all()  # bitmaps: Zen never loses here
assert (comm["zen"] <= comm["zen_list"] * 1.001).all()  # auto picks the smaller coding
# the sparse PS moves zen_list's bytes in steady state, and takes its time
assert ((comm["sparse_ps"] / comm["zen_list"] - 1).abs() < 0.05).all()
# ring's time does not depend on the density
assert comm["ring"].max() / comm["ring"].min() - 1 < 1e-6
# throughput = n x batch / (compute + communication + waiting): nothing overlaps the exchange
wait = topk["iteration_s"] - topk["compute_s"] - topk["comm_s"]
assert (topk["compute_s"] - compute_s).abs().max() < 1e-9 and (wait.abs() < 0.002 * topk["iteration_s"]).all()
assert ((topk["throughput"] * topk["iteration_s"] / (n * batch) - 1).abs() < 0.01).all()

# %% [markdown]
# ### Bytes against density
#
# Markers: bytes each worker's NIC sent per iteration (`network_bytes_per_iteration` / n, a mean over
# the run); lines: the closed forms. The all-gather's bytes grow as n · d; Zen's as d + D, and D
# saturates at 1 as d grows; ring's are constant. Bitmaps cap Zen's id cost once a phase's density
# passes 1/32. The sparse PS sits below `zen_list` only because its first iteration reads nothing.

# %%
fig, ax = plt.subplots(figsize=(7, 4))
densities = sorted(topk["density"].unique())
grid = [densities[0] * (densities[-1] / densities[0]) ** (i / 60) for i in range(61)]
for policy in SCHEMES:
    line = topk[topk["policy"] == policy]
    label = policy if policy != "sparse_ps" else f"sparse_ps (mean of {iterations} iterations, one read)"
    ax.plot(
        line["density"], line["bytes_per_worker"] / 1e6, STYLES[policy]["marker"], color=COLORS[policy], label=label
    )
    ax.plot(grid, [expected_bytes(policy, d) / 1e6 for d in grid], "-", color=COLORS[policy], linewidth=1)
ax.set(xscale="log", yscale="log", xlabel="per-worker density d", ylabel="MB sent per worker per iteration")
ax.set_title("measured (markers) and closed form (lines)", fontsize=10)
ax.legend(fontsize=8)
ax.grid(alpha=0.3, which="both")
plt.tight_layout()

# %% [markdown]
# ## 2. Embedding gradients: DeepFM, density set by the batch
#
# `configs/papers/zen_deepfm_16x1.yaml`: DeepFM on 16 single-V100 hosts. Its two tables (10^6 rows
# of 10 values, and 10^6 rows of 1) get gradients only in the rows a batch looked up: 39 ids per
# sample from a Zipf(1.1) law. A larger batch makes them denser. The measured densities come from
# the `ops` table: the all-gather moves each worker's d, Zen's all-gather phase the aggregate D
# (with list ids, `wire_bytes` of Zen's all-gather over its all-to-all is D / d). As in part 1, on the
# ideal network: sparse collectives have no NCCL model yet (docs/fidelity.md), so the dense ring is
# priced on the same footing.

# %%
deepfm = bundled("papers/zen_deepfm_16x1.yaml")
policies = [{"name": "ring"}, {"name": "zen"}, {"name": "zen", "label": "zen_list", "index_format": "list"}]
policies += [{"name": "sparse_allgather"}, {"name": "sparse_ps"}]
TABLES = [(10**6, 10), (10**6, 1)]  # (rows, values per row) of DeepFM's embedding and fm.linear
IDEAL = ["simulation.network_model=ideal"]
nic = load_config(deepfm).cluster.nic_gbps * 1e9 / 8  # bytes/s
unit = sum(rows * (width * BV + BI) for rows, width in TABLES)  # bytes of all rows, list ids
batches = [128, 1024, 8192]
emb, per_batch = [], {}
for batch_size in batches:
    result = simulate(
        load_config(deepfm, [*IDEAL, "iterations=2", f"workload.batch_size={batch_size}", f"policies={policies}"])
    )
    ops = result.ops[result.ops["rank"] == -1]
    wire = ops.groupby(["policy", "kind", "step"])["wire_bytes"].sum().groupby(["policy", "kind"]).mean()
    k = int(result.summary["workers"].iloc[0])
    d = wire["sparse_allgather", "AllGather"] / (k * (k - 1) * unit)
    dense = ops[(ops["policy"] == "zen") & (ops["kind"] == "AllReduce")]  # the DNN's dense bucket
    bandwidth_s = 2 * (k - 1) / k * dense["nbytes"] / nic
    emb.append(
        {
            "batch": batch_size,
            "d": d,
            "lookup_share": 39 * batch_size / 10**6,  # ids drawn per worker over rows: the density with no repeats
            "D_over_d": wire["zen_list", "AllGather"] / wire["zen_list", "AllToAll"],
            "gather_over_a2a": wire["sparse_allgather", "AllGather"] / wire["zen_list", "AllToAll"],
            # Zen's ring all-reduce of the dense bucket, less its bandwidth term: its 2(n-1) latencies
            "ring_latency_us": (dense["finished_s"] - dense["launched_s"] - bandwidth_s).mean() * 1e6,
        }
    )
    per_batch[batch_size] = steady(result)
emb = pd.DataFrame(emb).set_index("batch")
dcomm = pd.DataFrame({b: s["comm_s"] for b, s in per_batch.items()}).T[SCHEMES]
display(emb.round(4))
(dcomm * 1e3).round(3).rename_axis("batch")

# %% [markdown]
# A worker's batch touches fewer distinct rows than it draws ids, and the larger the batch the more
# its draws repeat. Popular rows are drawn by every worker, so the union D stays well below n · d,
# and the larger the batch the smaller D / d. Zen's owners sum that overlap away before their
# all-gather, while the all-gather baseline moves every worker's rows to every other (n times Zen's
# first phase). Zen beats the all-gather and ring at every batch, and its lead over the all-gather
# grows with the batch.
#
# The sparse PS (list ids) is faster than Zen at the smaller batches, for a reason that has nothing
# to do with the tables: DeepFM's dense DNN bucket goes through its colocated servers in two
# latencies, while Zen all-reduces it in a ring of 2(n-1), and the PS pulls that bucket during
# forward and pushes it during backward, where compute hides part of it. So the distance between
# `zen_list` and `sparse_ps` is at least the ring's extra latency, and changes by less than a
# quarter across these batches. Once D passes 1/32 (from 1,024 on) Zen's all-gather sends bitmap
# ids instead of a list; at the largest batch that saves more than the latency gap, and Zen is
# ahead.

# %%
fig, (ax_d, ax_c) = plt.subplots(1, 2, figsize=(11, 4))
ax_d.plot(emb.index, emb["d"] * 100, "o-", label="per worker, d")
ax_d.plot(emb.index, emb["d"] * emb["D_over_d"] * 100, "o-", label=f"union over {k} workers, D")
ax_d.plot(emb.index, emb["lookup_share"] * 100, "k:", label="ids drawn / rows")
ax_d.set(xscale="log", yscale="log", xlabel="batch per GPU", ylabel="embedding gradient density (%)")
for policy in SCHEMES:
    ax_c.plot(dcomm.index, dcomm[policy] * 1e3, label=policy, **STYLES[policy])
ax_c.set(xscale="log", yscale="log", xlabel="batch per GPU", ylabel="communication per iteration (ms)")
ax_c.set_yticks([1, 2, 5, 10, 20], ["1", "2", "5", "10", "20"])
ax_c.set_yticks([], minor=True)
for ax in (ax_d, ax_c):
    ax.set_xticks(batches, [str(b) for b in batches])
    ax.set_xticks([], minor=True)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
fig.suptitle(f"DeepFM, {k} workers", fontsize=10)
plt.tight_layout()

# %%
assert (emb["d"] < emb["lookup_share"]).all()  # repeats: fewer distinct rows than ids drawn
assert emb["d"].is_monotonic_increasing and (emb["d"] / emb["lookup_share"]).is_monotonic_decreasing
assert (emb["D_over_d"] < 0.75 * k).all()  # overlap: the union is well below n d
assert emb["D_over_d"].is_monotonic_decreasing  # and the more so the larger the batch
assert ((emb["gather_over_a2a"] / k - 1).abs() < 0.03).all()  # the all-gather: n times Zen's all-to-all
for batch_size in batches:
    c = dcomm.loc[batch_size]
    assert c["zen"] < c["sparse_allgather"] < c["ring"] and c["zen"] < c["zen_list"] * 1.001
lead = dcomm["sparse_allgather"] / dcomm["zen"]
assert lead.is_monotonic_increasing and lead.iloc[-1] > 1.5
# the sparse PS's edge over zen_list: at least the ring's latency on the dense bucket, at every batch
gap = dcomm["zen_list"] - dcomm["sparse_ps"]
assert (gap * 1e6 > 0.9 * emb["ring_latency_us"]).all() and gap.max() < 1.25 * gap.min(), (gap, emb)
assert dcomm.loc[batches[0], "sparse_ps"] < dcomm.loc[batches[0], "zen"]
assert dcomm.loc[batches[-1], "zen"] < dcomm.loc[batches[-1], "sparse_ps"]
# bitmaps make Zen cheaper than its list-id self exactly where D passes 1/32
assert ((dcomm["zen"] < 0.99 * dcomm["zen_list"]) == (emb["d"] * emb["D_over_d"] > 1 / 32)).all()

# %% [markdown]
# ## 3. Zen's hash partition against contiguous ranges
#
# In Zen's all-to-all, owner j receives every worker's rows in j's share. Hashing gives every owner
# 1/n of everyone's rows, whatever the skew. Contiguous ranges are as good while ids are already
# hashed (`hot_rows: scattered`, as Criteo's are), but if ids are numbered by frequency
# (`hot_rows: first`) the owner of the first range receives most of the popular rows. `imbalance`
# in the `ops` table is max over mean bytes received by a collective's members.

# %%
pair = [{"name": "zen"}, {"name": "zen", "label": "zen_contiguous", "partition": "contiguous"}]
balance = []
for hot in ("scattered", "first"):
    overrides = [*IDEAL, "iterations=2", f"workload.sparsity.hot_rows={hot}", f"policies={pair}"]
    result = simulate(load_config(deepfm, overrides))
    ops = result.ops[result.ops["rank"] == -1]
    worst = ops.groupby(["policy", "kind"])["imbalance"].max().unstack()
    comm_s = result.summary.set_index("policy")["mean_comm_s"]
    for policy in ("zen", "zen_contiguous"):
        balance.append(
            {
                "hot_rows": hot,
                "policy": policy,
                "a2a_imbalance": worst.loc[policy, "AllToAll"],
                "gather_imbalance": worst.loc[policy, "AllGather"],
                "comm_ms": comm_s[policy] * 1e3,
            }
        )
balance = pd.DataFrame(balance).set_index(["hot_rows", "policy"])
fig, (ax_i, ax_c) = plt.subplots(1, 2, figsize=(10, 3.5))
balance["a2a_imbalance"].unstack().plot.bar(ax=ax_i, rot=0, ylabel="all-to-all: max / mean received")
balance["comm_ms"].unstack().plot.bar(ax=ax_c, rot=0, ylabel="communication per iteration (ms)")
batch_size = load_config(deepfm).workload.batch_size
fig.suptitle(f"DeepFM, batch {batch_size}, {k} workers: Zen's owners by hashed id or by id range", fontsize=10)
plt.tight_layout()
balance.round(3)

# %%
b = balance
assert (b.xs("zen", level="policy")["a2a_imbalance"] < 1.1).all()  # hashing: balanced whatever the ids
assert b.loc[("scattered", "zen_contiguous"), "a2a_imbalance"] < 1.1  # hashed ids: ranges balance too
assert abs(b.loc[("scattered", "zen_contiguous"), "comm_ms"] / b.loc[("scattered", "zen"), "comm_ms"] - 1) < 0.02
assert b.loc[("first", "zen_contiguous"), "a2a_imbalance"] > 3  # frequency-ordered ids: one owner swamped
assert b.loc[("first", "zen_contiguous"), "comm_ms"] > 2 * b.loc[("first", "zen"), "comm_ms"]
