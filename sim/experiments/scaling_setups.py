"""The hardware and training setup each published scaling row is simulated on (sim/experiments/scaling_all.py).

Written down from the systems' datasheets and the benchmarks' code and commands, before any row was
simulated, and never adjusted to a result: which GPU, how many per host, the NICs NCCL uses between
hosts, the gradient synchronization of PyTorch's DDP, and where a benchmark's script departs from it
(`TRAINING`, read from the training code that produced the figures: docs/fidelity.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.catalog.gpus import get_gpu


@dataclass(frozen=True)
class SystemSetup:
    """One DGX system: its GPUs and the compute-fabric NICs NCCL uses across hosts."""

    gpu: str  # the GPU catalogue's name (sim/catalog/gpus.py)
    gpus_per_host: int
    nics_per_host: int  # compute-fabric NICs only: storage and management ports carry no NCCL traffic
    nic_gbps: float  # each NIC, per direction
    citation: str


# Keyed by the prefix of published_scaling.csv's `system` column; the longest matching prefix wins, so
# "DGX-2H 32GB" is a DGX-2 (the H is a higher-clocked 450 W V100; same NVSwitch and network).
SYSTEMS: dict[str, SystemSetup] = {
    "DGX-1": SystemSetup(
        "V100",
        8,
        4,
        100.0,
        "NVIDIA DGX-1 with Tesla V100 datasheet: 8x Tesla V100 (NVLink hybrid cube-mesh); network 4x IB EDR "
        "(100 Gb/s each) plus dual 10 GbE",
    ),
    "DGX-2": SystemSetup(
        "V100",
        16,
        8,
        100.0,
        "NVIDIA DGX-2 / DGX-2H datasheets: 16x Tesla V100 on NVSwitch; network 8x 100 Gb/s InfiniBand EDR / "
        "100 GigE plus dual 10/25 GbE",
    ),
    "DGX A100": SystemSetup(
        "A100",
        8,
        8,
        200.0,
        "NVIDIA DGX A100 datasheet: 8x A100 on NVSwitch; cluster network 8x single-port ConnectX-6 VPI "
        "200 Gb/s HDR InfiniBand; the dual-port storage ConnectX-6 left out",
    ),
}

# PyTorch DistributedDataParallel's defaults: NCCL ring all-reduce of gradient buckets of bucket_cap_mb=25
# (torch.nn.parallel.DistributedDataParallel's documented default), overlapped with backward.
POLICY = "ring"
BUCKET_MB = 25.0
# Multi-node rows ran on DGX SuperPOD-style clusters (Selene for the DGX A100 BERT rows): a non-blocking
# fat tree of InfiniBand switches, which one star switch stands for.
TOPOLOGY = "star"


# DGX-1's hybrid cube-mesh: a job on its GPUs 0..n-1 (torch.distributed.launch's devices) reaches the others
# over fewer NVLinks than the 6 each V100 has. GPU0-GPU1 is one link, GPU0-GPU2 one, GPU0-GPU3 two,
# GPU1-GPU2 two, GPU1-GPU3 one (the DGX-1 V100 topology NCCL dumps in NVIDIA/nccl issue 671), GPU2-GPU3 two
# (each GPU's 6 links less its other links). NCCL's rings use one link direction per GPU each: 2 GPUs get 1
# ring's worth of links, 4 GPUs 4 rings (0-1-2-3 and 0-2-1-3, each both ways: GPU0 and GPU1 have 4 links in
# the quad), 8 GPUs all 6. At NCCL's 20 GB/s a V100 NVLink (sim/nccl/fabrics.py's V100 ring, 6 x 20):
NVLINK_GBS = 20.0
DGX1_RING_LINKS: dict[int, int] = {2: 1, 4: 4}


def intra_host_gbps(system: str, gpus_per_host: int) -> float:
    """Gbit/s per direction a GPU's NCCL rings reach inside one host of `system` using `gpus_per_host` GPUs:
    DGX-1's cube-mesh links among its first GPUs, else the GPU's own figure (NVSwitch joins them all)."""
    setup = system_setup(system)
    if setup is SYSTEMS["DGX-1"] and gpus_per_host in DGX1_RING_LINKS:
        return DGX1_RING_LINKS[gpus_per_host] * NVLINK_GBS * 8
    return get_gpu(setup.gpu).intra_host_gbps


def system_setup(system: str) -> SystemSetup:
    """The setup of a published `system` name (its longest matching prefix in SYSTEMS)."""
    matches = [prefix for prefix in SYSTEMS if system.startswith(prefix)]
    if not matches:
        raise ValueError(f"system {system!r} has no setup; known: {', '.join(SYSTEMS)}")
    return SYSTEMS[max(matches, key=len)]


def hosts_and_gpus(system: str, nodes: int, gpus: int) -> tuple[int, int]:
    """(hosts, GPUs per host) of a row: one host of `gpus` GPUs, or `nodes` full hosts of the system."""
    setup = system_setup(system)
    if nodes < 1 or gpus < nodes or gpus % nodes:
        raise ValueError(f"gpus {gpus} do not split over nodes {nodes}")
    per_host = gpus // nodes
    if per_host > setup.gpus_per_host or (nodes > 1 and per_host != setup.gpus_per_host):
        raise ValueError(
            f"gpus per node {per_host} on {system}: allowed up to {setup.gpus_per_host} on one node, "
            f"exactly {setup.gpus_per_host} per node across nodes"
        )
    return nodes, per_host


def cluster_section(system: str, nodes: int, gpus: int) -> dict[str, Any]:
    """The config's `cluster` section for `gpus` GPUs over `nodes` hosts of `system`."""
    setup = system_setup(system)
    hosts, per_host = hosts_and_gpus(system, nodes, gpus)
    return {
        "topology": TOPOLOGY,
        "hosts": hosts,
        "gpus_per_host": per_host,
        "gpu": setup.gpu,
        "nics_per_host": setup.nics_per_host,
        "nic_gbps": setup.nic_gbps,
        "intra_host_gbps": intra_host_gbps(system, per_host),
    }


