"""What each worker computes and sends: the workload plan (layer times, gradient buckets), the roofline
compute model and its fit, measured profiles, per-worker speeds, sparse index sets and the bytes they
put on the wire. Imports `sim.config`, `sim.catalog` and `policies.ops`; no SimPy."""
