"""Local SGD (`policies/local_sgd.py`): the ops it plans, its iteration times against the ring closed form
on the ideal network, its tensors in numerics mode (replicas equal after each averaging, apart between), and
the same object on gloo processes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml
from helpers import GBPS, US, star, synthetic

from policies import ClusterView, HostInfo, ModelInfo
from policies.base import Bucket
from policies.local_sgd import LocalSGD
from policies.ops import AllReduce, Group, Payload
from policies.registry import available
from sim.api import simulate
from sim.cli import main
from sim.config import parse_config
from sim.errors import ConfigError

MB = 1e6
# GPU -> host -> switch -> host -> GPU on a star: two intra-host hops of 1 us, two links of 5 us
ALPHA = (2 * 1.0 + 2 * 5.0) * US


def ring_allreduce(p: int, n: float, alpha: float, bandwidth: float) -> float:
    """2(p-1) ring steps, each a path latency and an n/p chunk (as tests/test_physics.py)."""
    return 2 * (p - 1) * (alpha + n / p / bandwidth)


def bound(policy: LocalSGD, world: int = 2, parameter_bytes: float = 4e8) -> LocalSGD:
    hosts = [f"h{i}" for i in range(world)]
    view = ClusterView(
        rank_hosts=tuple(hosts),
        hosts={h: HostInfo(h, None, (i,), 3.125e9, 1.5e11) for i, h in enumerate(hosts)},
        racks={},
    )
    policy.bind(view, ModelInfo(parameter_bytes=parameter_bytes, bucket_bytes=(parameter_bytes,)))
    return policy


def test_it_is_registered() -> None:
    assert available()["local_sgd"] == "policies.local_sgd:LocalSGD"


def test_warm_up_all_reduces_gradients_then_parameters_every_period() -> None:
    policy = bound(LocalSGD(period=3, warmup_steps=2))
    bucket = Bucket(0, 4e8, 1)
    world = Group((0, 1))
    grads = [list(policy.on_gradients(0, step, bucket)) for step in range(8)]
    averages = [list(policy.end_step(0, step)) for step in range(8)]
    assert grads[:2] == [[AllReduce(world, 4e8)]] * 2 and grads[2:] == [[]] * 6
    # local steps 2, 3, 4 end in an average, then 5, 6, 7
    assert [bool(a) for a in averages] == [False, False, False, False, True, False, False, True]
    assert averages[4] == [AllReduce(world, 4e8, payload=Payload.PARAMETERS)]


def test_wire_sizes_the_parameter_average() -> None:
    (op,) = bound(LocalSGD(period=1, wire="bf16")).end_step(0, 0)
    assert op.payload is Payload.PARAMETERS and op.wire == "bf16" and op.elements == 1e8 and op.nbytes == 2e8


@pytest.mark.parametrize(
    ("settings", "field", "allowed"),
    [
        ({"period": 0}, "period", "an integer from 1 to 100000 (got 0)"),
        ({"period": 100_001}, "period", "an integer from 1 to 100000 (got 100001)"),
        ({"warmup_steps": -1}, "warmup_steps", "an integer from 0 to 10000000 (got -1)"),
    ],
)
def test_bad_settings_are_refused_by_name(settings: dict[str, Any], field: str, allowed: str) -> None:
    with pytest.raises(ConfigError, match=rf"^policies\[0\]\.{field}: allowed: {re.escape(allowed)}$"):
        parse_config(synthetic(star(2), [{"name": "local_sgd", **settings}], 1.0))


def test_syncsim_check_takes_it_and_refuses_a_bad_period_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.yaml"
    config = synthetic(star(4), [{"name": "local_sgd", "period": 4, "warmup_steps": 2, "wire": "bf16"}], 10.0)
    path.write_text(yaml.safe_dump(config))
    assert main(["check", str(path)]) == 0
    config["policies"][0]["period"] = 0
    path.write_text(yaml.safe_dump(config))
    assert main(["check", str(path)]) == 2
    assert "policies[0].period: allowed: an integer from 1 to 100000 (got 0)" in capsys.readouterr().err


@pytest.mark.parametrize(("p", "mb", "period", "warmup", "iterations"), [(4, 100, 3, 0, 6), (8, 40, 2, 1, 5)])
def test_iteration_times_match_the_ring_closed_form(
    p: int, mb: float, period: int, warmup: int, iterations: int
) -> None:
    """Compute c per step; a step that averages adds one ring all-reduce of the n-byte model after it, and a
    warm-up step adds one of the n-byte gradient (one bucket, ready at the end of backward)."""
    c, n = 0.05, mb * MB
    config = synthetic(star(p), [{"name": "local_sgd", "period": period, "warmup_steps": warmup}], mb,
                       compute_ms=c * 1e3, iterations=iterations)  # fmt: skip
    result = simulate(config)
    assert not result.errors
    ring = ring_allreduce(p, n, ALPHA, 25 * GBPS)
    averaging = [s for s in range(warmup, iterations) if (s - warmup + 1) % period == 0]
    expected = {s: c + (ring if s < warmup or s in averaging else 0.0) for s in range(iterations)}
    steps = result.iterations.groupby("iteration")["iteration_s"]
    for step, seconds in steps.max().items():
        assert seconds == pytest.approx(expected[step], rel=1e-6), step
    assert steps.min().to_dict() == pytest.approx(steps.max().to_dict(), rel=1e-9)  # lockstep: every worker alike
    mean = sum(expected.values()) / iterations
    row = result.summary.iloc[0]
    assert row["mean_iteration_s"] == pytest.approx(mean, rel=1e-6)
    assert row["compute_utilization"] == pytest.approx(c / mean, rel=1e-6)


def test_period_one_without_warm_up_costs_what_ring_costs() -> None:
    """Averaging after every step moves the model once a step, as ring moves the gradient once a step."""
    config = synthetic(
        star(4), [{"name": "local_sgd", "period": 1}, {"name": "ring"}], 100, compute_ms=50, iterations=3
    )
    local, ring = simulate(config).summary["mean_iteration_s"]
    assert local == pytest.approx(ring, rel=1e-9)


@pytest.mark.parametrize("wire", [None, "bf16", "int8"])
def test_numerics_averages_the_replicas_every_period(monkeypatch: pytest.MonkeyPatch, wire: str | None) -> None:
    """After each averaging every replica holds the mean of what the replicas held just before; between
    averagings they train apart (each on its own shard of the data). With a wire type the mean is the
    rounded one (docs/policies.md): bf16 partial sums each rounded to 8 significant bits (4 ranks: at
    most 4 roundings of at most 2**-8 of the largest value), int8 each block's values and its sum one
    step of max/127 apart at most; and it does differ from the exact mean, so the wire path ran."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from sim.numerics.replicas import Replicas

    events: list[tuple[str, Any, Any]] = []
    step_done, collective_done = Replicas.step_done, Replicas.collective_done

    def record_step(self: Replicas, rank: int, step: int) -> None:
        step_done(self, rank, step)
        events.append(("step", step, None))

    def record_collective(self: Replicas, op: Any, buckets: Any) -> None:
        before = self.params.clone()
        collective_done(self, op, buckets)
        if op.payload is Payload.PARAMETERS:
            events.append(("average", before, self.params.clone()))

    monkeypatch.setattr(Replicas, "step_done", record_step)
    monkeypatch.setattr(Replicas, "collective_done", record_collective)
    policy = {"name": "local_sgd", "period": 3, **({"wire": wire} if wire else {})}
    config = synthetic(star(4), [policy], 1.0, compute_ms=5, iterations=6)
    config["numerics"] = {"model": "logreg", "global_batch": 32, "eval_every": 3}
    assert not simulate(config).errors

    # steps 0-2 of every worker, one average, steps 3-5, one average
    kinds = [(kind, step) if kind == "step" else (kind, None) for kind, step, _ in events]
    assert kinds == [("step", s) for s in range(3) for _ in range(4)] + [("average", None)] + [
        ("step", s) for s in range(3, 6) for _ in range(4)
    ] + [("average", None)]
    for _, before, after in (e for e in events if e[0] == "average"):
        assert all(not torch.equal(before[0], before[r]) for r in range(1, 4))  # apart before
        assert all(torch.equal(after[0], after[r]) for r in range(1, 4))  # equal after
        exact, largest = before.mean(dim=0), float(before.abs().max())
        tolerance = {None: 1e-6, "bf16": 4 * 2**-8 * largest, "int8": largest / 127}[wire] + 1e-6
        assert torch.allclose(after[0], exact, rtol=0, atol=tolerance)
        assert wire is None or not torch.equal(after[0], exact)


@pytest.mark.slow
def test_gloo_workers_end_with_the_numerics_parameters(tmp_path: Path) -> None:
    """The same policy on 4 gloo processes: 2 warm-up steps of gradient all-reduce (2 buckets each), an
    average after step 4, two local steps after it; the replicas equal numerics mode's, and differ."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from test_real_backend import write_config

    from real.launch import launch

    config = write_config(tmp_path, [{"name": "local_sgd", "period": 3, "warmup_steps": 2}], iterations=7)
    outcome = launch(config, tmp_path / "out", nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    (run,) = simulate(config).runs
    real = np.load(tmp_path / "out" / "parameters.npz")["local_sgd/workers"]
    np.testing.assert_allclose(real, run.parameters, rtol=1e-4, atol=1e-6)
    assert not np.allclose(real[0], real[1])  # two local steps since the last average
    ops = pd.read_csv(tmp_path / "out" / "ops.csv")
    assert sorted(ops["step"]) == [0, 0, 1, 1, 4]
