"""Local ops' memory-bound cost (`sim/engine/local_op_costs.py`): passes over fp32 buffers, counted by hand
from what each op reads and writes, and the region a bucket, a fragment or the whole model gives them."""

from __future__ import annotations

import pytest

from policies.ops import Combine, Encode, OptimizerStep
from policies.tensors import Codec, Fragment, Optimizer
from sim.api import simulate
from sim.config import parse_config
from sim.engine.local_op_costs import LocalOpCosts, local_op_bandwidth, op_bytes, passes
from sim.errors import ConfigError

SGD = Optimizer("sgd", momentum=0.0)
MOMENTUM = Optimizer("sgd", momentum=0.9, nesterov=True)
ADAMW = Optimizer("adamw", lr=1e-3)


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (Combine("a", ((1.0, "parameters"),)), 2),  # a copy: read one, write one
        (Combine("a", ((1.0, "b"), (-1.0, "parameters"))), 3),  # a difference
        (Combine("a", ((0.2, "b"), (0.3, "c"), (0.5, "parameters"))), 4),
        (OptimizerStep("a", "g", SGD), 3),  # read params, grad; write params
        (OptimizerStep("a", "g", MOMENTUM), 5),  # + read and write the momentum buffer
        (OptimizerStep("a", "g", ADAMW), 7),  # + read and write two moments
        (Encode("g", Codec(topk=0.1)), 2),  # read source, write it back
        (Encode("g", Codec(topk=0.1), out="e", residual="r"), 4),  # + read and write the residual
    ],
)
def test_passes_count_what_the_op_reads_and_writes(op: object, expected: int) -> None:
    assert passes(op) == expected  # type: ignore[arg-type]
    assert op_bytes(op, 1e6) == expected * 4e6  # type: ignore[arg-type]  # fp32: 4 bytes a value


def test_an_encode_to_a_wire_type_adds_one_cast_pass() -> None:
    """bf16: read 4 bytes, write 2 per value; int8 in blocks of 32: 1 byte a value and a 4-byte scale a
    block; fp32 is the buffers' own type: no cast."""
    n = 3.2e6
    assert op_bytes(Encode("g", Codec("bf16")), n) == 2 * 4 * n + (4 + 2) * n
    assert op_bytes(Encode("g", Codec("int8", block=32)), n) == pytest.approx(2 * 4 * n + (4 + 1 + 4 / 32) * n)
    assert op_bytes(Encode("g", Codec("fp32")), n) == 2 * 4 * n


def test_the_region_is_the_bucket_the_fragment_or_the_model() -> None:
    """Buckets of 1, 2, 3, 4 MB of bf16 gradients whose parameters are fp32 (ratio 2)."""
    costs = LocalOpCosts([1e6, 2e6, 3e6, 4e6], 2.0, 1e12)
    assert costs.elements(None, None) == 10e6 * 2 / 4  # the whole model
    assert costs.elements(None, 2) == 3e6 * 2 / 4  # one bucket
    assert costs.elements(Fragment(1, 2), None) == (2e6 + 4e6) * 2 / 4  # buckets 1 and 3
    assert costs.elements(Fragment(1, 2), 3) == 4e6 * 2 / 4  # a bucket of the fragment
    assert costs.elements(Fragment(1, 2), 2) == 0.0  # a bucket outside it


def test_seconds_are_bytes_over_the_memory_bandwidth() -> None:
    costs = LocalOpCosts([4e6, 4e6], 1.0, 2e11)  # 2e6 values; 200 GB/s
    op = OptimizerStep("anchor", "outer_gradient", MOMENTUM, fragment=Fragment(0, 2))
    assert costs.seconds(op, None) == pytest.approx(5 * 4 * 1e6 / 2e11)
    assert costs.seconds(Combine("a", ((1.0, "b"),)), 1) == pytest.approx(2 * 4 * 1e6 / 2e11)
    assert LocalOpCosts([4e6], 1.0, 0.0).seconds(op, None) == 0.0  # no bandwidth known: free


def test_the_host_s_memory_rate_replaces_the_gpu_s_when_given() -> None:
    assert local_op_bandwidth(3350.0, None) == 3350e9  # H100 HBM3: on the GPU
    assert local_op_bandwidth(3350.0, 53.3) == 53.3e9  # on the host's CPU


def host_run(host_gbs: float | None) -> float:
    """Mean compute time a step of two H100 ranks running diloco with H = 1 on a 100 MB (25e6-value) model."""
    cluster = {"topology": "star", "hosts": 2, "gpu": "H100", "host_memory_gbs": host_gbs}
    config = {
        "iterations": 2,
        "cluster": {k: v for k, v in cluster.items() if v is not None},
        "workload": {"model": "synthetic", "gradient_mb": 100, "bucket_mb": 100, "compute_ms": 10},
        "policies": [{"name": "diloco", "period": 1}],
        "simulation": {"network_model": "ideal", "trace": False},
    }
    return float(simulate(config).summary.iloc[0]["mean_compute_s"])


def test_with_host_memory_gbs_the_outer_step_costs_its_passes_at_the_host_s_rate() -> None:
    """Every step ends with an outer step of 10 fp32 passes over the 25e6 values (anchor - parameters 3, sgd with
    momentum 5, parameters = anchor 2): 1 GB, 0.01 s at 100 GB/s, 0.3 ms at the H100's 3.35 TB/s."""
    assert host_run(100.0) == pytest.approx(0.010 + 10 * 4 * 25e6 / 100e9, rel=1e-9)
    assert host_run(None) == pytest.approx(0.010 + 10 * 4 * 25e6 / 3350e9, rel=1e-9)


@pytest.mark.parametrize("bad", [0, -1.0, 1e6])
def test_host_memory_gbs_is_a_positive_rate(bad: float) -> None:
    config = {
        "cluster": {"topology": "star", "hosts": 2, "host_memory_gbs": bad},
        "workload": {"model": "synthetic", "gradient_mb": 1, "compute_ms": 1},
        "policies": [{"name": "ring"}],
    }
    with pytest.raises(ConfigError, match="host_memory_gbs"):
        parse_config(config)
