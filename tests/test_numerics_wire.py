"""Numerics mode with a wire type (sim/numerics/wire_rules.py `wired`): in fp32 the ring and the 2-D
all-reduce still make the single-process updates (to fp32 round-off); in int8 and fp4 every replica
ends on the same parameters, which the rounding moves off the fp32 run."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import synthetic, two_tier  # noqa: E402

from sim.api import simulate  # noqa: E402
from sim.numerics.reference import train_reference  # noqa: E402

ITERATIONS = 10
LOGREG = {"dataset": "synthetic", "model": "logreg", "global_batch": 64, "optimizer": {"name": "sgd", "lr": 0.5}}


def run(policies: list[dict[str, Any]]) -> Any:
    cfg = synthetic(
        two_tier(2, 2, 25.0), policies, 40.0, compute_ms=5.0, iterations=ITERATIONS, bucket_mb=8.0, layers=10
    )
    cfg["numerics"] = {"eval_every": 5, **LOGREG}
    result = simulate(cfg)
    assert result.errors == {}
    return result


def test_fp32_on_the_wire_is_single_process_training() -> None:
    from sim.config.numerics import NumericsConfig

    result = run([{"name": "ring", "wire": "fp32"}, {"name": "hierarchical", "level": "rack", "wire": "fp32"}])
    expected = train_reference(NumericsConfig(**LOGREG, eval_every=5), 0, 4, ITERATIONS).numpy()
    for r in result.runs:
        for replica in r.parameters:
            np.testing.assert_allclose(replica, expected, rtol=1e-4, atol=1e-5, err_msg=r.label)


def test_quantized_wires_round_and_keep_the_replicas_equal() -> None:
    result = run(
        [
            {"name": "ring", "wire": "fp32"},
            {"name": "ring", "wire": "int8", "label": "int8"},
            {"name": "hierarchical", "level": "rack", "wire": "fp4", "label": "fp4"},
        ]
    )
    fp32, int8, fp4 = (r.parameters for r in result.runs)
    for params in (int8, fp4):
        for replica in params:
            assert np.array_equal(replica, params[0])
    off_int8, off_fp4 = np.abs(int8[0] - fp32[0]).max(), np.abs(fp4[0] - fp32[0]).max()
    assert 1e-6 < off_int8 < off_fp4  # fp4's 8 magnitudes round far more than int8's 255 codes
