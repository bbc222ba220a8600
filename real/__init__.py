"""The real backend: runs the same policy objects on torch.distributed (gloo/NCCL).

Not implemented yet (tracked as its own issue); the simulator does not depend on it.
"""
