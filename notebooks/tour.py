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
# # A tour: one cluster, every scheme, where the time goes
#
# One config (the bundled quickstart: 8 V100 workers in 2 racks, ResNet-50), every dense scheme
# syncsim ships, five iterations each. Everything below comes from the public API: `simulate`
# returns a `Result` whose tables are DataFrames (the same tables `syncsim run` writes as CSV).

# %%
import matplotlib.pyplot as plt

from sim import load_config, simulate
from sim.bundled import bundled

schemes = ["no_sync", "ring", "hierarchical", "ps", "asp", "ssp", "ds_sync"]
config = load_config(bundled("quickstart.yaml"), ["iterations=5", "policies=" + str([{"name": s} for s in schemes])])
result = simulate(config)
summary = result.summary.set_index("policy")
summary[["mean_iteration_s", "mean_compute_s", "mean_comm_s", "mean_wait_s", "throughput_samples_s"]].round(4)

# %% [markdown]
# ## Where the time goes
#
# Each iteration splits into compute, communication the worker could not hide behind backward, and
# waiting for other workers. `no_sync` is the compute-only bound every scheme is measured against.

# %%
parts = summary[["mean_compute_s", "mean_comm_s", "mean_wait_s"]] * 1e3
parts.columns = ["compute", "communication (not hidden)", "waiting"]
ax = parts.plot.barh(stacked=True, figsize=(7, 3.5))
ax.set_xlabel("Time per iteration (ms, mean over workers)")
ax.set_ylabel("")
ax.invert_yaxis()
ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)  # beside the bars, not over them
plt.tight_layout()

# %%
# what the bars say, checked: nothing beats doing no synchronization, and the parts add up
assert (summary["mean_iteration_s"] >= summary.loc["no_sync", "mean_iteration_s"] * 0.999).all()
total = summary[["mean_compute_s", "mean_comm_s", "mean_wait_s"]].sum(axis=1)
assert ((total - summary["mean_iteration_s"]).abs() < 1e-9 + 1e-6 * summary["mean_iteration_s"]).all()

# %% [markdown]
# ## The network's view
#
# `links` has the bytes each link carried. Parameter servers concentrate traffic on the shards'
# hosts; all-reduce spreads it evenly.

# %%
links = result.links
busiest = links.sort_values("bytes", ascending=False).groupby("policy", sort=False).head(1)
busiest[["policy", "link", "kind", "bytes"]].assign(gb=lambda d: d["bytes"] / 1e9).drop(columns="bytes")
