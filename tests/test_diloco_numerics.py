"""DiLoCo and Streaming DiLoCo in numerics mode, against hand derivations and torch.optim.

The in-process tests play the executor's part (`play`): each program item's local ops go to
`Replicas.local` and its collectives to `arrive` then, once every rank has issued the item, to
`collective_done`, in the order the simulator issues them. The `simulate()` tests at the end run the
same policies through the engine."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import star, synthetic  # noqa: E402

from policies import ClusterView, HostInfo, ModelInfo  # noqa: E402
from policies.base import Bucket, Policy  # noqa: E402
from policies.diloco import DiLoCo  # noqa: E402
from policies.local_sgd import LocalSGD  # noqa: E402
from policies.ops import Collective, Combine, Encode, LocalOp, Program, step_ops  # noqa: E402
from policies.registry import add_search_folder  # noqa: E402
from policies.streaming_diloco import StreamingDiLoCo  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.numerics.replicas import Replicas  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

CFG = NumericsConfig(model="logreg", global_batch=16)
WORLD = 4
BUCKETS = (1.0, 1.0, 1.0, 1.0)
Watch = Callable[[str, int, Any, Optional[int]], None]  # (event, step, op or None, rank or None)


@pytest.fixture(scope="module")
def task() -> Task:
    return Task(CFG, 0)


def bound(policy: Policy) -> Policy:
    hosts = [f"h{i}" for i in range(WORLD)]
    view = ClusterView(
        rank_hosts=tuple(hosts),
        hosts={h: HostInfo(h, None, (i,), 3.125e9, 1.5e11) for i, h in enumerate(hosts)},
        racks={},
    )
    policy.bind(view, ModelInfo(parameter_bytes=sum(BUCKETS), bucket_bytes=BUCKETS))
    return policy


def replicas(task: Task, policy: Policy) -> Replicas:
    return Replicas(
        CFG,
        task,
        WORLD,
        BUCKETS,
        100,
        0,
        policy.name,
        False,
        buffers=policy.buffers(),
        global_tensor=policy.global_tensor,
    )


def play(reps: Replicas, step: int, programs: Sequence[Program], bucket: Optional[int], watch: Watch) -> None:
    """One hook's programs, one per rank, item by item as the executor runs them (all ranks in step)."""
    items = [[step_ops(item) for item in program] for program in programs]
    assert len({len(x) for x in items}) == 1, "every rank issues the same items"
    for i in range(len(items[0])):
        for rank, ops in enumerate(x[i] for x in items):
            for op in ops:
                if isinstance(op, LocalOp):
                    reps.local(rank, op, bucket)
                    watch("local", step, op, rank)
                elif isinstance(op, Collective):
                    reps.arrive(rank, op, bucket)
        for op in items[0][i]:
            if isinstance(op, Collective):
                reps.collective_done(op, {r: bucket for r in range(WORLD)})
                watch("collective", step, op, None)


def train(reps: Replicas, policy: Policy, steps: int, watch: Watch = lambda *_: None) -> None:
    """`steps` iterations of every worker, the hooks in the order sim/engine/worker.py calls them."""
    buckets = [Bucket(i, b, len(BUCKETS)) for i, b in enumerate(BUCKETS)]
    ranks = range(WORLD)
    for step in range(steps):
        play(reps, step, [policy.begin_step(r, step) for r in ranks], None, watch)
        for b in buckets[::-1]:
            play(reps, step, [policy.on_forward(r, step, b) for r in ranks], b.index, watch)
        for r in ranks:
            reps.forward_done(r, step)
        for b in buckets:
            play(reps, step, [policy.on_gradients(r, step, b) for r in ranks], b.index, watch)
        for r in ranks:
            reps.step_done(r, step)
        watch("step_done", step, None, None)
        play(reps, step, [policy.end_step(r, step) for r in ranks], None, watch)
        watch("end_step", step, None, None)


def rows(reps: Replicas, name: str) -> torch.Tensor:
    return torch.stack(reps.rows(name)).clone()


