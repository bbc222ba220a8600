"""`workload.model: transformer`: a decoder-only model from its numbers or from a Hugging Face config.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.api import prepare
from sim.cli import main
from sim.config import load_config, parse_config
from sim.errors import ConfigError

ROOT = Path(__file__).parent.parent
# Meta's released config.json of Llama 3 8B (meta-llama/Meta-Llama-3-8B), its keys and values
LLAMA3_8B_JSON = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}
# Hugging Face's gpt2 config.json (the 124M model), its keys and values
GPT2_JSON = {
    "activation_function": "gelu_new",
    "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1,
    "bos_token_id": 50256,
    "embd_pdrop": 0.1,
    "eos_token_id": 50256,
    "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2",
    "n_ctx": 1024,
    "n_embd": 768,
    "n_head": 12,
    "n_layer": 12,
    "n_positions": 1024,
    "resid_pdrop": 0.1,
    "summary_activation": None,
    "summary_first_dropout": 0.1,
    "summary_proj_to_labels": True,
    "summary_type": "cls_index",
    "summary_use_proj": True,
    "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
    "vocab_size": 50257,
}
SMALL = {"layers": 2, "hidden": 64, "heads": 8, "kv_heads": 2, "mlp": "swiglu", "mlp_width": 176, "vocab": 1000}
SMALL |= {"seq_len": 32, "norm": "rmsnorm", "positions": "rotary", "tied_embeddings": False, "bias": False}


def config(transformer: Any, model: str = "transformer") -> dict[str, Any]:
    cluster = {"topology": "star", "hosts": 8, "nic_gbps": 25.0, "gpu": "A100"}
    workload = {"model": model, "batch_size": 2, "transformer": transformer}
    # these tests read architectures; whether 8B in fp32 fits an A100 is tests/test_memory.py's question
    simulation = {"check_memory": False}
    return {
        "cluster": cluster,
        "workload": workload,
        "policies": [{"name": "ring"}],
        "iterations": 2,
        "simulation": simulation,
    }


def write(folder: Path, name: str, data: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data))
    return path


def errors(data: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return str(info.value)


def test_numbers_give_the_parameters_of_the_architecture() -> None:
    _, plan = prepare(parse_config(config(SMALL)))
    # per block: Q and O 64^2, K and V 64 x 16 (2 heads of 8), gate, up, down 64 x 176, two gains; an
    # untied table and head of 1000 x 64, the final gain
    block = 2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 176 + 2 * 64
    assert plan.params == 2 * block + 2 * 1000 * 64 + 64
    assert plan.model == "transformer" and plan.compute_s > 0


def test_meta_llama3_8b_config_json_gives_its_8_03b_parameters(tmp_path: Path) -> None:
    path = write(tmp_path, "config.json", LLAMA3_8B_JSON)
    cfg = parse_config(config({"hf_config": str(path)}))
    arch = cfg.workload.transformer.architecture()
    assert (arch.kv_heads, arch.mlp, arch.norm, arch.positions, arch.seq_len) == (
        8,
        "swiglu",
        "rmsnorm",
        "rotary",
        8192,
    )
    assert not arch.tied_embeddings and not arch.bias
    _, plan = prepare(cfg)
    assert plan.params == 8_030_261_248  # 16,060,522,496 bytes in bf16 in Meta's checkpoint index


def test_gpt2_config_json_gives_hugging_faces_124m_parameters(tmp_path: Path) -> None:
    path = write(tmp_path, "config.json", GPT2_JSON)
    _, plan = prepare(parse_config(config({"hf_config": str(path)})))
    assert plan.params == 124_439_808  # Hugging Face's gpt2 checkpoint (tests/test_zoo.py)


def test_a_relative_hf_config_is_beside_the_config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "exp" / "models", "config.json", LLAMA3_8B_JSON)
    path = write(tmp_path / "exp", "run.yaml", config({"hf_config": "models/config.json", "seq_len": 2048}))
    monkeypatch.chdir(tmp_path)  # not the config's folder
    cfg = load_config(path)
    assert cfg.workload.transformer.hf_config == str((tmp_path / "exp" / "models" / "config.json").resolve())
    assert cfg.workload.transformer.architecture().seq_len == 2048  # seq_len may differ from the file's context


def test_the_bundled_hf_config_runs_and_checks_from_the_command_line(tmp_path: Path) -> None:
    bundled = ROOT / "configs" / "tiny_llama_hf.yaml"
    assert main(["check", str(bundled)]) == 0
    assert main(["run", str(bundled), "--out", str(tmp_path / "out"), "--quiet", "--set", "iterations=2"]) == 0
    assert (tmp_path / "out" / "summary.csv").exists()


def test_numbers_disagreeing_with_the_file_are_refused_naming_each(tmp_path: Path) -> None:
    path = write(tmp_path, "config.json", LLAMA3_8B_JSON)
    message = errors(config({"hf_config": str(path), "layers": 30, "mlp": "gelu", "hidden": 4096}))
    assert message.splitlines() == [
        f"workload.transformer.layers: 30 disagrees with {path}'s 32; give one of the two",
        f"workload.transformer.mlp: 'gelu' disagrees with {path}'s 'swiglu'; give one of the two",
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_local_experts": 8}, "unknown keys num_local_experts; allowed for llama: num_hidden_layers, "),
        ({"model_type": "qwen2"}, "model_type 'qwen2'; allowed: llama, mistral, gpt2"),
        ({"num_hidden_layers": None}, "missing keys num_hidden_layers; a llama config.json has them"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'; allowed for a llama: silu"),
        ({"num_attention_heads": 32.0}, "num_attention_heads: 32.0; allowed: an integer"),
        ({"mlp_bias": True}, "attention_bias False and mlp_bias True differ; allowed: equal"),
        ({"head_dim": 64}, "head_dim 64 is not hidden_size / num_attention_heads"),
        ({"model_type": "mistral", "sliding_window": 4096}, "sliding_window 4096; allowed: null (full attention)"),
    ],
)
def test_a_config_json_this_builder_cannot_represent_is_refused_naming_the_key(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    data = {k: v for k, v in {**LLAMA3_8B_JSON, **change}.items() if v is not None or k not in change}
    path = write(tmp_path, "config.json", data)
    assert errors(config({"hf_config": str(path)})).startswith(f"workload.transformer.hf_config: {path}: {message}")


def test_a_file_that_is_not_a_json_object_is_refused(tmp_path: Path) -> None:
    listed = write(tmp_path, "list.json", [1, 2])
    assert "holds a JSON list; a config.json is one object" in errors(config({"hf_config": str(listed)}))
    (tmp_path / "bad.json").write_text("{not json")
    assert errors(config({"hf_config": str(tmp_path / "bad.json")})).startswith(
        f"workload.transformer.hf_config: {tmp_path / 'bad.json'} is not JSON"
    )
    assert errors(config({"hf_config": "a\0b.json"})) == (
        "workload.transformer.hf_config: the path holds a NUL character; name a local config.json"
    )
    missing = tmp_path / "none.json"
    assert errors(config({"hf_config": str(missing)})) == (
        f"workload.transformer.hf_config: cannot read {missing} (No such file or directory); name a local config.json"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"heads": 6}, "workload.transformer.heads: 6 does not divide hidden 64; allowed: a divisor of it"),
        ({"kv_heads": 3}, "workload.transformer.kv_heads: 3 does not divide heads 8; allowed: a divisor of it"),
        ({"layers": 0}, "workload.transformer.layers: Input should be greater than or equal to 1 (got 0)"),
        ({"mlp": "relu"}, "workload.transformer.mlp: Input should be 'gelu' or 'swiglu' (got 'relu')"),
        ({"mlp_width": None}, "workload.transformer.mlp_width: required with mlp swiglu"),
        ({"vocab": None}, "workload.transformer.vocab: required (or name a config.json in hf_config)"),
        ({"positions": "learned", "max_positions": 16}, "workload.transformer.seq_len: 32 is longer than the learned"),
        ({"depth": 3}, "workload.transformer: unknown key depth; allowed keys: hf_config, layers, hidden, heads, "),
    ],
)
def test_bad_numbers_are_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    transformer = {k: v for k, v in {**SMALL, **change}.items() if v is not None}
    assert errors(config(transformer)).startswith(message)


def test_the_block_goes_with_model_transformer_only() -> None:
    assert errors(config(None)) == (
        "workload.transformer: required when model is 'transformer' (its numbers, or hf_config)"
    )
    assert errors(config(SMALL, model="gpt2")) == (
        "workload.transformer: applies only to model 'transformer' ('gpt2' sets its own layers)"
    )


def test_a_bad_block_exits_2_with_one_line_from_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", config({**SMALL, "kv_heads": 3}))
    proc = subprocess.run(
        [sys.executable, "-m", "sim.cli", "check", str(path)], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "workload.transformer.kv_heads: 3 does not divide heads 8; allowed: a divisor of it" in proc.stderr


def test_the_resolved_config_reads_back_the_same(tmp_path: Path) -> None:
    from sim.config.load import dump_config

    json_path = write(tmp_path, "config.json", LLAMA3_8B_JSON)
    cfg = parse_config(config({"hf_config": str(json_path), "seq_len": 1024}))
    again = parse_config(yaml.safe_load(dump_config(cfg)))
    assert again.workload.transformer == cfg.workload.transformer
