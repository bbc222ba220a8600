"""The DGX setups scaling rows are simulated on (sim/experiments/scaling_setups.py), against the datasheets."""

from __future__ import annotations

import pytest

from sim.catalog.gpus import GPU_NAMES
from sim.experiments.scaling_setups import (
    SYSTEMS,
    TRAINING,
    TrainingSetup,
    accumulation_steps,
    cluster_section,
    hosts_and_gpus,
    intra_host_gbps,
    memory_gbs,
    optimizer_ms,
    system_setup,
    training_setup,
)

GNMT = "PyTorch/Translation/GNMT/README.md"
TXL = "PyTorch/LanguageModeling/Transformer-XL/README.md"


def test_datasheet_figures() -> None:
    # (GPU, GPUs per host, compute NICs, Gbit/s each): DGX-1 4x EDR, DGX-2 8x EDR, DGX A100 8x HDR
    assert {name: (s.gpu, s.gpus_per_host, s.nics_per_host, s.nic_gbps) for name, s in SYSTEMS.items()} == {
        "DGX-1": ("V100", 8, 4, 100.0),
        "DGX-2": ("V100", 16, 8, 100.0),
        "DGX A100": ("A100", 8, 8, 200.0),
    }
    assert all(s.gpu in GPU_NAMES and s.citation for s in SYSTEMS.values())


def test_published_names_find_their_system() -> None:
    assert system_setup("DGX-2H 32GB") is SYSTEMS["DGX-2"]
    assert system_setup("DGX A100 40GB") is SYSTEMS["DGX A100"]
    with pytest.raises(ValueError, match="'DGX H100'.*known: DGX-1, DGX-2, DGX A100"):
        system_setup("DGX H100")


def test_hosts_and_gpus() -> None:
    assert hosts_and_gpus("DGX-1 16GB", 1, 4) == (1, 4)
    assert hosts_and_gpus("DGX-2H 32GB", 4, 64) == (4, 16)
    for nodes, gpus in ((2, 12), (1, 16), (3, 8), (0, 8)):  # partial nodes, an overfull host, uneven, none
        with pytest.raises(ValueError, match="gpus"):
            hosts_and_gpus("DGX-1 16GB", nodes, gpus)


def test_cluster_section() -> None:
    assert cluster_section("DGX A100 80GB", 4, 32) == {
        "topology": "star",
        "hosts": 4,
        "gpus_per_host": 8,
        "gpu": "A100",
        "nics_per_host": 8,
        "nic_gbps": 200.0,
        "intra_host_gbps": 2400.0,  # the A100's own NVLink figure: NVSwitch joins every GPU
    }


def test_dgx1_first_gpus_reach_fewer_nvlinks() -> None:
    # GPU0-GPU1 is one NVLink (20 GB/s = 160 Gbit/s); GPUs 0-3 carry 4 rings; all 8 GPUs every link
    assert intra_host_gbps("DGX-1 16GB", 2) == 160.0
    assert intra_host_gbps("DGX-1 32GB", 4) == 640.0
    assert intra_host_gbps("DGX-1 16GB", 8) == 1200.0  # the V100's 6 links x 25 GB/s
    assert intra_host_gbps("DGX-2H 32GB", 2) == 1200.0  # NVSwitch: any two GPUs get all their links
    assert cluster_section("DGX-1 16GB", 1, 2)["intra_host_gbps"] == 160.0


def test_memory_bandwidth_by_system() -> None:
    assert memory_gbs("DGX-1 16GB") == 900.0
    assert memory_gbs("DGX-2H 32GB") == 900.0
    assert memory_gbs("DGX A100 40GB") == 1555.0
    assert memory_gbs("DGX A100 80GB") == 2039.0
    with pytest.raises(ValueError, match="DGX H100"):
        memory_gbs("DGX H100")


def test_gnmt_accumulates_to_the_benchmark_global_batch() -> None:
    gnmt = training_setup(GNMT)
    # --train-global-batch-size 1024 at 128 a GPU: 8 micro-batches on 1 GPU, 2 on 4, 1 on 8; 2048 on 16
    assert [accumulation_steps(gnmt, 128, g) for g in (1, 4, 8, 16)] == [8, 2, 1, 1]
    with pytest.raises(ValueError, match="not a multiple"):
        accumulation_steps(gnmt, 128, 3)
    # Transformer-XL's benchmark sets the global batch from the local one: nothing accumulates
    assert [accumulation_steps(training_setup(TXL), 16, g) for g in (1, 2, 8)] == [1, 1, 1]


def test_training_setups_from_the_code() -> None:
    assert training_setup(TXL).overlap_backward is False  # shared r_w_bias / r_r_bias in DDP's first bucket
    assert training_setup(GNMT).overlap_backward is True
    assert training_setup("PyTorch/LanguageModeling/BERT/README.md") == TrainingSetup()  # plain DDP
    # clip norm 4 + Adam 80 + fp16 copy, zero_grad and the skipped stash read 6 + 2 - 4, or fp32 zero_grad 4
    assert training_setup(GNMT).update_bytes_per_param == 88
    assert training_setup(GNMT).bucket_values == 1e7  # apex DDP's message_size
    # TensorFlow GNMT's 139,640.48 tokens/s at 2,918.36 pairs/s, plus BOS, EOS and the target's BOS-less count
    assert training_setup(GNMT).sample_tokens == pytest.approx(47.849 + 3, abs=1e-3)
    assert all(setup.citation for setup in TRAINING.values())


def test_optimizer_step_is_its_memory_traffic() -> None:
    setup = TrainingSetup(update_bytes_per_param=100.0)
    # 1e9 parameters x 100 bytes over 900 GB/s at half of it: 100e9 / 450e9 s = 222.2 ms
    assert optimizer_ms(setup, 10**9, "DGX-1 16GB", 0.5) == pytest.approx(1e3 * 100e9 / 450e9)
    assert optimizer_ms(TrainingSetup(), 10**9, "DGX-1 16GB", 0.5) == 0.0