@pytest.mark.parametrize("outer_lr", [1.0, 0.7])
def test_the_outer_step_moves_the_anchor_toward_the_replicas_mean(task: Task, outer_lr: float) -> None:
    """(a) Pseudo-gradient = anchor - parameters, so an outer SGD step of rate lr (no momentum) moves the
    anchor lr of the way from where it was to the replicas' mean: lr 1 lands on the mean (local SGD's
    average), lr 0.7 70% of the way. The parameters restart from the new anchor."""
    policy = bound(DiLoCo(period=3, outer_lr=outer_lr, outer_momentum=0.0, nesterov=False))
    reps = replicas(task, policy)
    seen: dict[str, torch.Tensor] = {}

    def watch(event: str, step: int, op: Any, rank: Optional[int]) -> None:
        if event == "step_done" and step == 2:
            seen["params"], seen["anchor"] = rows(reps, "parameters"), rows(reps, "anchor")

    train(reps, policy, 3, watch)
    old, mean = seen["anchor"][0], seen["params"].mean(dim=0)
    assert torch.equal(old, task.initial)  # no outer step yet: the initial parameters
    assert not torch.allclose(mean, old, atol=1e-3)  # the replicas did move
    expected = old + outer_lr * (mean - old)
    for r in range(WORLD):
        torch.testing.assert_close(reps.rows("anchor")[r], expected, rtol=1e-5, atol=1e-6)
        assert torch.equal(reps.rows("parameters")[r], reps.rows("anchor")[r])


def test_diloco_with_outer_lr_1_and_no_momentum_is_local_sgd(task: Task) -> None:
    """(b) Outer SGD with rate 1 and no momentum sets the anchor to the mean of the replicas, as local
    SGD's average does: the same period gives the same parameters, up to fp32 round-off."""
    diloco = bound(DiLoCo(period=3, outer_lr=1.0, outer_momentum=0.0, nesterov=False))
    local = bound(LocalSGD(period=3))
    ours, theirs = replicas(task, diloco), replicas(task, local)
    train(ours, diloco, 9)
    train(theirs, local, 9)
    assert not torch.allclose(theirs.params, task.initial.expand(WORLD, -1), atol=1e-2)
    torch.testing.assert_close(ours.params, theirs.params, rtol=1e-5, atol=1e-6)


