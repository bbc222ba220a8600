"""Parameter-averaging policies (DS-Sync) as a model averager, called after `optimizer.step()`.

The interface is that of `torch.distributed.algorithms.model_averaging`'s averagers: an object
with a step counter and `average_parameters(params)`, where `params` are a model's parameters or an
optimizer's parameter groups and only parameters that have `.grad` take part. Each call flattens
them into one buffer, runs the policy's parameter programs on it with `real.collectives.start`, and
writes the result back in place (optimizers keep their references).

DS-Sync averages each bucket's parameters right after its local optimizer step in backward; for
element-wise optimizers that equals stepping the whole model and then averaging it, which is what
this does, with one collective per call instead of one per bucket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Optional, Union

import torch
from torch.distributed.algorithms.model_averaging.utils import get_params_to_average

from policies.base import Bucket, Policy
from policies.ops import Payload
from policies.view import ModelInfo
from real.groups import ProcessGroups
from real.hooks import (
    FlatReplica,
    PolicyLike,
    ViewLike,
    cluster_view,
    default_steps,
    nbytes,
    plan,
    resolve_policy,
    run_program,
    trainable,
    world_rank,
)

Params = Union[Iterable[torch.nn.Parameter], Iterable[dict[str, Any]]]


class PolicyAverager:
    """Runs `policy`'s parameter programs for this rank, one step per `average_parameters` call.

    Per call: the `on_gradients` program of one bucket spanning every parameter with a gradient
    (skipped with `on_gradients=False`, when `real.hooks.policy_hook` runs that hook inside DDP),
    then the `end_step` program. `groups` must hold every group they use (see `make_averager`).
    """

    def __init__(self, policy: Policy, rank: int, groups: ProcessGroups, *, on_gradients: bool = True) -> None:
        if policy.view is None:
            raise ValueError(f"policy: {policy.name!r} is not bound; call policy.bind(view, model) first")
        if not 0 <= rank < policy.view.world_size:
            raise ValueError(f"rank: {rank} is not a rank of the view (0..{policy.view.world_size - 1})")
        self.policy, self.rank, self.groups, self.on_gradients = policy, rank, groups, on_gradients
        self.step = 0

    def average_parameters(self, params: Params) -> None:
        """Average the parameters that have `.grad` as the policy says for this step; advance the step."""
        chosen = get_params_to_average(params)
        if not chosen:
            raise ValueError("params: none has a .grad; call average_parameters after backward and optimizer.step()")
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1) for p in chosen])
            bucket = Bucket(0, float(flat.numel() * flat.element_size()), 1)
            programs = [("end_step", self.policy.end_step(self.rank, self.step))]
            if self.on_gradients:
                programs.insert(0, ("on_gradients", self.policy.on_gradients(self.rank, self.step, bucket)))
            changed = False
            for hook, program in programs:
                target = FlatReplica(self.rank, self.policy.name, flat, Payload.PARAMETERS)
                changed |= run_program(program, target, self.groups, self.policy, hook, self.step)
            if changed:
                offset = 0
                for p in chosen:
                    p.copy_(flat[offset : offset + p.numel()].view_as(p))
                    offset += p.numel()
        self.step += 1

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "policy": self.policy.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.step = int(state["step"])
        self.policy.load_state_dict(dict(state["policy"]))

    def __repr__(self) -> str:
        return f"PolicyAverager({self.policy!r}, rank={self.rank}, step={self.step})"


def make_averager(
    policy: PolicyLike,
    settings: Optional[Mapping[str, Any]],
    view: ViewLike,
    model: torch.nn.Module,
    *,
    on_gradients: bool = True,
    steps: Optional[int] = None,
    seed: int = 0,
) -> PolicyAverager:
    """Bind `policy` to `view` and create its process groups; every rank calls it, in the same order.

    The policy sees the model as one bucket (the averager flattens it), and its programs are
    dry-run for `steps` steps (default: the schedule's cycle, e.g. DS-Sync's `cycle_length`) so that
    every group exists before the first call.
    """
    pol = resolve_policy(policy, settings)
    cluster = cluster_view(view, seed)
    params = trainable(model.parameters())
    if not params:
        raise ValueError("model: has no parameters that require grad")
    size = nbytes(params)
    pol.bind(cluster, ModelInfo(size, (size,)))
    run = ("on_gradients", "end_step") if on_gradients else ("end_step",)
    groups = plan(pol, cluster.world_size, default_steps(pol, steps), [Bucket(0, size, 1)], Payload.PARAMETERS, run)
    rank = world_rank(cluster)
    return PolicyAverager(pol, rank, ProcessGroups(groups), on_gradients=on_gradients)
