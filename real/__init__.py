"""The real backend: runs the same policy objects on torch.distributed (gloo/NCCL). See docs/real.md.

`session` (one process of a run), `worker` and `executor` (a worker's loop and its ops as torch
calls), `collectives` (each collective's tensor rule), `server` and `protocol` (parameter-server
processes), `groups` (process groups planned up front), `accounting` and `results` (the simulator's
tables from real timings), `launch` (local processes, failure handling), `liveness` (heartbeats),
`validate` (predicted vs measured), `hooks` / `averager` (use in your own DDP training), and the
`emulate` and `calibrate` packages. The simulator never imports it.
"""