# The memory bandwidth of each system's GPU (its datasheet), which an optimizer step's element-wise
# passes are bound by; keyed like SYSTEMS (the longest matching prefix wins).
MEMORY_GBS: dict[str, float] = {
    "DGX-1": 900.0,  # Tesla V100 SXM2 datasheet: 900 GB/s HBM2
    "DGX-2": 900.0,  # the DGX-2's and DGX-2H's V100 SXM3 32GB: 900 GB/s HBM2 (DGX-2 datasheet, V100 datasheet)
    "DGX A100 40GB": 1555.0,  # A100 SXM4 40GB datasheet: 1,555 GB/s HBM2
    "DGX A100 80GB": 2039.0,  # A100 SXM4 80GB datasheet: 2,039 GB/s HBM2e
}

_DLE = "NVIDIA/DeepLearningExamples"
_GNMT_CODE = f"{_DLE}@5d2914e3:PyTorch/Translation/GNMT"  # the commit that published the pytorch-20.06 rows
_TXL_CODE = f"{_DLE}@f838cf329:PyTorch/LanguageModeling/Transformer-XL/pytorch"  # likewise


@dataclass(frozen=True)
class TrainingSetup:
    """Where one benchmark's training script departs from plain DDP (every row of its README), from its code.

    `global_batch(gpus)` is the global batch the benchmark command asks for (None: each GPU's batch, no
    accumulation); a smaller per-GPU batch times GPUs accumulates gradients over micro-batches, and
    `update_bytes_per_param` is the memory traffic per parameter of the optimizer step that follows them
    (0: the step is part of every iteration's compute, as the pinning to the base row leaves it).
    `sample_tokens` is the mean tokens of one published sample where the zoo's sample has more (its
    sequence at the training maximum): the simulated batch carries the published batch's tokens."""

    overlap_backward: bool = True
    global_batch: Callable[[int], int] | None = None
    update_bytes_per_param: float = 0.0
    bucket_values: float | None = None  # values per gradient bucket (None: DDP's bucket_cap_mb, BUCKET_MB)
    sample_tokens: float | None = None
    citation: str = ""


def _gnmt_global_batch(gpus: int) -> int:
    # README "Training performance benchmark": --train-global-batch-size 1024 on 1, 4 or 8 GPUs, 2048 on 16
    return 2048 if gpus == 16 else 1024


