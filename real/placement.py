"""Putting a rank's training state on its device (`real.backends.training_device`) and its results
back on the host.

A worker trains a device copy of the task (data set, module buffers, initial parameters), so rank 0
can still evaluate the gathered results with the host task after the policy; its optimizer state
moves with them. A parameter-server shard rank computes no gradient and gets the CPU as its device
(real/session.py), so its task, shard tensors and optimizer state stay on the host. Reports leave
a rank with host tensors only, so any rank can read them whatever GPUs it has.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import torch


def task_on(task: Any, device: torch.device) -> Any:
    """`task` itself on the CPU; elsewhere a shallow copy whose data, module and `initial` live on
    `device` (the copy shares everything else, which holds no tensors)."""
    if device.type == "cpu":
        return task
    placed = copy.copy(task)
    data = task.data
    placed.data = replace(
        data,
        x_train=data.x_train.to(device),
        y_train=data.y_train.to(device),
        x_test=data.x_test.to(device),
        y_test=data.y_test.to(device),
    )
    placed.module = copy.deepcopy(task.module).to(device)
    placed.initial = task.initial.to(device)
    return placed


def optimizer_on(optimizer: Any, device: torch.device) -> Any:
    """Move every tensor of a `sim.numerics.optim.FlatOptimizer`'s state to `device`; returns it."""
    for name, value in list(vars(optimizer).items()):
        if isinstance(value, torch.Tensor):
            setattr(optimizer, name, value.to(device))
    return optimizer


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A copy on the host (for snapshots: the original goes on changing)."""
    return tensor.detach().to("cpu", copy=True)


def on_host(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` on the host (itself if it is there already)."""
    return tensor.detach().cpu()
