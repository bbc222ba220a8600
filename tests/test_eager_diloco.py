"""One-step-delayed and eager DiLoCo (`policies/eager_diloco.py`): the ops of each step, the outer updates in
numerics mode against hand computations with torch.optim.SGD (in-process, as tests/test_diloco_numerics.py
drives the replicas, and through `simulate()`), the timing against the ring's closed form, and the settings
`syncsim check` refuses by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import star, synthetic  # noqa: E402
from test_diloco import PARAMETER_BYTES, WORLD  # noqa: E402
from test_diloco import bound as bound_of_8_buckets  # noqa: E402
from test_diloco_numerics import CFG, bound, numerics_run, replicas, rows, train  # noqa: E402
from test_diloco_numerics import WORLD as M  # noqa: E402
from test_launched_ops import GBPS, MB, C, memory_bandwidth  # noqa: E402
from test_local_sgd import ALPHA, ring_allreduce  # noqa: E402

from policies.eager_diloco import EagerDiLoCo  # noqa: E402
from policies.ops import AllReduce, Combine, OptimizerStep, Payload, Wait  # noqa: E402
from policies.registry import available  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.cli import main  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

ROUNDING = "(bf16, fp16, fp8_e4m3, fp8_e5m2, int8, fp4)"
G0, G1, OWN = "outer_gradient_0", "outer_gradient_1", "own_gradient"
PSEUDO = ((1.0, "anchor"), (-1.0, "parameters"))


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(CFG, 0)


def sent(tensor: str) -> AllReduce:
    return AllReduce(WORLD, PARAMETER_BYTES, payload=Payload.PARAMETERS, tensor=tensor, handle=tensor)


# ----------------------------------------------------------------------------- the program


def test_it_is_registered() -> None:
    assert available()["eager_diloco"] == "policies.eager_diloco:EagerDiLoCo"


def test_delayed_launches_outer_step_ts_all_reduce_and_applies_it_at_t_plus_1() -> None:
    policy = bound_of_8_buckets(EagerDiLoCo(period=2, update="delayed"))
    outer = policy.outer
    assert [list(policy.end_step(0, s)) for s in (0, 2, 4)] == [[], [], []]
    restart = Combine("parameters", ((1.0, "anchor"),))
    # t = 1: nothing is in flight yet; the outer step applies the zeros the second buffer starts with
    assert list(policy.end_step(0, 1)) == [
        Combine(G0, PSEUDO), sent(G0), OptimizerStep("anchor", G1, outer), restart]  # fmt: skip
    # t = 2: the mean of t = 1 comes back in G0 while the new pseudo-gradient goes out in G1
    assert list(policy.end_step(0, 3)) == [
        Combine(G1, PSEUDO), Wait(G0), sent(G1), OptimizerStep("anchor", G0, outer), restart]  # fmt: skip
    assert list(policy.end_step(0, 5)) == [
        Combine(G0, PSEUDO), Wait(G1), sent(G0), OptimizerStep("anchor", G1, outer), restart]  # fmt: skip
    assert [b.name for b in policy.buffers()] == ["anchor", G0, G1]
    assert policy.global_tensor == "anchor"


def test_eager_swaps_its_own_stale_share_for_its_fresh_pseudo_gradient() -> None:
    policy = bound_of_8_buckets(EagerDiLoCo(period=2, update="eager", warmup_steps=1))
    share = 1 / 4
    assert list(policy.end_step(0, 0)) == [Combine("anchor", ((1.0, "parameters"),))]  # warm-up, as DiLoCo
    assert list(policy.end_step(0, 4)) == [  # t = 2 (local steps 1 .. 4)
        Combine(G1, PSEUDO),
        Wait(G0),
        Combine(G0, ((1.0, G0), (share, G1), (-share, OWN))),  # mean + (fresh - own) / M
        Combine(OWN, ((1.0, G1),)),
        sent(G1),
        OptimizerStep("anchor", G0, policy.outer),
        Combine("parameters", ((1.0, "anchor"),)),
    ]
    assert [b.name for b in policy.buffers()] == ["anchor", G0, G1, OWN]
    assert policy.global_tensor is None  # the workers' anchors differ: the replicas' mean is scored


# ----------------------------------------------------------------------------- numerics, in-process


def offered_and_anchors(task: Task, policy: EagerDiLoCo, outer_steps: int) -> tuple[list, list]:
    """Per outer step t = 1 ..: every worker's anchor - parameters as step t's inner phase ends, and every
    worker's anchor after the outer step (checking the parameters restart from it)."""
    reps = replicas(task, policy)
    offered: list[torch.Tensor] = []
    anchors: list[torch.Tensor] = []

    def watch(event: str, step: int, op: Any, rank: Optional[int]) -> None:
        if step % 2 != 1:
            return
        if event == "step_done":
            offered.append(rows(reps, "anchor") - rows(reps, "parameters"))
        elif event == "end_step":
            anchors.append(rows(reps, "anchor"))
            assert torch.equal(anchors[-1], rows(reps, "parameters"))

    train(reps, policy, 2 * outer_steps, watch)
    return offered, anchors


