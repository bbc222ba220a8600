"""The real backend end to end: the same policy objects on gloo processes give the simulator's numbers,
and a dead rank stops the run cleanly. Process start-up dominates (~15 s per launch), so each test
launches once and checks everything it can on that run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from real.launch import launch  # noqa: E402
from sim.api import as_config, prepare, simulate  # noqa: E402
from sim.cli import main  # noqa: E402

pytestmark = pytest.mark.slow  # every test here launches gloo processes

ITERATIONS = 20


def write_config(tmp_path: Path, policies: list[dict[str, Any]], iterations: int = ITERATIONS, **extra: Any) -> Path:
    config = {
        "name": "real-test",
        "seed": 3,
        "iterations": iterations,
        # 2 racks x 1 host x 2 GPUs: hierarchical at host level, DS-Sync with rack-local groups + mixing
        "cluster": {
            "topology": "two_tier",
            "racks": 2,
            "hosts_per_rack": 1,
            "gpus_per_host": 2,
            "nic_gbps": 0.2,
            "uplink_gbps": 0.1,
        },
        "workload": {
            "model": "synthetic",
            "gradient_mb": 1.0,
            "compute_ms": 5,
            "synthetic_layers": 4,
            "bucket_mb": 0.3,
        },
        "numerics": {
            "dataset": "digits",
            "model": "mlp",
            "hidden": [32],
            "global_batch": 64,
            "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4},
            "schedule": {"kind": "step", "warmup_iterations": 3, "milestones": [10], "gamma": 0.5},
            "eval_every": 5,
        },
        "policies": policies,
        **extra,
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


# Sync-Switch twice: between two deterministic schemes (BSP through servers, then ring), and the
# default BSP then ASP, whose BSP prefix is deterministic but whose ASP phase is not
SWITCHED = [
    {"name": "sync_switch", "label": "ps_ring", "first": "ps", "then": "ring", "switch_at": 0.5},
    {"name": "sync_switch", "label": "ps_asp", "switch_at": 0.25},
    # online with a hair trigger: real timing noise decides when it switches, the invariants do not
    {"name": "sync_switch", "label": "online", "switching": "online", "threshold": 1.01, "window": 1},
]
ASYNC = ("ps_asp", "online")


def test_real_gloo_run_equals_the_simulators_numerics(tmp_path: Path) -> None:
    """Acceptance: ring, hierarchical, ps-BSP, DS-Sync and Sync-Switch between ps and ring on 4 gloo
    workers (+2 server processes) end with the parameters numerics mode computes for the same config
    and seed; Sync-Switch from ps to ASP restarts its ASP phase from the same checkpoint."""
    policies = [{"name": "ring"}, {"name": "hierarchical"}, {"name": "ps"}, {"name": "ds_sync"}, *SWITCHED]
    config = write_config(tmp_path, policies)
    out = tmp_path / "out"
    outcome = launch(config, out, nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    assert outcome.codes == {r: 0 for r in range(6)}  # 4 workers + ps's 2 shards (one per host)

    sim = simulate(config)
    real = np.load(out / "parameters.npz")
    deterministic = [run for run in sim.runs if run.label not in ASYNC]
    for run in deterministic:
        assert run.parameters is not None and run.consensus is not None
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(real[f"{run.label}/consensus"], run.consensus, rtol=1e-4, atol=1e-6)
    # the replicas did train: DS-Sync's differ from ring's, and all moved away from the start
    assert not np.allclose(real["ds_sync/workers"], real["ring/workers"])
    # the switch: the model after the deterministic BSP prefix is the same on both backends
    for run in sim.runs[-3:-1]:
        (checkpoint,) = run.checkpoints
        np.testing.assert_allclose(real[f"{run.label}/checkpoint0"], checkpoint, rtol=1e-5, atol=1e-7)
    assert not np.allclose(sim.runs[-2].checkpoints[0], as_numerics_initial(config))

    ranks = pd.read_csv(out / "ranks.csv")  # where every rank computed: here, the CPU
    assert (ranks.device == "cpu").all()
    # a CPU rank's peak is measured only with --cpu-memory (real/device_use.py; tests/test_real_sharding.py asks)
    assert (ranks.peak_memory_bytes == 0).all()
    assert list(ranks[ranks.policy == "ring"]["rank"]) == [0, 1, 2, 3]
    ps = ranks[ranks.policy == "ps"]
    assert list(ps["rank"]) == [0, 1, 2, 3, 4, 5]
    assert list(ps.role) == ["worker"] * 4 + ["parameter-server shard 0", "parameter-server shard 1"]

    phases = pd.read_csv(out / "phases.csv").set_index(["policy", "phase"])
    assert list(phases.loc["ps_asp", "phase_policy"]) == ["ps", "asp"]
    assert list(phases.loc["ps_asp", "updates"]) == [5 * 4, 15 * 4] and list(phases.loc["ps_asp", "start_step"]) == [
        0,
        5,
    ]
    # online: phases alternate between ps and asp, synchronous ones in whole steps, the budget all used
    online = phases.loc["online"]
    assert list(online["phase_policy"]) == ["ps", "asp"] * (len(online) // 2) + ["ps"] * (len(online) % 2)
    assert online["updates"].sum() == 4 * ITERATIONS and (online.query("synchronous")["updates"] % 4 == 0).all()
    assert (online["start_step"].diff().dropna() * 4 == online["updates"].iloc[:-1].to_numpy()).all()
    switched = pd.read_csv(out / "iterations.csv").query("policy == 'ps_asp'")
    assert switched.groupby("phase_policy").size().to_dict() == {"ps": 5 * 4, "asp": 15 * 4}
    assert switched.query("phase_policy == 'asp'")["start_s"].min() >= switched.query("phase == 0")["end_s"].max()

    summary = pd.read_csv(out / "summary.csv").set_index("policy")
    assert list(summary.index) == ["ring", "hierarchical", "ps", "ds_sync", "ps_ring", "ps_asp", "online"]
    assert (summary["status"] == "ok").all() and (summary["updates"] == 4 * ITERATIONS).all()
    assert (summary.drop(index=list(ASYNC))["iterations"] == ITERATIONS).all()
    assert list(summary["switches"])[:6] == [0, 0, 0, 0, 1, 1]
    summary = summary.drop(index=list(ASYNC))
    sim_acc = sim.summary.set_index("policy")["final_accuracy"]
    np.testing.assert_allclose(summary["final_accuracy"], sim_acc[summary.index], atol=1e-6)
    # the accuracy curve too: every eval_every iterations, the consensus and every replica
    key = ["policy", "iteration", "model", "worker"]
    real_curve = pd.read_csv(out / "accuracy.csv").query("policy not in @ASYNC").set_index(key).sort_index()
    sim_curve = sim.accuracy.query("policy not in @ASYNC").set_index(key).sort_index()
    assert list(real_curve.index) == list(sim_curve.index)
    assert sorted(real_curve.index.get_level_values("iteration").unique()) == [0, 5, 10, 15, 20]
    for column in ("train_loss", "loss", "accuracy"):
        np.testing.assert_allclose(real_curve[column], sim_curve[column], rtol=1e-5, atol=1e-6, err_msg=column)
    assert (real_curve.groupby("policy")["time_s"].is_monotonic_increasing).all()  # measured seconds

    rows = pd.read_csv(out / "iterations.csv")
    assert len(rows) == 7 * 4 * ITERATIONS
    for column in ("compute_s", "comm_s", "wait_s"):
        assert (rows[column] >= 0).all()
    np.testing.assert_allclose(rows["compute_s"] + rows["comm_s"] + rows["wait_s"], rows["iteration_s"], atol=1e-9)
    assert (rows["compute_s"] > 0).all()

    ops = pd.read_csv(out / "ops.csv")
    counts = ops.groupby(["policy", "kind"]).size()
    buckets = len(prepare(as_config(config))[1].buckets)
    assert buckets == 2
    assert counts[("ring", "AllReduce")] == ITERATIONS * buckets  # one row per call, as in the simulator
    assert counts[("hierarchical", "ReduceScatter")] == 2 * ITERATIONS * buckets  # two hosts
    assert counts[("ps", "push")] == 4 * 2 * ITERATIONS * buckets  # 4 workers x 2 shards
    assert counts[("ps", "pull")] == 4 * 2 * (ITERATIONS - 1) * buckets  # step 0 reads its own copy


def test_fp16_gradients_through_servers_on_gloo_equal_the_simulators_numerics(tmp_path: Path) -> None:
    """Under gradient_precision fp16, ps (BSP through 2 shards) and ring on 4 gloo workers end with the
    parameters numerics mode computes, to the wire type's rounding: pushes, pulls and collectives
    round the same values, but a 16-bit sum depends on the order of its additions (gloo rounds after
    each, numerics mode once) and a shard's fp32 sum, in arrival order, can tip a pulled value to the
    next fp16 value (one unit in the last place: 2**-10 relative). A push and a pull move 2 bytes a
    value, half what fp32 would."""
    config = write_config(tmp_path, [{"name": "ps"}, {"name": "ring"}], iterations=8)
    raw = yaml.safe_load(config.read_text())
    raw["workload"]["gradient_precision"] = "fp16"
    config.write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    outcome = launch(config, out, nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    sim = simulate(config)
    real = np.load(out / "parameters.npz")
    for run in sim.runs:
        assert run.parameters is not None
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=2**-9, atol=1e-4)
        assert not np.allclose(real[f"{run.label}/workers"], as_numerics_initial(config))
    pulled = real["ps/workers"]  # what the workers pulled last: 16-bit values, held in fp32
    assert np.array_equal(pulled.astype(np.float16).astype(np.float32), pulled)
    ops = pd.read_csv(out / "ops.csv")
    ps = ops[ops.policy == "ps"].groupby(["rank", "step", "kind"])["nbytes"].sum()
    elements = real["ps/workers"].shape[-1]
    assert (ps.xs("push", level="kind") == 2 * elements).all() and (ps.xs("pull", level="kind") == 2 * elements).all()


def test_a_dead_rank_stops_the_others_and_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = write_config(tmp_path, [{"name": "ring"}, {"name": "ds_sync"}], iterations=200)
    out = tmp_path / "out"
    monkeypatch.setenv("SYNCSIM_REAL_CRASH", "2:12")  # rank 2 dies at its 12th iteration of the first policy
    outcome = launch(config, out, nproc=4, timeout_s=5)
    assert not outcome.ok
    assert outcome.codes[2] == 17
    assert all(outcome.codes[r] == 3 for r in (0, 1, 3))  # each stopped on its own, nobody was killed
    assert outcome.failed == "rank 2 (worker) exited with code 17"
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["policy"]) == ["ring"]
    assert summary["status"][0].startswith("failed") and "rank 2" in summary["status"][0]
    rows = pd.read_csv(out / "iterations.csv")  # what the survivors measured before it died is kept
    assert sorted(rows["rank"].unique()) == [0, 1, 3]
    assert (rows.groupby("rank")["iteration"].max() == 11).all()


def test_a_zoo_model_trains_on_gloo_as_in_numerics_mode(tmp_path: Path) -> None:
    """A torch.nn zoo model (DeepFM, 11.5 M parameters in 6 zoo layers) runs on the real backend
    with the zoo workload's buckets and ends where numerics mode does."""
    config = {
        "name": "real-zoo",
        "seed": 1,
        "iterations": 3,
        "cluster": {"topology": "two_tier", "racks": 1, "hosts_per_rack": 2, "gpus_per_host": 1},
        "workload": {"model": "deepfm", "batch_size": 8},
        "numerics": {
            "dataset": "synthetic",
            "model": "deepfm",
            "global_batch": 16,
            "zoo": {"samples": 96},
            "optimizer": {"name": "sgd", "lr": 0.5},
        },
        "policies": [{"name": "ring"}],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    outcome = launch(path, tmp_path / "out", nproc=2, timeout_s=60)
    assert outcome.ok, outcome.failed
    (run,) = simulate(path).runs
    real = np.load(tmp_path / "out" / "parameters.npz")
    np.testing.assert_allclose(real["ring/workers"], run.parameters, rtol=1e-4, atol=1e-6)
    assert not np.allclose(run.parameters[0], as_numerics_initial(path))


def test_the_decoder_trains_on_gloo_as_in_numerics_mode_and_sim_memory_counts_its_activations(
    tmp_path: Path,
) -> None:
    """`numerics.model: transformer` (1 block, d 16, 2 heads of 8, 1 KV head, rotary, SwiGLU of 32, untied head
    over 32 words) on 2 ranks with Adam, ring and full sharding: both end where numerics mode does. Beside the
    measured peak, sim.memory's DDP figure by hand: n = 32 x 16 (tokens) + 2 x 2 x 16 (LayerNorms) + 16 x 16 + 16 x
    8 + 16 x 8 + 16 x 16 (Q, K, V, O) + 3 x 16 x 32 (SwiGLU) + 2 x 16 (final norm) + 16 x 32 (head) = 3,424
    parameters at 20 bytes; per sequence of 8 tokens, 4 bytes x (9 x 16 + 4 x 32 values a token in the block, 16 +
    16 + 32 in the head, and backward's transient: the up projection's 2 x 32 or the loss's two gradients over
    the vocabulary, 2 x 32 too) = 12,800 bytes; 2 sequences a rank."""
    transformer = {"layers": 1, "hidden": 16, "heads": 2, "kv_heads": 1, "mlp": "swiglu", "mlp_width": 32}
    transformer |= {"positions": "rotary", "vocab": 32, "seq_len": 16, "tied_embeddings": False, "bias": False}
    config = {
        "name": "real-decoder",
        "seed": 2,
        "iterations": 3,
        "cluster": {"topology": "star", "hosts": 2, "gpus_per_host": 1},
        "workload": {"model": "transformer", "transformer": transformer, "batch_size": 2, "bucket_mb": 0.005},
        "numerics": {
            "dataset": "synthetic",
            "model": "transformer",
            "global_batch": 4,
            "zoo": {"samples": 40, "classes": 16, "sequence": 8},
            "optimizer": {"name": "adam", "lr": 0.01},
        },
        "policies": [{"name": "ring"}, {"name": "fsdp", "label": "full"}],
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    outcome = launch(path, tmp_path / "out", nproc=2, timeout_s=60)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    for run in simulate(path).runs:
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-4, atol=1e-6)
    assert not np.allclose(real["ring/workers"][0], as_numerics_initial(path))
    ranks = pd.read_csv(tmp_path / "out" / "ranks.csv").set_index(["policy", "rank"])
    assert (ranks.loc["ring", "simulated_peak_memory_bytes"] == 20 * 3_424 + 2 * 12_800).all()


def as_numerics_initial(path: Path) -> np.ndarray:
    from sim.numerics.session import load_task

    return load_task(as_config(path)).initial.numpy()


def test_a_config_without_numerics_trains_its_zoo_model_for_timing(tmp_path: Path) -> None:
    """The quickstart cluster (8 workers in 2 racks), its model made small enough for 2 cores: no
    numerics section, so every worker trains the workload's zoo model on synthetic data."""
    path = tmp_path / "quickstart_small.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "extends": str(Path(__file__).parent.parent / "configs" / "quickstart.yaml"),
                "iterations": 2,
                "workload": {"model": "resnet32", "batch_size": 2},
                "policies": [{"name": "ring"}, {"name": "hierarchical", "level": "rack"}],
            }
        )
    )
    assert main(["real", str(path), "--nproc", "8", "--out", str(tmp_path / "out")]) == 0
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert list(summary["policy"]) == ["ring", "hierarchical"] and (summary["status"] == "ok").all()
    assert (summary["iterations"] == 2).all() and (summary["throughput_samples_s"] > 0).all()
    numerics = yaml.safe_load((tmp_path / "out" / "config.yaml").read_text())["numerics"]
    assert (numerics["model"], numerics["global_batch"], numerics["dataset"]) == ("resnet32", 16, "synthetic")
