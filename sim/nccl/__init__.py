"""NCCL's collective costs: its algorithms and protocols, the figures GPUs reach with them, and the
tuner that picks one per collective. Pure arithmetic; imports only `sim.catalog` and `sim.errors`."""
