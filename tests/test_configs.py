"""Every bundled config validates; the cheap ones run end to end (the expensive ones run in benchmarks)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.api import prepare, simulate
from sim.config import load_config

ROOT = Path(__file__).parent.parent / "configs"
CONFIGS = sorted([*ROOT.glob("*.yaml"), *ROOT.glob("papers/*.yaml")])
# seconds to minutes each even at two iterations (big zoo models, thousands of flows): left out of the quick subset
SLOW = {"real_zoo_resnet50", "zen_deepfm_8x8", "zen_deepfm_16", "zen_code_opt_2_7b_16x1"}


def test_configs_exist() -> None:
    names = {p.stem for p in CONFIGS}
    assert {"quickstart", "nvlink_8x8_100g"} <= names
    assert {f"two_tier_{r}_{m}" for r in ("1to1", "4to1", "16to1") for m in ("resnet50", "bert_large")} <= names


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_bundled_config_is_valid(path: Path) -> None:
    cfg = load_config(path)
    cluster, plan = prepare(cfg)
    # real_*, validate_* and emulate_* configs are sized for processes on one machine, dssync_v1_* is the paper's 4
    # workers, opendiloco_* its 4 workers; the rest are simulated clusters
    small = path.stem.startswith(("real_", "validate_", "emulate_", "dssync_v1_", "opendiloco_"))
    assert cluster.world_size >= (4 if small else 8) and plan.compute_s > 0


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.stem, marks=[pytest.mark.slow] if p.stem in SLOW else []) for p in CONFIGS]
)
def test_bundled_config_runs_two_iterations(path: Path) -> None:
    cfg = load_config(path)
    result = simulate(cfg.model_copy(update={"iterations": 2}))
    assert not result.errors
    assert (result.summary["iterations"] == 2).all()
    assert (result.summary["mean_iteration_s"] > 0).all()