def test_outer_nesterov_momentum_is_torch_sgd_on_the_mean_pseudo_gradients(task: Task) -> None:
    """(c) Three outer steps with Nesterov momentum 0.9, rate 0.7: the anchor is what torch.optim.SGD
    (nesterov=True) makes of the initial parameters fed the three all-reduced pseudo-gradients, each of
    which is the mean over workers of anchor - parameters; every worker holds the same anchor bits."""
    policy = bound(DiLoCo(period=2, outer_lr=0.7, outer_momentum=0.9, nesterov=True))
    reps = replicas(task, policy)
    offered: list[torch.Tensor] = []
    means: list[torch.Tensor] = []

    def watch(event: str, step: int, op: Any, rank: Optional[int]) -> None:
        if event == "step_done" and step % 2 == 1:
            offered.append((rows(reps, "anchor") - rows(reps, "parameters")).mean(dim=0))
        if event == "collective" and op.buffer == "outer_gradient":
            means.append(reps.rows("outer_gradient")[0].clone())

    train(reps, policy, 6, watch)
    assert len(means) == 3
    reference = torch.nn.Parameter(task.initial.clone())
    opt = torch.optim.SGD([reference], lr=0.7, momentum=0.9, nesterov=True)
    for mean, hand in zip(means, offered):
        torch.testing.assert_close(mean, hand, rtol=1e-5, atol=1e-7)
        reference.grad = mean.clone()
        opt.step()
    for r in range(WORLD):
        assert torch.equal(reps.rows("anchor")[r], reps.rows("anchor")[0])
    torch.testing.assert_close(reps.rows("anchor")[0], reference.detach(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("overlap", "mixing"),
    [
        (0, 0.0),
        (1, 0.0),
        (1, 0.5),
    ],
)
def test_streaming_fragments_follow_diloco_on_their_buckets_only(task: Task, overlap: int, mixing: float) -> None:
    """(d) Streaming DiLoCo, H 4, P 2 fragments of 4 buckets: fragment 1 (buckets 1, 3) sends after steps
    1 and 5, fragment 0 (buckets 0, 2) after steps 3 and 7, and applies tau steps later. Then, on its
    buckets only, the anchor moves 0.7 of the way to the mean of the replicas as they were when it sent
    (outer SGD, no momentum: DiLoCo's rule), and the parameters become mixing x theirs + (1 - mixing) x
    the anchor; elsewhere, and at other steps, neither changes."""
    policy = bound(
        StreamingDiLoCo(
            period=4,
            fragments=2,
            overlap_steps=overlap,
            mixing=mixing,
            outer_lr=0.7,
            outer_momentum=0.0,
            nesterov=False,
        )
    )
    reps = replicas(task, policy)
    sent = {1: (1, 3), 5: (1, 3), 3: (0, 2), 7: (0, 2)}  # step -> the buckets of the fragment it sends
    applied = {s + overlap: buckets for s, buckets in sent.items()}
    history: dict[int, torch.Tensor] = {}
    before: dict[str, torch.Tensor] = {}
    checked = []

    def watch(event: str, step: int, op: Any, rank: Optional[int]) -> None:
        if event == "step_done":
            before["params"], before["anchor"] = rows(reps, "parameters"), rows(reps, "anchor")
            history[step] = before["params"]
        if event != "end_step":
            return
        params, anchor = rows(reps, "parameters"), rows(reps, "anchor")
        for bucket, (a, b) in enumerate(reps.ranges):
            p0, a0 = before["params"][:, a:b], before["anchor"][:, a:b]
            if bucket in applied.get(step, ()):
                offered = history[step - overlap][:, a:b].mean(dim=0)
                torch.testing.assert_close(anchor[:, a:b], a0 + 0.7 * (offered - a0), rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(params[:, a:b], mixing * p0 + (1 - mixing) * anchor[:, a:b])
                checked.append((step, bucket))
            else:
                assert torch.equal(anchor[:, a:b], a0) and torch.equal(params[:, a:b], p0), (step, bucket)

    train(reps, policy, 8 + overlap, watch)
    assert sorted(checked) == sorted((s, b) for s, bs in applied.items() for b in bs)


def test_int8_error_feedback_keeps_what_the_wire_lost(task: Task) -> None:
    """(e) int8 with error feedback: at every outer step and worker, what is sent (the encoded pseudo-
    gradient) plus the new residual equals the pseudo-gradient offered plus the old residual, and the
    wire does lose something (a residual that is not zero)."""
    policy = bound(DiLoCo(period=2, wire="int8", error_feedback=True, outer_lr=0.7, outer_momentum=0.9))
    reps = replicas(task, policy)
    offered: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    checks = []

    def watch(event: str, step: int, op: Any, rank: Optional[int]) -> None:
        if event != "local" or rank is None:
            return
        if isinstance(op, Combine) and op.out == "outer_gradient":
            offered[rank] = (reps.rows("outer_gradient")[rank].clone(), reps.rows("residual")[rank].clone())
        elif isinstance(op, Encode):
            sent, residual = reps.rows("outer_gradient")[rank], reps.rows("residual")[rank]
            pseudo, old = offered.pop(rank)
            torch.testing.assert_close(sent + residual, pseudo + old, rtol=1e-6, atol=1e-8)
            assert torch.count_nonzero(residual) > 0
            checks.append((step, rank, bool(torch.count_nonzero(old))))

    train(reps, policy, 6, watch)
    assert [(s, r) for s, r, _ in checks] == [(s, r) for s in (1, 3, 5) for r in range(WORLD)]
    assert all(had_old for s, _, had_old in checks if s > 1)  # the residual carried to later steps


# ----------------------------------------------------------------------------- through the engine


def numerics_run(policies: list[dict[str, Any]], iterations: int = 9) -> dict[str, Any]:
    config = synthetic(star(WORLD), policies, 1.0, compute_ms=5, iterations=iterations)
    config["numerics"] = {"model": "logreg", "global_batch": 16, "eval_every": 3}
    return config


def test_simulated_diloco_with_outer_lr_1_ends_on_local_sgds_parameters() -> None:
    """(b) through simulate(): the outer step's local ops run at their issue points."""
    diloco = {"name": "diloco", "period": 3, "outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
    result = simulate(numerics_run([{"name": "local_sgd", "period": 3}, diloco]))
    assert not result.errors
    local, ours = result.runs
    assert ours.scored == "anchor" and local.scored == "mean"
    torch.testing.assert_close(
        torch.from_numpy(ours.parameters), torch.from_numpy(local.parameters), rtol=1e-5, atol=1e-6
    )
    torch.testing.assert_close(
        torch.from_numpy(ours.consensus), torch.from_numpy(local.parameters[0]), rtol=1e-5, atol=1e-6
    )


def test_a_butterfly_outer_average_holds_the_same_values_as_the_ring() -> None:
    """How an all-reduce travels does not change its mean: hivemind_diloco (configs/papers), whose outer
    all-reduce is a butterfly, ends on the built-in diloco's parameters and anchor."""
    add_search_folder(Path(__file__).parent.parent / "configs" / "papers")
    diloco = {"name": "diloco", "period": 3, "wire": "fp16"}
    result = simulate(numerics_run([diloco, {**diloco, "name": "hivemind_diloco:HivemindDiLoCo"}]))
    assert not result.errors
    ring, butterfly = result.runs
    assert (butterfly.parameters == ring.parameters).all() and (butterfly.consensus == ring.consensus).all()
    assert butterfly.scored == ring.scored == "anchor"


def test_simulated_streaming_diloco_with_overlap_moves_the_anchor_it_scores() -> None:
    """Launched fragment all-reduces (tau 1) and their Waits through the engine: the run completes, the
    consensus rows score the anchor, which the outer steps moved (its accuracy changed from the initial
    model's), and the workers' parameters stay apart (mixing 0.5 keeps each one's local progress)."""
    streaming = {"name": "streaming_diloco", "period": 4, "fragments": 1, "overlap_steps": 1, "mixing": 0.5}
    result = simulate(numerics_run([streaming], iterations=8))
    assert not result.errors
    run = result.runs[0]
    assert run.scored == "anchor"
    consensus = [row for row in run.accuracy if row[2] < 0]
    assert consensus[-1][4] != consensus[0][4]  # held-out loss of the anchor moved
    assert len({tuple(p) for p in run.parameters.round(7)}) == WORLD


def test_diloco_reaches_the_digits_target_in_less_wall_time_than_ring_across_a_wan() -> None:
    """configs/diloco_digits_wan.yaml, cut to 200 iterations and a 0.9 target: ring all-reduces ResNet-50's
    gradients over the 1 Gb/s, 50 ms WAN every step, DiLoCo (H 50) its pseudo-gradient once per 50 steps,
    so it reaches the target in a fraction of ring's simulated time (the full config: docs/numerics.md)."""
    data = yaml.safe_load((Path(__file__).parent.parent / "configs" / "diloco_digits_wan.yaml").read_text())
    data["iterations"] = 200
    data["numerics"].update(target_accuracy=0.9, eval_workers=False)
    result = simulate(data)
    assert not result.errors
    summary = result.summary.set_index("policy")
    ring, diloco = summary.loc["ring", "time_to_target_s"], summary.loc["diloco", "time_to_target_s"]
    assert ring > 0 and diloco > 0  # both reached it (NaN compares false)
    assert diloco < ring / 2
    assert [run.scored for run in result.runs] == ["mean", "anchor"]
