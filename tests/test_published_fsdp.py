"""The published sharded-training table: its rows parse and translate into valid configs, and the runner's
arithmetic (published units, MFU, tokens per GPU, the alpha-beta null) against hand derivations
(sim/experiments/published_fsdp.py, published_fsdp_setups.py). No test bounds the prediction's error."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

import sim.experiments.published_fsdp as runner
from sim.config.load import parse_config
from sim.experiments.published_fsdp import alpha_beta_comm_s, simulate_row
from sim.experiments.published_fsdp_setups import (
    ARCHITECTURES,
    fsdp_policy,
    in_scope,
    mfu_step_s,
    model,
    published_tokens_s,
    row_config,
    setup_markdown,
    table,
    unit_mb,
)


def _row(row_id: str) -> pd.Series:
    rows = table()
    return rows[rows["id"] == row_id].iloc[0]


def test_every_row_is_complete_and_excluded_rows_say_why() -> None:
    rows = table()
    assert rows["id"].is_unique
    for column in ("source", "table", "model", "gpu", "seq_len", "local_batch", "ac", "published_value", "held_out"):
        assert (rows[column].astype(str) != "").all(), column
    assert set(rows["in_scope"]) == {"yes", "no"}
    assert set(rows["held_out"]) == {"yes"}
    excluded = rows[rows["in_scope"] == "no"]
    assert excluded["note"].str.startswith("excluded: ").all()
    assert (excluded["sim_strategy"] == "").all()  # nothing of an excluded row is translated
    assert (rows["gpus"] == rows["hosts"] * rows["gpus_per_host"]).all()


def test_in_scope_rows_translate_into_valid_configs() -> None:
    rows = in_scope()
    assert len(rows) >= 15
    for _, row in rows.iterrows():
        config = parse_config(row_config(row, [fsdp_policy(row), {"name": "no_sync"}], iterations=2))
        assert config.cluster.gpu_total == int(row["gpus"])
        assert config.workload.transformer is not None
        assert config.workload.transformer.seq_len == int(row["seq_len"])
        expected = {"true": True, "false": False, "selective": "selective"}[row["sim_activation_checkpointing"]]
        assert config.workload.activation_checkpointing == expected


def test_a_bad_translation_is_refused_naming_the_field() -> None:
    row = _row("tt_a100_l3_70b_full").copy()
    row["sim_activation_checkpointing"] = "selective layer"
    with pytest.raises(ValueError, match="sim_activation_checkpointing"):
        row_config(row, [{"name": "no_sync"}], 2)
    row["arch"] = "llama9"
    with pytest.raises(ValueError, match="arch"):
        model(row)


def test_architectures_have_the_released_parameter_counts() -> None:
    # Hugging Face's counts of Meta's released checkpoints (config.json + safetensors index)
    counts = {"llama3_8b": 8_030_261_248, "llama2_7b": 6_738_415_616, "llama2_13b": 13_015_864_320}
    counts["llama2_70b"] = 68_976_648_192
    for arch, params in counts.items():
        row = _row(next(i for i in table()["id"] if table().set_index("id").at[i, "arch"] == arch))
        assert model(row).params == params, arch
    assert set(ARCHITECTURES) >= set(table()["arch"])


def test_tflops_row_in_tokens_by_hand() -> None:
    # AWS GPT-3 175B: 159 TFLOPS/GPU by 96 B s l h^2 (1 + s/6h + V/16lh), B 20, s 512, l 96, h 12288, V 50257
    flops = 96 * 20 * 512 * 96 * 12288**2 * (1 + 512 / (6 * 12288) + 50257 / (16 * 96 * 12288))
    assert flops == pytest.approx(1.43865e16, rel=1e-5)
    iteration_s = flops / 159e12  # 90.48 s
    assert published_tokens_s(_row("aws_a100_gpt3_175b")) == pytest.approx(20 * 512 / iteration_s, rel=1e-9)
    assert 20 * 512 / iteration_s == pytest.approx(113.17, abs=0.01)


def test_mfu_step_by_hand_agrees_with_the_published_tokens() -> None:
    # torchtitan Llama 3 8B on A100: 6N + 12 l h q t per token, N 8,030,261,248, l 32, h 32, q 128, t 8192
    per_token = 6 * 8_030_261_248 + 12 * 32 * 32 * 128 * 8192
    step = 8192 * per_token / (0.582 * 312e12)
    assert mfu_step_s(_row("tt_a100_l3_8b_sel_op")) == pytest.approx(step, rel=1e-12)
    # the source's MFU and WPS say the same iteration (both printed to 3-4 digits)
    assert 8192 / step == pytest.approx(2973, rel=2e-3)
    assert mfu_step_s(_row("tt_h100_l31_8b_8")) is None  # no MFU printed for it


def test_unit_and_alpha_beta_null_by_hand() -> None:
    row = _row("fms_a100_l2_70b")
    # a Llama 2 70B block: q, o 8192^2; k, v 8192 x 1024; gate, up, down 8192 x 28672; two norms of 8192
    block = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert unit_mb(row) == pytest.approx((block - 8192) * 2 / 1e6)
    nbytes = 68_976_648_192 * 2
    units = round(nbytes / ((block - 8192) * 2))  # 81
    assert units == 81
    # 128 ranks, ring bottleneck one 400 Gb/s NIC per host: 50e9 B/s; three collectives per unit
    expected = 3 * (127 / 128 * nbytes / 50e9 + 127 * 5e-6 * units)
    assert alpha_beta_comm_s(row) == pytest.approx(expected, rel=1e-12)


def test_hybrid_alpha_beta_adds_the_shard_all_reduce_across_hosts() -> None:
    row = _row("fms_h100_l2_7b")  # HSDP on 12 hosts of 8 H100, one 800 Gb/s NIC each
    nbytes = 6_738_415_616 * 2
    units = round(nbytes / (unit_mb(row) * 1e6))
    inside = 3 * (7 / 8 * nbytes / (3600e9 / 8) + 7 * 5e-6 * units)  # NVLink 3,600 Gb/s per direction
    across = 2 * 11 / 12 * (nbytes / 8) / (800e9 / 8)
    assert alpha_beta_comm_s(row) == pytest.approx(inside + across, rel=1e-12)


def test_tokens_per_gpu_is_batch_times_length_over_the_iteration(monkeypatch: pytest.MonkeyPatch) -> None:
    row = _row("tt_a100_l3_8b_sel_op")  # 64 GPUs, local batch 1, 8,192 tokens
    seconds = {"fsdp": 2.5, "no_sync": 2.0}

    class Result:
        def __init__(self, frame: pd.DataFrame) -> None:
            self.iterations = frame
            self.memory = pd.DataFrame({"policy": ["fsdp", "no_sync"], "peak_bytes": [3 * 2**30, 1.0]})

    def fake(config: dict) -> Result:
        lines = []
        for policy, step in seconds.items():
            for it in range(config["iterations"]):
                for rank in range(64):
                    start = it * step
                    lines.append(
                        {"policy": policy, "iteration": it, "rank": rank, "start_s": start, "end_s": start + step,
                         "iteration_s": step, "samples": 1}
                    )  # fmt: skip
        return Result(pd.DataFrame(lines))

    monkeypatch.setattr(runner, "simulate", fake)
    out = simulate_row(row, iterations=3)
    assert out["predicted"] == pytest.approx(1 * 8192 / 2.5)
    assert out["compute_only"] == pytest.approx(1 * 8192 / 2.0)
    assert out["alpha_beta"] == pytest.approx(8192 / (2.0 + alpha_beta_comm_s(row)))
    assert math.isclose(out["compute_s"], 2.0)
    assert out["memory_gib"] == pytest.approx(3.0)  # bytes over 2^30: GiB, as torchtitan prints them


def test_setup_table_has_a_line_per_row_saying_what_each_setting_became() -> None:
    lines = setup_markdown().splitlines()
    assert len(lines) == 2 + len(table())
    (line,) = [x for x in lines if x.startswith("| tt_a100_l3_8b_sel_op |")]
    assert "selective op -> selective" in line and "8 x 200 Gb/s (assumed)" in line and "2973 tokens/s/GPU" in line


def test_full_recompute_bracket_changes_only_the_checkpointing(monkeypatch: pytest.MonkeyPatch) -> None:
    row = _row("tt_h100_l31_8b_8")  # selective op, translated as selective
    seen: list[dict] = []

    class Result:
        memory = pd.DataFrame({"policy": ["fsdp"], "peak_bytes": [2**31]})

    def fake(config: dict) -> Result:
        seen.append(config)
        return Result()

    monkeypatch.setattr(runner, "simulate", fake)
    assert runner.full_recompute_memory_gib(row) == pytest.approx(2.0)
    (config,) = seen
    plain = row_config(row, [fsdp_policy(row)], 2)
    assert config["workload"].pop("activation_checkpointing") is True
    assert plain["workload"].pop("activation_checkpointing") == "selective"
    assert config == plain
    assert row["sim_activation_checkpointing"] == "selective"  # the table's row is left as it was


def test_the_docs_page_shows_the_table_as_it_is() -> None:
    page = (Path(__file__).parent.parent / "docs" / "fsdp_fidelity.md").read_text()
    assert setup_markdown() in page, "run: python -m sim.experiments.published_fsdp --setups"


def test_no_row_of_the_compute_models_fit_comes_from_these_sources_or_models() -> None:
    # the held-out claim: sim/compute/fit.py fits the GPU constants to these two tables only
    zoo = Path(__file__).parent.parent / "sim" / "catalog" / "zoo"
    fitted = (zoo / "published_throughput.csv").read_text().lower() + (zoo / "measured_steps.csv").read_text().lower()
    for word in ("torchtitan", "fms-fsdp", "trillion", "llama", "gpt3_175b"):
        assert word not in fitted, word


def test_the_memory_null_is_zeros_sixteen_bytes_per_parameter_sharded_over_every_gpu() -> None:
    row = _row("tt_h100_l31_8b_8")
    params = runner.model(row).params
    assert 8.0e9 < params < 8.1e9  # Llama 3 8B: 8.03 B parameters
    assert runner.zero_state_gib(row) == pytest.approx(16 * params / 8 / 2**30)