def test_delayed_steps_the_anchor_with_the_previous_outer_steps_mean(task: Task) -> None:
    """theta(t) = SGD-Nesterov(theta(t-1), mean_m Delta_m(t-1)), Delta(0) = 0: torch.optim.SGD fed the means
    one outer step late gives every worker's anchor after each of 4 outer steps."""
    policy = bound(EagerDiLoCo(period=2, update="delayed", outer_lr=0.7, outer_momentum=0.9))
    offered, anchors = offered_and_anchors(task, policy, 4)
    reference = torch.nn.Parameter(task.initial.clone())
    opt = torch.optim.SGD([reference], lr=0.7, momentum=0.9, nesterov=True)
    late = [torch.zeros_like(task.initial)] + [d.mean(dim=0) for d in offered]
    for t, anchor in enumerate(anchors):
        reference.grad = late[t].clone()
        opt.step()
        for r in range(M):
            torch.testing.assert_close(anchor[r], reference.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(anchors[-1][0], task.initial, atol=1e-3)


def test_eager_steps_each_anchor_with_its_fresh_share_and_the_others_stale_ones(task: Task) -> None:
    """theta_m(t) = SGD-Nesterov(theta_m(t-1), (Delta_m(t) + sum over m' != m of Delta_m'(t-1)) / M): one
    torch.optim.SGD per worker; the anchors differ across workers."""
    policy = bound(EagerDiLoCo(period=2, update="eager", outer_lr=0.7, outer_momentum=0.9))
    offered, anchors = offered_and_anchors(task, policy, 4)
    previous = [torch.zeros(M, task.initial.numel())] + offered
    for m in range(M):
        reference = torch.nn.Parameter(task.initial.clone())
        opt = torch.optim.SGD([reference], lr=0.7, momentum=0.9, nesterov=True)
        for t, anchor in enumerate(anchors):
            others = sum(previous[t][k] for k in range(M) if k != m)
            reference.grad = (offered[t][m] + others) / M
            opt.step()
            torch.testing.assert_close(anchor[m], reference.detach(), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(anchors[-1][0], anchors[-1][1], atol=1e-4)


# ----------------------------------------------------------------------------- numerics, through the engine


def plain_outer(name: str, **settings: Any) -> dict[str, Any]:
    return {"name": name, "label": settings.pop("label", name), "period": 3, "outer_lr": 1.0, "outer_momentum": 0.0,
            "nesterov": False, **settings}  # fmt: skip


def test_simulated_delayed_lands_on_the_replicas_mean_one_outer_step_late() -> None:
    """Outer lr 1, no momentum, H 3: the anchor after outer step 2 (6 iterations) is theta0 - mean Delta(1), the
    replicas' mean after their first 3 steps: local_sgd's parameters after 3 iterations. The all-reduce of
    step 1 ran in the engine while steps 3 to 5 computed."""
    local = simulate(numerics_run([{"name": "local_sgd", "period": 3}], iterations=3)).runs[0]
    result = simulate(numerics_run([plain_outer("eager_diloco", update="delayed")], iterations=6))
    assert not result.errors
    ours = result.runs[0]
    assert ours.scored == "anchor"
    torch.testing.assert_close(
        torch.from_numpy(ours.consensus), torch.from_numpy(local.parameters[0]), rtol=1e-5, atol=1e-6
    )


def test_simulated_eager_takes_its_own_share_at_the_first_outer_step() -> None:
    """Outer lr 1, no momentum, H 3, one outer step: worker m's anchor is theta0 + (p_m - theta0) / M, with p_m its
    parameters after 3 steps alone and theta0 the initial model (both from a DiLoCo run whose first outer step
    would come later: its parameters are the p_m, its anchor theta0)."""
    alone = simulate(numerics_run([plain_outer("diloco", period=100)], iterations=3)).runs[0]
    result = simulate(numerics_run([plain_outer("eager_diloco", update="eager")], iterations=3))
    assert not result.errors
    ours = result.runs[0]
    theta0, p = torch.from_numpy(alone.consensus), torch.from_numpy(alone.parameters)
    assert not torch.allclose(p[0], p[1], atol=1e-4)
    torch.testing.assert_close(torch.from_numpy(ours.parameters), theta0 + (p - theta0) / M, rtol=1e-5, atol=1e-6)
    assert ours.scored == "mean"


# ----------------------------------------------------------------------------- timing


@pytest.mark.parametrize(("update", "passes"), [("delayed", 3 + 5 + 2), ("eager", 3 + 4 + 2 + 5 + 2)])
def test_the_whole_all_reduce_hides_behind_h_steps(update: str, passes: int) -> None:
    """300 MB of fp32 parameters on 4 hosts: the ring (144 ms) is longer than a step's 50 ms of compute but
    shorter than H = 4 steps. Every outer step costs its local passes over the model and nothing else:
    anchor - parameters (3 passes), outer SGD with momentum (5), parameters = anchor (2); eager adds the
    mean's correction (4) and the copy of its own share (2). DiLoCo on the same run pays the ring too."""
    policies = [{"name": "eager_diloco", "period": 4, "update": update}, {"name": "diloco", "period": 4}]
    config = synthetic(star(4), policies, 300, compute_ms=C * 1e3, iterations=12)
    result = simulate(config)
    assert not result.errors
    u = 4 * (300 * MB / 4) / memory_bandwidth(config)  # one fp32 pass over the model
    ring = ring_allreduce(4, 300 * MB, ALPHA, GBPS)
    assert C < ring < 4 * C  # the premise
    outer = {3, 7, 11}
    rows = result.iterations.groupby(["policy", "iteration"])["iteration_s"].max()
    assert rows["eager_diloco"].to_dict() == pytest.approx(
        {s: C + passes * u * (s in outer) for s in range(12)}, rel=1e-9, abs=1e-12
    )
    assert rows["diloco"].to_dict() == pytest.approx(
        {s: C + (3 * u + ring + 7 * u) * (s in outer) for s in range(12)}, rel=1e-9, abs=1e-12
    )
    ops = result.ops[result.ops["policy"] == "eager_diloco"]
    assert list(ops["nbytes"]) == [300 * MB] * 2  # the third is still running when the workers end
    assert (ops["finished_s"] - ops["launched_s"]).tolist() == pytest.approx([ring] * 2, rel=1e-9)
    waits = result.iterations[result.iterations["policy"] == "eager_diloco"]["wait_s"]
    assert (waits == 0).all()


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("settings", "line"),
    [
        ({"update": "lazy"}, "policies[0].update: should be 'delayed' or 'eager' (got 'lazy')"),
        ({"replica": "host"}, "policies[0].replica: eager_diloco launches one all-reduce of every rank; allowed: rank"),
        (
            {"error_feedback": True},
            "policies[0].error_feedback: needs wire set to a type that rounds " + ROUNDING,
        ),
    ],
)
def test_check_refuses_bad_settings_by_field(
    settings: dict[str, Any], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = synthetic(star(4, gpus_per_host=2), [{"name": "eager_diloco", **settings}], 100, iterations=2)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["check", str(path)]) == 2
    assert line in [row.strip() for row in capsys.readouterr().err.splitlines()]
