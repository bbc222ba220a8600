"""The flow-level network: transfers share links max-min fairly (`flows`, solved by `maxmin`, both
with compiled kernels), capacities that follow a trace (`traces`), and link utilisation sampled over
time (`sampling`). Imports `sim.kernel`; it knows links and paths, never ranks, policies or the config."""
