"""Plain single-process training, the yardstick of numerics mode.

One process, one `torch.nn` model, `torch.optim` and the global batch that the `world` workers would
together draw at each step (worker 0's batch, then worker 1's, ...). Synchronous schemes in numerics
mode must reproduce its parameters (tests/test_numerics_equivalence.py).
"""

from __future__ import annotations

import torch
from torch import nn

from sim.config.numerics import NumericsConfig
from sim.numerics.batches import ShardSampler, per_worker_batch
from sim.numerics.optim import learning_rate
from sim.numerics.tasks import Task


def optimizer_for(cfg: NumericsConfig, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    o = cfg.optimizer
    if o.name == "sgd":
        return torch.optim.SGD(params, lr=o.lr, momentum=o.momentum, nesterov=o.nesterov, weight_decay=o.weight_decay)
    if o.name == "adamw":
        return torch.optim.AdamW(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)
    return torch.optim.Adam(params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay)


def train_reference(cfg: NumericsConfig, seed: int, world: int, iterations: int) -> torch.Tensor:
    """Final flat parameters after `iterations` steps on the global batch."""
    task = Task(cfg, seed)
    model = task.module
    with torch.no_grad():
        nn.utils.vector_to_parameters(task.initial.clone(), model.parameters())
    optimizer = optimizer_for(cfg, list(model.parameters()))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda it: learning_rate(1.0, cfg.schedule, it, iterations))
    batch = per_worker_batch(cfg.global_batch, world)
    n_train = len(task.data.y_train)
    samplers = [ShardSampler(n_train, world, r, batch, seed) for r in range(world)]
    x, y = task.data.x_train, task.data.y_train
    for _ in range(iterations):
        idx = torch.cat([torch.from_numpy(s.next()) for s in samplers])
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        optimizer.step()
        schedule.step()
    return nn.utils.parameters_to_vector(model.parameters()).detach().clone()
