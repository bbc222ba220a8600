"""syncsim policies in a plain PyTorch training loop: a DDP communication hook and a model averager.

Four gloo processes on CPU stand for a cluster of 2 hosts x 2 GPUs. A small MLP learns a synthetic
regression task twice: with DDP whose gradients go through the `hierarchical` policy (reduce-scatter
in a host, all-reduce across hosts, all-gather in a host), then without DDP, with DS-Sync averaging
the parameters in groups of two that change every step. Rank 0 prints the loss averaged over ranks.

Run from the repository root:  python examples/ddp_hooks.py
"""

from __future__ import annotations

import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from real.averager import make_averager
from real.hooks import make_hook_state, policy_hook

WORLD = 4
VIEW = {"topology": "star", "hosts": 2, "gpus_per_host": 2}  # the `cluster:` section of a syncsim config
STEPS = 60
PRINT_EVERY = 20


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)  # every rank starts from the same model
    return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's minibatch of a fixed random teacher, y = tanh(x w) + noise."""
    teacher = torch.randn(16, 1, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(10_000 * rank + step)
    x = torch.randn(32, 16, generator=g)
    return x, torch.tanh(x @ teacher) + 0.05 * torch.randn(32, 1, generator=g)


def mean_over_ranks(value: float) -> float:
    t = torch.tensor([value])
    dist.all_reduce(t)
    return t.item() / dist.get_world_size()


def train_with_hook(rank: int) -> None:
    model = DDP(mlp())
    state = make_hook_state("hierarchical", None, VIEW, model)  # every rank, same order: creates the groups
    model.register_comm_hook(state, policy_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()  # the hook averages the gradient, bucket by bucket
        opt.step()
        report("hierarchical hook", rank, step, loss.item())


def train_with_averager(rank: int) -> None:
    model = mlp()  # no DDP: DS-Sync averages parameters, not gradients
    averager = make_averager("ds_sync", {"group_size": 2}, VIEW, model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        averager.average_parameters(model.parameters())  # this step's group averages its replicas
        report("ds_sync averager", rank, step, loss.item())
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    spread = flat.clone()
    dist.all_reduce(spread)
    drift = (flat - spread / WORLD).norm().item()
    if rank == 0:
        print(f"ds_sync averager: rank 0's distance to the mean replica {drift:.2e}")


def report(label: str, rank: int, step: int, loss: float) -> None:
    if (step + 1) % PRINT_EVERY and step:
        return
    mean = mean_over_ranks(loss)
    if rank == 0:
        print(f"{label}: step {step + 1:3d}  loss {mean:.4f}", flush=True)


def worker(rank: int, init: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        train_with_hook(rank)
        train_with_averager(rank)
    finally:
        dist.destroy_process_group()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.perf_counter()
    mp.spawn(worker, args=(f"tcp://127.0.0.1:{port}",), nprocs=WORLD)
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
