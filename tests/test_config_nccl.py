"""The `simulation.nccl.constants` section: every constant the NCCL fit calibrates is a config key with a
physical bound, a value past it is refused by name, and values at the bounds run to finite results."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, get_args

import pytest
from annotated_types import Ge, Gt, Le, Lt
from helpers import star, synthetic

from sim.api import simulate
from sim.config import parse_config
from sim.config.nccl import NcclConstants
from sim.errors import ConfigError
from sim.nccl.fabrics import CONSTANT_KEYS

# the bounds as docs/config.md states them, worked from the units: 1 GB = 1e6 KB, 1 s = 1e6 us
UPPER = {"ll_kb": 1e6, "ll128_kb": 1e6, "simple_kb": 1e6, "nvls_kb": 1e6, "network_kb": 1e6, "launch_us": 1e6,
         "step_scale": 1e3, "network_scale": 1e3}  # fmt: skip


def field_bounds(name: str) -> tuple[float, float]:
    """(lowest, highest) a constant may be, read from its field's annotation."""
    low, high = -math.inf, math.inf
    for arg in get_args(NcclConstants.model_fields[name].annotation):  # Optional[Annotated[float, Field(...)]]
        for rule in getattr(arg, "__metadata__", ()):
            for part in getattr(rule, "metadata", [rule]):
                if isinstance(part, (Ge, Gt)):
                    low = float(part.ge if isinstance(part, Ge) else part.gt)
                if isinstance(part, (Le, Lt)):
                    high = float(part.le if isinstance(part, Le) else part.lt)
    return low, high


def config(constants: dict[str, Any], gpu: str = "A100") -> dict[str, Any]:
    data = synthetic(star(2, gpus_per_host=2, gpu=gpu), [{"name": "ring"}], 8.0, compute_ms=1.0, iterations=2)
    data["simulation"] = {"network_model": "nccl", "trace": False, "nccl": {"constants": constants}}
    return data


def test_every_calibrated_constant_is_a_key_with_the_documented_upper_bound() -> None:
    assert set(NcclConstants.model_fields) == set(CONSTANT_KEYS)
    for name in CONSTANT_KEYS:
        low, high = field_bounds(name)
        assert low == 0 and high == UPPER[name], name


@pytest.mark.parametrize("name", sorted(CONSTANT_KEYS))
@pytest.mark.parametrize("factor", [1.000001, 1e302])
def test_a_constant_past_its_bound_is_refused_naming_it(name: str, factor: float) -> None:
    value = min(UPPER[name] * factor, 1e308)  # 1e308: the issue's `launch_us: 1e308`
    with pytest.raises(ConfigError) as info:
        parse_config(config({name: value}))
    lines = str(info.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"simulation.nccl.constants.{name}: Input should be less than or equal to "), lines


def test_the_fit_s_zero_step_scale_is_accepted() -> None:
    # sim/nccl/fabrics.py's Hopper constants have step_scale 0.0, which `python -m sim.nccl.fit --table` can print
    assert parse_config(config({"step_scale": 0.0})).simulation.nccl.constants.step_scale == 0.0


@pytest.mark.parametrize("edge", ["upper", "tiny"])
def test_constants_at_their_bounds_run_to_finite_results_and_figures(edge: str, tmp_path: Path) -> None:
    # upper: every constant at its bound at once; tiny: 1e-320 (subnormal), as the crashing run had it
    constants = dict(UPPER) if edge == "upper" else {name: 1e-320 for name in CONSTANT_KEYS}
    result = simulate(config(constants))
    assert not result.errors, result.errors
    assert result.summary["mean_iteration_s"].map(math.isfinite).all()
    if edge == "upper":  # a second-long launch per collective: each iteration takes more than one second
        assert (result.summary["mean_iteration_s"] > 1.0).all()
    out = result.write(tmp_path / "out")
    assert sorted(p.name for p in out.glob("*.png")), "no figure drawn"
