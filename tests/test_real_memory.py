"""real/memory.py: the simulator's peak memory per worker for the model a real run trains."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import star, synthetic

pytest.importorskip("torch")

from real.memory import real_peak, simulated_peak_bytes, trained_plan  # noqa: E402
from sim.api import prepare  # noqa: E402
from sim.config import parse_config  # noqa: E402
from sim.engine.faults import absences_of  # noqa: E402
from sim.engine.run import bind_policy  # noqa: E402


def setup(policies: list[dict[str, Any]], optimizer: dict[str, Any]) -> tuple[Any, Any, Any]:
    cfg = synthetic(star(2, gpus_per_host=2), policies, 8.0, compute_ms=1.0, bucket_mb=2.0, layers=4)
    cfg["numerics"] = {"model": "mlp", "hidden": [8], "global_batch": 32, "optimizer": optimizer}
    config = parse_config(cfg)
    cluster, plan = prepare(config)
    return config, cluster, plan


def test_the_plan_is_the_trained_models_with_the_workloads_buckets_in_proportion() -> None:
    config, cluster, plan = setup([{"name": "ring"}], {"name": "sgd"})
    trained = trained_plan(config, plan, cluster, 1000)
    assert trained.params == 1000 and trained.gradient_bytes == 4000
    assert [b.nbytes for b in trained.buckets] == pytest.approx([b.nbytes / 2000 for b in plan.buckets])  # 8 MB
    assert trained.batch_size == 8  # the numerics batch of 32 over 4 workers
    assert trained.activation_bytes_per_sample is None  # the MLP's are not counted from an architecture
    assert trained.activation_source == "none"


@pytest.mark.parametrize(
    ("optimizer", "per_parameter"), [({"name": "adam"}, 20), ({"name": "sgd", "momentum": 0.9}, 16)]
)
def test_ddp_holds_its_weights_gradient_optimizer_state_and_flat_buckets(
    optimizer: dict[str, Any], per_parameter: int
) -> None:
    """fp32: 4 bytes each of weight, gradient and DDP's flat gradient bucket, plus 4 per optimizer state value
    (Adam's two moments, or the momentum)."""
    config, cluster, plan = setup([{"name": "ring"}], optimizer)
    assert simulated_peak_bytes(config, 0, cluster, plan, 1000) == per_parameter * 1000


def test_zero_1_holds_a_quarter_of_the_optimizer_state_over_four_ranks() -> None:
    config, cluster, plan = setup([{"name": "ring"}, {"name": "fsdp", "strategy": "optimizer"}], {"name": "adam"})
    ddp, zero1 = (simulated_peak_bytes(config, i, cluster, plan, 1000) for i in (0, 1))
    assert ddp - zero1 == pytest.approx(2 * 4 * 1000 * (1 - 1 / 4))


# the digits MLP of docs/real.md: 64 x 256 + 256 + 256 x 256 + 256 + 256 x 10 + 10 parameters in 6 tensors
MLP = 85_002


def digits_mlp(policies: list[dict[str, Any]], bucket_mb: float) -> tuple[Any, Any, Any, Any]:
    from sim.numerics.tasks import Task

    cfg = synthetic(star(2, gpus_per_host=2), policies, 8.0, compute_ms=1.0, bucket_mb=bucket_mb, layers=4)
    optimizer = {"name": "adam", "lr": 0.001}
    cfg["numerics"] = {"dataset": "digits", "model": "mlp", "hidden": [256, 256], "global_batch": 64}
    cfg["numerics"]["optimizer"] = optimizer
    config = parse_config(cfg)
    cluster, plan = prepare(config)
    return config, cluster, plan, Task(config.numerics, config.seed)


def layout_of(config: Any, cluster: Any, plan: Any, task: Any, index: int) -> Any:
    absences = absences_of(config, cluster)
    policy = bind_policy(config.policies[index], index, cluster, plan, config.workload.wire_precision, absences)
    return real_peak(policy, config.numerics.optimizer, task, [b.nbytes for b in plan.buckets], 16)


# what autograd saves on a batch of 16 (64 samples over 4 workers): the input (16 x 64 fp32), both ReLUs'
# outputs (16 x 256 each), the log-probabilities (16 x 10), the int64 targets and the loss's fp32 total weight;
# plus the largest layer's once more: the first Linear's input and its ReLU's output
SAVED = 16 * 64 * 4 + 2 * 16 * 256 * 4 + 16 * 10 * 4 + 16 * 8 + 4
LARGEST_LAYER = 16 * 64 * 4 + 16 * 256 * 4


# the largest layer's parameter gradients, handed back together before autograd adds them into the flat gradient:
# the 256 x 256 Linear's weight and bias
LARGEST_GRADIENT = 256 * 256 + 256


def test_the_real_layout_of_ddp_on_the_digits_mlp_by_hand() -> None:
    """Ring all-reduce, Adam, 4 buckets of 2 MB: flat fp32 weights and gradient (4 + 4 bytes an element), Adam's
    two fp32 moments (8); in backward the saved activations and one layer's parameter gradients; the step's
    temporaries (int64 counts and two fp32 bias corrections: 16 bytes) on the largest bucket's 21,251 elements
    (340,016 bytes) are more, so they make the peak."""
    config, cluster, plan, task = digits_mlp([{"name": "ring"}], 2.0)
    assert task.size == MLP
    peak = layout_of(config, cluster, plan, task, 0)
    assert peak.terms() == {
        "parameters": 4 * MLP,
        "gradients": 4 * MLP,
        "optimizer": 8 * MLP,
        "activations": SAVED + LARGEST_LAYER,
        "backward": 4 * LARGEST_GRADIENT,
        "step": 16 * 21_251,
    }
    assert SAVED + LARGEST_LAYER + 4 * LARGEST_GRADIENT < 16 * 21_251
    assert peak.total == (4 + 4 + 8) * MLP + 16 * 21_251


def test_full_sharding_keeps_a_quarter_of_adams_state_but_the_whole_flat_vectors() -> None:
    """Over 4 ranks a rank steps a quarter of each bucket (ceil(21,251 / 4) elements) and holds Adam's state
    for its quarter; the real backend gathers the whole model for its one autograd call."""
    config, cluster, plan, task = digits_mlp([{"name": "fsdp", "strategy": "full"}], 2.0)
    peak = layout_of(config, cluster, plan, task, 0)
    assert (peak.parameters, peak.gradients, peak.backward) == (4 * MLP, 4 * MLP, 4 * LARGEST_GRADIENT)
    assert peak.optimizer == 8 * MLP / 4
    assert peak.step == 16 * 5_313


def test_one_bucket_makes_the_optimizer_step_the_peak() -> None:
    """One 8 MB bucket: Adam steps all 85,002 elements at once, 16 bytes of temporaries each."""
    config, cluster, plan, task = digits_mlp([{"name": "ring"}], 8.0)
    peak = layout_of(config, cluster, plan, task, 0)
    assert peak.step == 16 * MLP
    assert peak.total == (4 + 4 + 8) * MLP + 16 * MLP


def test_a_zoo_model_other_than_the_decoder_has_no_counted_activations() -> None:
    """DeepFM (a small hashed feature space): its largest zoo layer's gradients in backward, its activations not
    counted here (0)."""
    from sim.numerics.zoo_task import ZooTask

    config, cluster, plan = setup([{"name": "ring"}], {"name": "sgd", "momentum": 0.9})
    policy = bind_policy(config.policies[0], 0, cluster, plan, "fp32", absences_of(config, cluster))
    numerics = config.numerics.model_copy(update={"model": "deepfm", "dataset": "synthetic"})
    numerics = numerics.model_copy(update={"zoo": numerics.zoo.model_copy(update={"features": 390, "samples": 8})})
    task = ZooTask(numerics, 0)
    peak = real_peak(policy, config.numerics.optimizer, task, [1.0, 1.0], 8)
    sizes = [p.numel() for p in task.module.parameters()]
    assert peak.activations == 0.0
    assert peak.optimizer == 4 * task.size  # SGD's momentum, fp32
    # the largest zoo layer: DeepFM's hidden 400 -> 400 Linear and its bias (larger than the 390 x 10 table or
    # the first Linear's 39 fields x 10 -> 400)
    assert peak.backward == 4 * (400 * 400 + 400) and 390 * 10 in sizes


# configs/real_transformer_memory.yaml's decoder, by hand: a 256 x 64 token table and head, and per block two
# LayerNorms (gain and bias), Q and O projections of 64 x 64, K and V of 64 x 32 (2 KV heads of 16), and SwiGLU's
# three 64 x 192 projections; no biases
DECODER = 256 * 64 + 2 * (2 * 2 * 64 + 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 192) + 2 * 64 + 256 * 64
# values autograd keeps per token (sim/catalog/zoo/llm.py's count): per block 9 d + 4 mlp_width; the final norm's
# and the head's inputs (d each) and the fp32 log-probabilities over the 256-word vocabulary
PER_TOKEN = 2 * (9 * 64 + 4 * 192) + 64 + 64 + 256
# and backward's transient: the cross-entropy's two fp32 gradients over the vocabulary (2 x 256 a token), more
# than the largest layer's saved values (the up projection's 2 x 192)
PER_SAMPLE = 4 * 128 * (PER_TOKEN + 2 * 256)


def test_sim_memory_counts_the_decoders_activations_at_the_numerics_sequence() -> None:
    """configs/real_transformer_memory.yaml: DDP holds 20 bytes a parameter (fp32 weight, gradient, Adam's two
    moments, its flat bucket) and 8 sequences of 128 tokens' activations, counted from the architecture."""
    from sim.api import as_config
    from sim.config import load_config

    config = as_config("configs/real_transformer_memory.yaml")
    cluster, plan = prepare(config)
    assert DECODER == 131_712 and PER_SAMPLE == 1_835_008
    trained = trained_plan(config, plan, cluster, DECODER)
    assert (trained.activation_bytes_per_sample, trained.activation_source) == (PER_SAMPLE, "counted")
    assert simulated_peak_bytes(config, 0, cluster, plan, DECODER) == 20 * DECODER + 8 * PER_SAMPLE
    short = load_config("configs/real_transformer_memory.yaml", ["numerics.zoo.sequence=8"])
    per_sample = 4 * 8 * (PER_TOKEN + 2 * 256)  # the same values a token, 8 tokens
    assert trained_plan(short, plan, cluster, DECODER).activation_bytes_per_sample == per_sample
