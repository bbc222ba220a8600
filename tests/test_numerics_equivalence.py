"""Synchronous schemes in numerics mode make the updates of one process on the global batch.

The yardstick is `sim.numerics.reference`: a plain torch.nn model stepped by torch.optim, so these
tests also check the flat-range optimizers, the bucket mapping and every op's tensor rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import star, synthetic, two_tier  # noqa: E402

from sim.api import simulate  # noqa: E402
from sim.numerics.reference import train_reference  # noqa: E402

ITERATIONS = 20


def numerics_config(cluster: dict[str, Any], policies: list[dict[str, Any]], numerics: dict[str, Any]) -> dict:
    cfg = synthetic(cluster, policies, 40.0, compute_ms=5.0, iterations=ITERATIONS, bucket_mb=8.0, layers=10)
    cfg["numerics"] = {"eval_every": 5, **numerics}
    return cfg


SGD = {
    "model": "mlp",
    "hidden": [32, 16],
    "global_batch": 64,
    "optimizer": {"name": "sgd", "lr": 0.2, "momentum": 0.9, "nesterov": True, "weight_decay": 1e-4},
    "schedule": {"kind": "step", "warmup_iterations": 4, "milestones": [12], "gamma": 0.5},
}
ADAM = {
    "model": "cnn",
    "channels": [4, 8],
    "global_batch": 32,
    "optimizer": {"name": "adam", "lr": 0.01, "weight_decay": 1e-3},
    "schedule": {"kind": "cosine"},
}
SYNTHETIC_LOGREG = {
    "dataset": "synthetic",
    "model": "logreg",
    "global_batch": 64,
    "optimizer": {"name": "sgd", "lr": 0.5, "momentum": 0.0},
}


@pytest.mark.parametrize("numerics", [SGD, ADAM, SYNTHETIC_LOGREG], ids=["mlp-sgd", "cnn-adam", "logreg-synthetic"])
def test_bsp_schemes_equal_single_process_training(numerics: dict[str, Any]) -> None:
    policies = [
        {"name": "ring"},
        {"name": "hierarchical", "level": "rack"},
        {"name": "ps"},
        {"name": "ps", "shards": 3, "label": "ps-3-shards"},
    ]
    result = simulate(numerics_config(two_tier(2, 2, 25.0), policies, numerics))
    assert result.errors == {}
    from sim.config.numerics import NumericsConfig

    expected = train_reference(NumericsConfig(**numerics, eval_every=5), 0, 4, ITERATIONS).numpy()
    for run in result.runs:
        np.testing.assert_allclose(run.consensus, expected, rtol=1e-4, atol=1e-5, err_msg=run.label)
        if run.name != "ps":  # every replica of an all-reduce scheme holds the model itself
            for replica in run.parameters:
                np.testing.assert_allclose(replica, expected, rtol=1e-4, atol=1e-5, err_msg=run.label)


def test_host_level_hierarchical_and_ds_sync_over_one_group_equal_single_process() -> None:
    """Two hosts of two GPUs: 2-D all-reduce at host level; DS-Sync with one group of all four
    averages parameters after identical local steps, which is BSP for plain SGD."""
    numerics = {**SGD, "optimizer": {"name": "sgd", "lr": 0.2, "momentum": 0.0}}
    policies = [{"name": "hierarchical", "level": "host"}, {"name": "ds_sync", "schedule": [[[0, 1, 2, 3]]]}]
    result = simulate(numerics_config(star(2, gpus_per_host=2), policies, numerics))
    assert result.errors == {}
    from sim.config.numerics import NumericsConfig

    expected = train_reference(NumericsConfig(**numerics), 0, 4, ITERATIONS).numpy()
    for run in result.runs:
        np.testing.assert_allclose(run.consensus, expected, rtol=1e-4, atol=1e-5, err_msg=run.label)


def test_no_sync_on_one_worker_is_plain_training() -> None:
    result = simulate(numerics_config(star(1), [{"name": "no_sync"}], SGD))
    from sim.config.numerics import NumericsConfig

    expected = train_reference(NumericsConfig(**SGD), 0, 1, ITERATIONS).numpy()
    np.testing.assert_allclose(result.runs[0].parameters[0], expected, rtol=1e-4, atol=1e-5)


def test_training_moves_the_parameters() -> None:
    """Guards the tests above against comparing two barely trained models."""
    from sim.config.numerics import NumericsConfig
    from sim.numerics.tasks import Task

    result = simulate(numerics_config(star(1), [{"name": "no_sync"}], SGD))
    rows = result.accuracy[result.accuracy["worker"] < 0]
    assert rows["accuracy"].iloc[-1] > rows["accuracy"].iloc[0] + 0.2  # measured: 0.11 -> 0.39
    initial = Task(NumericsConfig(**SGD), 0).initial.numpy()
    assert np.abs(result.runs[0].parameters[0] - initial).max() > 0.05