# GNMT's optimizer step, bytes per parameter (4-byte master values):
#   clip_grad_norm_ over the master gradients: their 2-norm, a read (4); its conditional rescale left out
#   torch.optim.Adam (PyTorch 1.6, one kernel per operation): exp_avg.mul_().add_() 8 + 12, exp_avg_sq
#   .mul_().addcmul_() 8 + 12, denom = sqrt, div, add_ 8 + 8 + 8, p.addcdiv_() 16: 80
#   fp16 (apex amp O2): master -> model copy after the step, a 4-byte read and a 2-byte write (6); model
#   .zero_grad() writes the 2-byte model gradients (2); and the step leaves no master gradient, so the next
#   micro-batch's unscale skips reading one (-4, apex's unscale_with_stashed versus unscale): 88
#   fp32/tf32 (FP32Optimizer): model.zero_grad() writes the 4-byte gradients (4): 88
GNMT_UPDATE_BYTES_PER_PARAM = 4 + 80 + 4
# GNMT's tokens/s counts each pair's source tokens and its target's less one, BOS and EOS included
# (seq2seq/train/trainer.py Seq2SeqTrainer.iterate): the BPE pieces of a WMT16 pair (filtered at 50 with them) plus 3.
# The same data and BPE (TensorFlow/Translation/GNMT's wmt16_en_de.sh) average 47.85 pieces a pair below
# 50 a side: TensorFlow/Translation/GNMT/README.md L456 prints 139,640.48 tokens/s at 2,918.36 pairs/s, and
# nmt.py L1078 derives the first from the second with get_effective_epoch_size's exact counts.
GNMT_TOKENS_PER_PAIR = 139640.48 / 2918.36 + 3

TRAINING: dict[str, TrainingSetup] = {
    "PyTorch/Translation/GNMT/README.md": TrainingSetup(
        global_batch=_gnmt_global_batch,
        update_bytes_per_param=GNMT_UPDATE_BYTES_PER_PARAM,
        bucket_values=1e7,
        sample_tokens=GNMT_TOKENS_PER_PAIR,
        citation=f"{_GNMT_CODE}: README L952/L957 (--train-global-batch-size 1024, 2048 on 16 GPUs), train.py "
        "L334-L347 (iter_size = global / (batch x GPUs)), seq2seq/train/trainer.py iterate/feed_data (the "
        "optimizer step only when i % iter_size == iter_size - 1), seq2seq/train/fp_optimizers.py AMPOptimizer/"
        "FP32Optimizer.step (clip_grad_norm_, Adam, zero_grad); apex.parallel.DistributedDataParallel's "
        "defaults (message_size 1e7 values, overlapped, every backward reduced)",
    ),
    "PyTorch/LanguageModeling/Transformer-XL/README.md": TrainingSetup(
        overlap_backward=False,
        citation=f"{_TXL_CODE}: mem_transformer.py _create_params (L607-L612) registers r_w_bias and "
        "r_r_bias after every layer, and forward (L703) hands both to every layer, so their gradients "
        "complete when backward ends; torch.nn.parallel.DistributedDataParallel puts the last-defined "
        "parameters in its first bucket (list(reversed(bucket_indices))) and its reducer launches buckets "
        "in order (reducer.cpp mark_bucket_ready), never rebuilding them under find_unused_parameters=True "
        "(train.py L783-L788; reducer.h should_rebuild_buckets): nothing is reduced before backward ends. "
        "The benchmark (README L1128, wt103_*.yaml trainbench) accumulates nothing: --local_batch_size sets "
        "the global batch to it times the GPUs, batch_chunk 1",
    ),
}


def training_setup(source: str) -> TrainingSetup:
    """The training setup of a published `source` path (plain DDP where its code departs from it nowhere)."""
    return TRAINING.get(source, TrainingSetup())


def memory_gbs(system: str) -> float:
    """Memory bandwidth of `system`'s GPU, GB/s (the longest matching prefix of MEMORY_GBS)."""
    matches = [prefix for prefix in MEMORY_GBS if system.startswith(prefix)]
    if not matches:
        raise ValueError(f"system {system!r} has no memory bandwidth; known: {', '.join(MEMORY_GBS)}")
    return MEMORY_GBS[max(matches, key=len)]


def accumulation_steps(setup: TrainingSetup, batch: int, gpus: int) -> int:
    """Micro-batches per optimizer step of `gpus` GPUs at `batch` each under `setup`'s global batch."""
    if setup.global_batch is None:
        return 1
    total = setup.global_batch(gpus)
    if total % (batch * gpus):
        raise ValueError(f"global batch {total} is not a multiple of {batch} x {gpus} GPUs")
    return total // (batch * gpus)


def optimizer_ms(setup: TrainingSetup, params: int, system: str, memory_efficiency: float) -> float:
    """One optimizer step of `setup` over `params` parameters: its memory traffic at `memory_efficiency`
    of `system`'s GPU memory bandwidth (per-kernel costs left out)."""
    return setup.update_bytes_per_param * params / (memory_gbs(system) * 1e9 * memory_efficiency) * 1e3
