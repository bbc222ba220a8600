"""Numerics mode: every simulated worker trains a real model replica on the simulator's clock.

`tasks` (data and models), `optim` (optimizers on flat parameter ranges), `replicas` (the workers'
tensors and what each op does to them), `servers` (parameter-server tensors), `evaluation`
(accuracy rows) and `reference` (single-process training, the yardstick of the equivalence tests).
Above `sim.compute` and below the engine: it imports compute, config, catalog and `policies.ops`. The
engine imports it only when a config enables numerics, so timing-only runs never load torch.
"""
