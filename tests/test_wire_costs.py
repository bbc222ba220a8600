"""A wire type in the simulator (sim/engine/wire_costs.py, op_checks.py): the network moves the declared
bytes and the casts cost two memory-bound passes at the GPU's memory bandwidth, against the closed form
on the ideal network; a declaration whose bytes and elements disagree is refused."""

from __future__ import annotations

import math

import pytest
from helpers import GBPS, US, star, synthetic

from sim.api import simulate
from sim.catalog.gpus import get_gpu
from sim.errors import ConfigError

MB = 1e6
P = 4
ALPHA = (2 * 1.0 + 2 * 5.0) * US  # GPU -> host -> switch -> host -> GPU on a star, 5 us links, 1 us intra
B = 25 * GBPS
HBM = get_gpu("A100").memory_bandwidth_gbs * 1e9


def iteration_s(policy: dict, mb: float = 100.0, **workload: str) -> float:
    config = synthetic(star(P, gpu="A100"), [policy], mb)
    config["workload"].update(workload)
    result = simulate(config)
    assert not result.errors, result.errors
    return float(result.summary["mean_iteration_s"].iloc[0])


def ring(nbytes: float) -> float:
    return 2 * (P - 1) * ALPHA + 2 * (P - 1) / P * nbytes / B


@pytest.mark.parametrize("model", ["pipelined", "stepwise"])
def test_a_bf16_ring_takes_half_the_fp32_network_time_plus_the_casts(model: str) -> None:
    n = 100 * MB  # fp32 gradients: 25e6 values
    values = n / 4
    wire = values * 2
    casts = 2 * (n + wire) / HBM  # read fp32, write bf16; read bf16, write fp32
    config = synthetic(star(P, gpu="A100"), [{"name": "ring", "wire": "bf16"}], 100, model=model)
    result = simulate(config)
    got = float(result.summary["mean_iteration_s"].iloc[0])
    assert got == pytest.approx(ring(wire) + casts, rel=1e-9)
    assert ring(wire) - 2 * (P - 1) * ALPHA == pytest.approx((ring(n) - 2 * (P - 1) * ALPHA) / 2)


def test_an_int8_ring_moves_values_and_scales() -> None:
    n = 100 * MB
    values = n / 4
    wire = values + math.ceil(values / 128) * 4  # one byte a value, one fp32 scale a block of 128
    casts = 2 * (n + wire) / HBM
    assert iteration_s({"name": "ring", "wire": "int8", "block": 128}) == pytest.approx(ring(wire) + casts, rel=1e-9)


def test_the_type_a_tensor_is_kept_in_costs_no_cast() -> None:
    assert iteration_s({"name": "ring", "wire": "fp32"}) == pytest.approx(ring(100 * MB), rel=1e-12)
    assert iteration_s({"name": "ring"}) == pytest.approx(ring(100 * MB), rel=1e-12)
    # gradients kept in bf16 (gradient_mb counts them in it) travel in bf16 without a cast
    kept = iteration_s({"name": "ring", "wire": "bf16"}, gradient_precision="bf16", precision="bf16")
    assert kept == pytest.approx(ring(100 * MB), rel=1e-12)


def test_an_unknown_type_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="policies\\[0\\].wire: .*'int8' or 'fp4' \\(got 'int4'\\)"):
        iteration_s({"name": "ring", "wire": "int4"})


def test_bytes_that_disagree_with_elements_and_type_are_refused() -> None:
    result = simulate(synthetic(star(2), [{"name": "custom_policies:WireBytesApart"}], 8))
    (error,) = result.errors.values()
    assert "nbytes 8e+06 does not match 2e+06 elements of bf16 (block 32): 4e+06 bytes" in error
