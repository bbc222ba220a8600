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
    assert trained.activation_bytes_per_sample is None


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


def test_the_real_layout_of_ddp_on_the_digits_mlp_by_hand() -> None:
    """Ring all-reduce, Adam, 4 buckets of 2 MB: flat fp32 weights and gradient (4 + 4 bytes an element), Adam's
    moments and int64 step count (4 + 4 + 8), and in backward four model-length gradient vectors (16) and the
    saved activations; the step's 6 fp32 temporaries on the largest bucket's 21,251 elements are fewer."""
    config, cluster, plan, task = digits_mlp([{"name": "ring"}], 2.0)
    assert task.size == MLP
    peak = layout_of(config, cluster, plan, task, 0)
    assert peak.terms() == {
        "parameters": 4 * MLP,
        "gradients": 4 * MLP,
        "optimizer": 16 * MLP,
        "activations": SAVED + LARGEST_LAYER,
        "backward": 4 * 4 * MLP,
        "step": 6 * 4 * 21_251,
    }
    assert peak.total == (4 + 4 + 16 + 16) * MLP + SAVED + LARGEST_LAYER


def test_full_sharding_keeps_a_quarter_of_adams_state_but_the_whole_flat_vectors() -> None:
    """Over 4 ranks a rank steps a quarter of each bucket (ceil(21,251 / 4) elements) and holds Adam's state
    for its quarter; the real backend gathers the whole model for its one autograd call."""
    config, cluster, plan, task = digits_mlp([{"name": "fsdp", "strategy": "full"}], 2.0)
    peak = layout_of(config, cluster, plan, task, 0)
    assert (peak.parameters, peak.gradients, peak.backward) == (4 * MLP, 4 * MLP, 16 * MLP)
    assert peak.optimizer == 16 * MLP / 4
    assert peak.step == 6 * 4 * 5_313


def test_one_bucket_makes_the_optimizer_step_the_peak() -> None:
    """One 8 MB bucket: Adam steps all 85,002 elements at once, 24 bytes of temporaries each, more than
    backward's 16 bytes and the activations."""
    config, cluster, plan, task = digits_mlp([{"name": "ring"}], 8.0)
    peak = layout_of(config, cluster, plan, task, 0)
    assert peak.step == 24 * MLP
    assert peak.total == (4 + 4 + 16) * MLP + 24 * MLP


def test_a_zoo_models_task_holds_two_gradient_vectors_and_no_counted_activations() -> None:
    """A zoo model's task (a leaf per parameter, gradients concatenated): two model-length fp32 vectors in
    backward; its activations are not counted here (0)."""
    from types import SimpleNamespace

    config, cluster, plan = setup([{"name": "ring"}], {"name": "sgd", "momentum": 0.9})
    policy = bind_policy(config.policies[0], 0, cluster, plan, "fp32", absences_of(config, cluster))
    zoo = SimpleNamespace(size=1000, slices=[("w", 0, 1000, (1000,))])
    peak = real_peak(policy, config.numerics.optimizer, zoo, [1.0, 1.0], 8)
    assert (peak.backward, peak.activations) == (2 * 4 * 1000, 0.0)
    assert peak.optimizer == 4 * 1000  # SGD's momentum, fp32
    assert peak.step == 4 * 500  # one temporary (lr * buf) on the larger of two equal buckets
