"""Numerics mode for one policy run: the replicas, the evaluator, and torch's thread setting."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Optional

import torch

from policies.tensors import Buffer
from sim.config import Config
from sim.numerics.evaluation import Evaluator
from sim.numerics.replicas import Replicas
from sim.numerics.tasks import Task


def load_task(config: Config) -> Task:
    """The data set and model of `config.numerics`, built once and shared by every policy."""
    assert config.numerics is not None
    if config.numerics.zoo_model:
        from sim.numerics.zoo_task import DECODER, ZooTask, numerics_architecture

        transformer = config.workload.transformer
        arch = None
        if config.numerics.model == DECODER:
            assert transformer is not None  # the config's validators require workload.model transformer
            arch = numerics_architecture(transformer.architecture(), config.numerics)
        return ZooTask(config.numerics, config.seed, arch)  # type: ignore[return-value]  # same interface
    return Task(config.numerics, config.seed)


def attach(
    config: Config,
    task: Task,
    world: int,
    bucket_bytes: Sequence[float],
    policy: str,
    servers: bool,
    buffers: Sequence[Buffer] = (),
    global_tensor: Optional[str] = None,
) -> tuple[Replicas, Evaluator]:
    """`servers`: some phase of the policy runs parameter-server shards; `buffers`: every phase policy's
    (`local_ops.phase_buffers`); `global_tensor`: the first phase's global model (`Policy.global_tensor`).
    The evaluator learns each phase's budget kind from `Evaluator.begin_phase`."""
    cfg = config.numerics
    assert cfg is not None
    workload = config.workload
    replicas = Replicas(
        cfg,
        task,
        world,
        bucket_bytes,
        config.iterations,
        config.seed,
        policy,
        servers,
        workload.sparsity,
        gradient_precision=workload.wire_precision,
        buffers=buffers,
        global_tensor=global_tensor,
    )
    evaluator = Evaluator(replicas, cfg.eval_every, cfg.eval_workers, synchronous=True)
    evaluator.evaluate(0.0)
    return replicas, evaluator


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """Run tiny models on `n` threads (thread hand-offs cost more than they save), then restore."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def check(config: Config, world: int) -> Task:
    """Build the task and check the batch fits the workers (a ConfigError names the field)."""
    from sim.numerics.batches import ShardSampler, per_worker_batch

    task = load_task(config)
    assert config.numerics is not None
    batch = per_worker_batch(config.numerics.global_batch, world)
    ShardSampler(len(task.data.y_train), world, 0, batch, config.seed)
    return task
