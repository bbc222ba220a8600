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
# # DS-Sync's story: every scheme against oversubscription and placement
#
# The bundled sweep `configs/sweeps/dssync_oversubscription.yaml` runs DS-Sync's cluster (16 V100
# workers in 4 racks, BERT-large) with the rack uplink from 1:1 down to 16:1 and ranks packed by rack
# or scattered. The sweep API runs its points in parallel processes and returns one tidy table: a
# row per point and policy, the axes as columns.

# %%
import tempfile
from pathlib import Path

from sim.bundled import bundled
from sim.experiments.sweep import load_sweep
from sim.experiments.sweep_plot import sweep_plot
from sim.experiments.sweep_runner import run_sweep

sweep = load_sweep(bundled("sweeps/dssync_oversubscription.yaml"))
out = Path(tempfile.mkdtemp(prefix="dssync-sweep-"))
table = run_sweep(sweep, out, jobs=2).table
table["oversubscription"] = (100 / table["cluster.uplink_gbps"]).map(lambda r: f"{r:g}:1")
by = ["cluster.placement", "oversubscription"]
table.pivot_table(index=by, columns="policy", values="throughput_samples_s", sort=False).round(0)

# %% [markdown]
# ## Throughput against the uplink
#
# A panel per placement, a line per scheme, on a log axis (the uplinks halve). Ring and hierarchical
# all-reduce slow down as soon as the uplink is slower than a rack's NICs together; DS-Sync's groups
# cross the uplinks only in mixing steps.

# %%
files = sweep_plot(table, "throughput_samples_s", "cluster.uplink_gbps", out / "throughput", "DS-Sync's cluster")
from IPython.display import Image  # noqa: E402

Image(filename=str(files[0]))

# %%
# the story in numbers, checked
t = table.set_index(["cluster.placement", "cluster.uplink_gbps", "policy"])["throughput_samples_s"]
assert t["packed", 6.25, "ds_sync"] > 1.5 * t["packed", 6.25, "ring"]  # at 16:1 DS-Sync wins clearly
assert (
    abs(t["packed", 25, "ring"] / t["packed", 100, "ring"] - 1) < 0.01
)  # an uplink as fast as one NIC: free for a packed ring
assert (
    t["scattered", 25, "ring"] < 0.5 * t["packed", 25, "ring"]
)  # the same uplink, ranks scattered: the ring crosses it p times
for policy in ("ring", "hierarchical", "ds_sync"):  # at 1:1 placement does not matter
    assert abs(t["scattered", 100, policy] / t["packed", 100, policy] - 1) < 0.01
