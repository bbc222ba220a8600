"""Peak memory per GPU (sim/memory, docs/memory.md): each term against a hand count, and the refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from sim.api import prepare, simulate
from sim.catalog.zoo.llm import DecoderArchitecture, decoder_model
from sim.compute.activations import activation_bytes_per_sample
from sim.config import parse_config
from sim.errors import ConfigError
from sim.memory.peak import GIB

GIB_INT = 2**30
# a tiny Llama: 2 blocks, d 64, 8 heads of 8 with 2 KV heads, SwiGLU of 176, 1,000 words, 32 tokens
SMALL = {"layers": 2, "hidden": 64, "heads": 8, "kv_heads": 2, "mlp": "swiglu", "mlp_width": 176, "vocab": 1000}
SMALL |= {"seq_len": 32, "norm": "rmsnorm", "positions": "rotary", "tied_embeddings": False, "bias": False}
SMALL_PARAMS = 2 * (2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 176 + 2 * 64) + 2 * 1000 * 64 + 64


def small_arch() -> DecoderArchitecture:
    return DecoderArchitecture(max_positions=32, **SMALL)


def run_config(policy: dict[str, Any], *, hosts: int = 4, gpus: int = 1, **workload: Any) -> dict[str, Any]:
    load = {"model": "transformer", "transformer": SMALL, "batch_size": 3, "precision": "bf16", "bucket_mb": 0.02}
    return {
        "cluster": {"topology": "star", "hosts": hosts, "gpus_per_host": gpus, "nic_gbps": 100.0, "gpu": "H100"},
        "workload": load | workload,
        "policies": [policy],
        "iterations": 2,
    }


def memory_row(config: dict[str, Any]) -> pd.Series:
    return simulate(config).memory.iloc[0]


def test_a_transformer_saves_9d_plus_4f_per_token_and_block_and_its_loss_in_fp32() -> None:
    d, f, s, v = 64, 176, 32, 1000
    block = (9 * d + 4 * f) * s  # values
    head = d * s + (d * s) + v * s  # the final norm's input, the head's input, and the log-probabilities (fp32)
    saved = 2 * (2 * block + 2 * d * s) + 4 * v * s  # bf16 values, fp32 log-probabilities
    # the loss's backward: the gradients with respect to the log-probabilities and to the logits, both fp32
    transient = 2 * 4 * v * s
    spec = decoder_model("small", small_arch(), "test")
    assert activation_bytes_per_sample(spec, "bf16", checkpointing=False) == saved + transient
    assert head == 2 * d * s + v * s
    # fp32 training: every value at 4 bytes
    assert activation_bytes_per_sample(spec, "fp32", checkpointing=False) == 4 * (2 * block + 2 * d * s + v * s) + 8 * (
        v * s
    )


def test_checkpointing_keeps_each_blocks_input_and_recomputes_one_block() -> None:
    d, f, s, v = 64, 176, 32, 1000
    block = 2 * (9 * d + 4 * f) * s
    head = 2 * (2 * d * s) + 4 * v * s
    transient = 2 * 4 * v * s
    spec = decoder_model("small", small_arch(), "test")
    assert activation_bytes_per_sample(spec, "bf16", checkpointing=True) == 2 * (2 * d * s) + block + head + transient


def test_data_parallel_holds_a_replica_its_gradient_adam_and_bf16_buckets() -> None:
    row = memory_row(run_config({"name": "ring"}, optimizer_state="adam"))
    p = SMALL_PARAMS
    assert row["parameters_bytes"] == 4 * p + 2 * p  # fp32 master and autocast's bf16 copies
    assert row["gradients_bytes"] == 4 * p
    assert row["optimizer_bytes"] == 8 * p
    assert row["buffers_bytes"] == 2 * p  # bf16 gradient buckets
    spec = decoder_model("small", small_arch(), "test")
    assert row["activations_bytes"] == 3 * activation_bytes_per_sample(spec, "bf16", checkpointing=False)
    assert row["peak_bytes"] == pytest.approx(20 * p + row["activations_bytes"], rel=1e-12)


def test_no_sync_keeps_no_communication_buffers() -> None:
    row = memory_row(run_config({"name": "no_sync"}, optimizer_state="adam"))
    assert row["buffers_bytes"] == 0 and row["gradients_bytes"] == 4 * SMALL_PARAMS


def test_the_optimizer_state_defaults_to_numerics_optimizer() -> None:
    p = SMALL_PARAMS
    assert memory_row(run_config({"name": "ring"}))["optimizer_bytes"] == 4 * p  # SGD with momentum
    assert memory_row(run_config({"name": "ring"}, optimizer_state="none"))["optimizer_bytes"] == 0


@pytest.mark.parametrize("strategy", ["full", "hybrid"])
def test_full_sharding_divides_the_state_by_the_shard_group_and_gathers_two_units(strategy: str) -> None:
    policy = {"name": "fsdp", "strategy": strategy, "shard_group": "host"}
    config = run_config(policy, hosts=2, gpus=4, optimizer_state="adam")
    cluster, plan = prepare(parse_config(config))
    row = memory_row(config)
    p, g, unit = SMALL_PARAMS, 4 if strategy == "hybrid" else 8, max(b.nbytes for b in plan.buckets)
    assert len(plan.buckets) > 2  # so two units are less than the model
    assert row["parameters_bytes"] == pytest.approx(4 * p / g + 2 * unit)
    assert row["gradients_bytes"] == pytest.approx(4 * p / g)
    assert row["optimizer_bytes"] == pytest.approx(8 * p / g)
    assert row["buffers_bytes"] == pytest.approx(2 * unit)


def test_grad_op_keeps_every_unit_gathered_and_zero_1_shards_only_the_optimizer() -> None:
    p = SMALL_PARAMS
    grad_op = memory_row(run_config({"name": "fsdp", "strategy": "grad_op"}, optimizer_state="adam"))
    assert grad_op["parameters_bytes"] == pytest.approx(4 * p / 4 + 2 * p)  # every unit's bf16 parameters
    zero_1 = memory_row(run_config({"name": "fsdp", "strategy": "optimizer"}, optimizer_state="adam"))
    assert (zero_1["parameters_bytes"], zero_1["gradients_bytes"]) == (6 * p, 4 * p)
    assert zero_1["optimizer_bytes"] == pytest.approx(8 * p / 4)


def test_fsdp_accumulating_without_sync_keeps_the_whole_unsharded_gradient() -> None:
    p = SMALL_PARAMS
    load = {"optimizer_state": "adam", "accumulation_steps": 4, "optimizer_ms": 1.0}
    every = memory_row(run_config({"name": "fsdp"}, **load))
    last = memory_row(run_config({"name": "fsdp"}, **load, accumulation_sync="last"))
    assert every["gradients_bytes"] == pytest.approx(4 * p / 4)
    assert last["gradients_bytes"] == pytest.approx(4 * p / 4 + 2 * p)  # plus a bf16 gradient of the whole model
    ring = run_config({"name": "ring"}, **load, accumulation_sync="last")
    assert memory_row(ring)["gradients_bytes"] == 4 * p  # a replica's gradient accumulates in place


def test_diloco_keeps_its_anchor_outer_gradient_and_outer_momentum() -> None:
    p = SMALL_PARAMS
    row = memory_row(run_config({"name": "diloco", "period": 2, "outer_momentum": 0.9}, optimizer_state="adam"))
    assert row["optimizer_bytes"] == 8 * p + 3 * 4 * p


def test_a_parameter_servers_workers_keep_no_optimizer_state() -> None:
    row = memory_row(run_config({"name": "ps", "shards": 1}, optimizer_state="adam"))
    assert row["optimizer_bytes"] == 0


def llama_70b(hosts: int) -> dict[str, Any]:
    cluster = {"topology": "rail_optimized", "rail_groups": 1, "hosts_per_group": hosts, "gpus_per_host": 8}
    cluster |= {"gpu": "H100", "nic_gbps": 400, "nics_per_host": 8}
    workload = {"model": "llama3_70b", "batch_size": 1, "precision": "bf16", "activation_checkpointing": True}
    workload |= {"optimizer_state": "adam", "bucket_mb": 1712}  # a unit per block: 856M bf16 values
    return {"cluster": cluster, "workload": workload, "policies": [{"name": "fsdp"}], "iterations": 2}


def test_70b_fully_sharded_over_8_h100s_is_refused_naming_the_gpu_and_the_terms() -> None:
    with pytest.raises(ConfigError) as info:
        prepare(parse_config(llama_70b(hosts=1)))
    message = str(info.value)
    # 70.6 B parameters x (4 + 4 + 8) bytes / 8 alone is 131 GiB
    assert "H100's 80 GiB" in message and "no micro-batch fits" in message
    for term in ("parameters", "gradients", "optimizer", "activations", "buffers"):
        assert term in message
    assert message.startswith("policies[0]: fsdp needs 16")  # 164.4 GiB


def test_70b_fully_sharded_over_64_h100s_runs_and_says_its_peak(tmp_path: Path) -> None:
    result = simulate(llama_70b(hosts=8))
    row = result.memory.iloc[0]
    params = 70_553_706_496  # Llama 3 70B (Meta's config.json)
    assert row["optimizer_bytes"] == pytest.approx(8 * params / 64, rel=1e-3)
    assert bool(row["fits"]) and row["peak_bytes"] < 80 * GIB_INT
    assert result.summary["peak_memory_gib"].iloc[0] == pytest.approx(row["peak_bytes"] / GIB)
    result.write(tmp_path, plot=False, trace=False)
    assert pd.read_csv(tmp_path / "memory.csv")["peak_bytes"].iloc[0] == pytest.approx(row["peak_bytes"])


def test_the_largest_micro_batch_named_fits_and_one_more_does_not() -> None:
    config = run_config({"name": "ring"}, batch_size=64)
    config["cluster"]["gpu"] = "V100"  # 16 GiB
    config["workload"]["transformer"] = SMALL | {"seq_len": 2048, "vocab": 32000, "hidden": 512, "heads": 8}
    config["workload"]["transformer"] |= {"kv_heads": 8, "mlp_width": 1408, "layers": 4, "max_positions": 2048}
    config["workload"]["precision"] = "fp16"
    with pytest.raises(ConfigError) as info:
        prepare(parse_config(config))
    largest = int(str(info.value).split("workload.batch_size: ")[1].split()[0])
    assert 1 <= largest < 64
    prepare(parse_config(config | {"workload": config["workload"] | {"batch_size": largest}}))
    with pytest.raises(ConfigError):
        prepare(parse_config(config | {"workload": config["workload"] | {"batch_size": largest + 1}}))


def test_check_memory_false_runs_what_does_not_fit_and_still_says_its_peak() -> None:
    config = llama_70b(hosts=1) | {"simulation": {"check_memory": False}}
    row = simulate(config).memory.iloc[0]
    assert not bool(row["fits"]) and row["largest_micro_batch"] == 0


def test_a_synthetic_gradient_says_its_activations_are_not_known() -> None:
    config = {
        "cluster": {"topology": "star", "hosts": 2, "nic_gbps": 10.0},
        "workload": {"model": "synthetic", "gradient_mb": 10.0, "compute_ms": 5.0},
        "policies": [{"name": "ring"}],
        "iterations": 2,
    }
    row = memory_row(config)
    assert not bool(row["activations_known"]) and row["activations_bytes"] == 0


def test_selective_checkpointing_keeps_attention_and_every_other_product_of_a_block() -> None:
    d, kv, f, s, v = 64, 16, 176, 32, 1000
    # per block and token: its input, Q (1st product), V (3rd) and attention's output, gate (5th), down (7th)
    kept = 4 * d + kv + f
    recomputed = (9 * d + 4 * f) - kept  # the rest of the block, held again while its backward runs
    head = 2 * (2 * d * s) + 4 * v * s
    transient = 2 * 4 * v * s
    spec = decoder_model("small", small_arch(), "test")
    expected = 2 * (2 * kept * s) + 2 * recomputed * s + head + transient
    assert activation_bytes_per_sample(spec, "bf16", checkpointing="selective") == expected


def test_selective_checkpointing_recomputes_the_norms_and_the_products_whose_output_it_dropped() -> None:
    from sim.compute.buckets import model_spec
    from sim.compute.workload import compute_plan, layer_seconds

    config = parse_config(run_config({"name": "ring"}, activation_checkpointing="selective"))
    cluster, plan = prepare(config)
    plain = compute_plan(config.workload.model_copy(update={"activation_checkpointing": False}), cluster.gpu)
    spec = model_spec(config.workload)
    _, forward, _ = layer_seconds(config.workload, spec, cluster.gpu)
    again = ("input_layernorm", "k_proj", "o_proj", "post_attention_layernorm", "up_proj")
    recompute = sum(f for layer, f in zip(spec.layers, forward) if layer.name.rsplit(".", 1)[-1] in again)
    assert recompute > 0
    assert plan.backward_s - plain.backward_s == pytest.approx(recompute, rel=1e-9)


def test_selective_checkpointing_is_refused_for_a_model_without_transformer_blocks() -> None:
    config = run_config({"name": "ring"}, activation_checkpointing="selective")
    config["workload"] = {"model": "resnet50", "batch_size": 32, "activation_checkpointing": "selective"}
    with pytest.raises(ConfigError, match="activation_checkpointing: selective"):
        prepare(parse_config(config))


def test_an_estimate_of_the_activations_refuses_nothing_but_memory_csv_says_it_would_not_fit() -> None:
    config = {
        "cluster": {"topology": "star", "hosts": 2, "gpu": "V100", "nic_gbps": 25.0},
        "workload": {"model": "resnet50", "batch_size": 512, "precision": "fp16"},
        "policies": [{"name": "ring"}],
        "iterations": 2,
    }
    row = memory_row(config)  # runs: half of what each op moves is an estimate, not a count
    assert row["activations_source"] == "estimated" and not bool(row["fits"])
    assert row["activations_bytes"] > 16 * GIB_INT
    llama = run_config({"name": "ring"})
    assert memory_row(llama)["activations_source"] == "counted"
