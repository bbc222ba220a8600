"""The real backend's tensor-side primitives (real/buffers.py, real/executor.py): buffers, local ops,
fragments and launched collectives with their Waits.

In-process, without processes: local ops run in program order on the rank's buffers, over the hook's
region or a fragment's buckets; a collective on a fragment runs on the fragment's ranges laid end to
end and its result lands back in exactly those ranges; a launched collective ends its item at once and
its Wait blocks until it has completed; bad handles and fragments are refused naming the policy, rank,
step and handle; the validator refuses an undeclared buffer.

On gloo processes (slow: one launch of 4 workers): DiLoCo (wire unset, int8 with error feedback, and a
replica per host), Streaming DiLoCo (2 fragments of 2 buckets each, overlap 1) and PowerSGD (rank 2) end
with numerics mode's parameters (`simulate`), and with those of an in-process reference that uses numerics mode's
replicas only for batches, gradients, local steps and gradient collectives (`Replicas`), applies the
policy's local ops by `TensorStore` and computes the collectives on buffers by hand, as the rules of
policies/ops.py and local_ops.py say."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import pandas as pd
import pytest
import yaml

torch = pytest.importorskip("torch")

from policies.ops import AllReduce, Combine, Encode, Group, Payload, ReduceScatter, Wait  # noqa: E402
from policies.tensors import Buffer, Codec, Fragment  # noqa: E402
from real import executor as ex  # noqa: E402
from real.buffers import RankTensors  # noqa: E402
from real.collectives import Started  # noqa: E402
from sim.engine.op_checks import OpValidator  # noqa: E402
from sim.errors import PolicyError  # noqa: E402

N = 12
RANGES = [(9, 12), (6, 9), (3, 6), (0, 3)]  # bucket 0 at the end of the vector (replica.bucket_ranges)


class FakeReplica:
    """What the executor and RankTensors use of a `Replica`: tensors, bucket ranges, `arrive`."""

    def __init__(self) -> None:
        self.rank, self.policy, self.wire = 0, "test", None
        self.params = torch.arange(N, dtype=torch.float32)
        self.grads = torch.zeros(N)
        self.ranges = list(RANGES)
        self.arrived: list[Any] = []

    def range(self, bucket: Optional[int]) -> tuple[int, int]:
        return (0, N) if bucket is None else self.ranges[bucket]

    def arrive(self, op: Any, bucket: Optional[int]) -> None:
        self.arrived.append(op)

    def pop_slice(self, bucket: Optional[int]) -> None:
        return None


class HeldWork:
    def __init__(self, hold: Optional[threading.Event]) -> None:
        self.hold = hold

    def wait(self) -> bool:
        if self.hold is not None:
            assert self.hold.wait(10)
        return True


def executor(monkeypatch: pytest.MonkeyPatch, hold: Optional[threading.Event] = None) -> tuple[Any, list]:
    """A rank whose collectives (on a group of two) multiply the values they act on by 10, once their
    work, which `hold` keeps from finishing until it is set, has finished; `seen` lists what each saw."""
    replica = FakeReplica()
    seen: list[Any] = []

    def fake_start(op: Any, target: Any, bucket: Any, pg: Any, shares: Any) -> Started:
        a, b = target.range(bucket)
        data = target.data(op)
        seen.append((op, data[a:b].clone()))
        return Started(HeldWork(hold), lambda: data[a:b].mul_(10), 4 * (b - a))

    monkeypatch.setattr(ex, "start", fake_start)
    groups = SimpleNamespace(get=lambda group: "pg")
    validator = OpValidator("test", 2, 0, buffers=["anchor", "delta"], buckets=len(RANGES))
    rank = ex.RankExecutor(0, "test", groups, replica, [], None, 10.0, validator)  # type: ignore[arg-type]
    rank.tensors = RankTensors(replica, [Buffer("anchor", initial="parameters"), Buffer("delta")])  # type: ignore[arg-type]
    return rank, seen


PAIR = Group((0, 1))
HALF = Fragment(1, 2)  # buckets 1 and 3: elements 6..9 and 0..3


def test_local_ops_run_in_program_order_on_the_region_or_the_fragment(monkeypatch: pytest.MonkeyPatch) -> None:
    rank, _ = executor(monkeypatch)
    params = rank.replica.params.clone()
    rank.run(
        0,
        [
            (
                [
                    Combine("parameters", ((2.0, "parameters"),)),  # whole model
                    Combine("delta", ((1.0, "anchor"), (-1.0, "parameters")), fragment=HALF),  # reads the doubled
                ],
                None,
            ),
        ],
    )
    expected = torch.zeros(N)
    for a, b in ((6, 9), (0, 3)):
        expected[a:b] = params[a:b] - 2 * params[a:b]
    assert torch.equal(rank.tensors.store.tensor("delta"), expected)
    assert torch.equal(rank.replica.params, 2 * params)


def test_a_bucket_hooks_local_op_acts_on_its_bucket(monkeypatch: pytest.MonkeyPatch) -> None:
    rank, _ = executor(monkeypatch)
    rank.run(0, [([Combine("delta", ((1.0, "parameters"),))], 2)])
    delta = rank.tensors.store.tensor("delta")
    assert torch.equal(delta[3:6], torch.tensor([3.0, 4.0, 5.0])) and int((delta != 0).sum()) == 3


def test_a_collective_on_a_fragment_runs_on_its_ranges_end_to_end_and_writes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rank, seen = executor(monkeypatch)
    rank.run(0, [([AllReduce(PAIR, 24.0, payload=Payload.PARAMETERS, tensor="anchor", fragment=HALF)], None)])
    ((op, values),) = seen
    assert values.tolist() == [6.0, 7.0, 8.0, 0.0, 1.0, 2.0]  # bucket 1, then bucket 3
    anchor = rank.tensors.store.tensor("anchor")
    assert anchor.tolist() == [0.0, 10.0, 20.0, 3, 4, 5, 60.0, 70.0, 80.0, 9, 10, 11]
    assert torch.equal(rank.replica.params, torch.arange(N, dtype=torch.float32))  # another buffer


def test_a_collective_on_a_buffer_acts_on_the_hooks_region(monkeypatch: pytest.MonkeyPatch) -> None:
    rank, seen = executor(monkeypatch)
    rank.run(0, [([AllReduce(PAIR, 12.0, tensor="anchor")], 1)])
    assert seen[0][1].tolist() == [6.0, 7.0, 8.0]
    assert rank.tensors.store.tensor("anchor")[6:9].tolist() == [60.0, 70.0, 80.0]
    assert torch.equal(rank.replica.grads, torch.zeros(N))


def test_a_launched_collective_ends_its_item_and_its_wait_blocks_until_it_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hold = threading.Event()
    rank, seen = executor(monkeypatch, hold)
    launch = AllReduce(PAIR, 24.0, tensor="delta", fragment=HALF, handle="h")
    # the launch's item ends at once: the local op after it runs while the all-reduce is held
    rank.run(0, [([Combine("delta", ((1.0, "parameters"),)), launch, Combine("anchor", ((0.0, "anchor"),))], None)])
    assert len(seen) == 1 and rank.tensors.store.tensor("anchor").abs().sum() == 0
    assert rank.tensors.store.tensor("delta")[6:9].tolist() == [6.0, 7.0, 8.0]  # not yet written back
    threading.Timer(0.3, hold.set).start()
    begun = time.perf_counter()
    rank.run(1, [([Wait("h"), Combine("parameters", ((1.0, "delta"),), fragment=HALF)], None)])
    assert time.perf_counter() - begun >= 0.25
    assert rank.replica.params.tolist()[6:9] == [60.0, 70.0, 80.0] and rank.replica.params.tolist()[0:3] == [0, 10, 20]
    assert rank.blocked == []  # a Wait's blocked time is found with the other members' issue times
    (record,) = rank.collectives
    assert record[0] == 0 and record[9] == 1  # launched at step 0, waited for in step 1
    assert begun <= record[10] <= begun + 0.1 and record[7] >= record[10] + 0.25


def test_a_wait_is_blocked_until_the_last_member_issues_the_call() -> None:
    """Hand-derived (the simulator's rule, sim/engine/communicators.py): rank 0 launched at 1.0 and began
    to Wait at 2.0; rank 1 issued at 2.5 and the call finished at 3.0. Rank 0 was blocked 0.5 s in the
    Wait's step 1 (not from its launch); rank 1, which issued last, not at all; the Wait's last 0.5 s is
    communication. A launch never waited for blocks nothing."""
    from real.accounting import RankReport, account

    key = (0, 1)
    reports = [RankReport(0), RankReport(1)]
    reports[0].collectives = [
        (0, 0, key, 0, "AllReduce", 4, 1.0, 3.0, -1, 1, 2.0),
        (0, 0, key, 1, "AllReduce", 4, 3.0, 4.0, -1, -1, 0.0),
    ]
    reports[1].collectives = [
        (1, 1, key, 0, "AllReduce", 4, 2.5, 3.0, -1, 1, 2.5),
        (1, 1, key, 1, "AllReduce", 4, 3.5, 4.0, -1, -1, 0.0),
    ]
    reports[0].rows = [(0, 0, 0.0, 0.0, 0.0, 0.5, 1.5, 0.5, 0.0, 0), (1, 0, 1.5, 1.5, 1.5, 1.9, 3.2, 0.4, 0.0, 0)]
    reports[1].rows = [(1, 1, 1.5, 1.5, 1.5, 2.4, 3.2, 0.9, 0.0, 0)]
    rows, ops = account(reports)
    waits = {(r[0], r[1]): r[8] for r in rows}
    assert waits == {(0, 0): 0.0, (1, 0): pytest.approx(0.5), (1, 1): 0.0}
    assert len(ops) == 2


def test_drain_finishes_a_launch_nobody_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    hold = threading.Event()
    rank, _ = executor(monkeypatch, hold)
    rank.run(0, [([AllReduce(PAIR, 12.0, tensor="delta", handle="h")], None)])
    threading.Timer(0.2, hold.set).start()
    rank.drain()
    assert len(rank.collectives) == 1 and rank.tensors.store.tensor("delta").tolist()[0] == 0.0
    rank.run(1, [([AllReduce(PAIR, 12.0, tensor="delta", handle="h")], None)])  # the handle is free again


def test_launched_ops_keep_their_groups_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch still waiting for its group goes out before a later op of the group, in a later run."""
    hold = threading.Event()
    rank, seen = executor(monkeypatch, hold)
    first = AllReduce(PAIR, 12.0, tensor="delta", handle="a")
    second = AllReduce(PAIR, 12.0, tensor="anchor", handle="b")
    rank.run(0, [([first, second], None)])
    assert [op for op, _ in seen] == [first]  # the group runs one at a time
    hold.set()
    rank.run(1, [([Wait("b"), Wait("a")], None)])
    assert [op for op, _ in seen] == [first, second]


@pytest.mark.parametrize(
    ("programs", "message"),
    [
        ([([Wait("h")], None)], r"Wait\(handle='h'\) on rank 0 at step 3: no collective launched with handle 'h'"),
        (
            [([AllReduce(PAIR, 12.0, handle="h")], None), ([AllReduce(PAIR, 12.0, handle="h")], None)],
            r"handle='h', algorithm='ring'\) on rank 0 at step 3: handle 'h' was launched at step 3 and not waited for",
        ),
        (
            [([Combine("delta", ((1.0, "parameters"),), fragment=HALF)], 1)],
            r"on rank 0 at step 3: a fragment narrows ops of whole-model hooks .* bucket 1's hook",
        ),
        (
            [([ReduceScatter(PAIR, 12.0, fragment=HALF)], None)],
            r"on rank 0 at step 3: ReduceScatter on a fragment; a fragment narrows a dense AllReduce only",
        ),
        (
            [([Encode("nothing", Codec(wire="int8"))], None)],
            r"Encode\(source='nothing'.* at step 3: no buffer 'nothing'",
        ),
    ],
)
def test_bad_handles_fragments_and_buffers_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, programs: list, message: str
) -> None:
    rank, _ = executor(monkeypatch, threading.Event())
    with pytest.raises(PolicyError, match=r"^policy 'test' yielded .*" + message):
        rank.run(3, programs)


def test_buffers_are_made_like_the_replicas_parameters() -> None:
    replica = FakeReplica()
    replica.params = replica.params.to(torch.float64)  # stands in for another device: what like-copies keep
    tensors = RankTensors(replica, [Buffer("anchor", initial="parameters"), Buffer("delta")])  # type: ignore[arg-type]
    assert (
        tensors.store.tensor("anchor").dtype == torch.float64 and tensors.store.tensor("delta").dtype == torch.float64
    )
    assert tensors.store.tensor("parameters") is replica.params


# ------------------------------------------------------------------------------------ on gloo processes
POLICIES = [
    {"name": "diloco", "period": 3, "warmup_steps": 2, "outer_lr": 0.7, "outer_momentum": 0.9},
    {"name": "diloco", "label": "diloco_int8", "period": 3, "warmup_steps": 2, "wire": "int8", "error_feedback": True},
    # a replica per host of 2 ranks: the pseudo-gradient's 2-D average (reduce-scatter, all-reduce, all-gather)
    {"name": "diloco", "label": "diloco_hosts", "period": 3, "warmup_steps": 2, "replica": "host"},
    # P = 2 fragments of the model's 4 buckets (two ranges each), H = 4, tau = 1, alpha = 0.5
    {"name": "streaming_diloco", "period": 4, "warmup_steps": 1, "fragments": 2, "overlap_steps": 1},
    # rank-2 factors of every bucket's tensors (numerics mode's cuts of the MLP's) after 2 plain steps
    {"name": "powersgd", "rank": 2, "warmup_steps": 2, "min_compression_rate": 1.0},
]
# diloco: outer steps after steps 4, 7, 10; streaming: fragment 1 launches after 2, 6, 10, fragment 0 after 4,
# 8 and 12 (never waited for: `drain` finishes it)
ITERATIONS = 13


def config_path(tmp_path: Path, policies: Optional[list[dict[str, Any]]] = None, gpus: Optional[int] = None) -> Path:
    """test_real_backend's config (4 workers: 2 racks of a host of 2 GPUs) with 4 buckets of one layer
    each; `gpus`: one host of that many GPUs instead."""
    from test_real_backend import write_config

    path = write_config(tmp_path, POLICIES if policies is None else policies, iterations=ITERATIONS)
    data = yaml.safe_load(path.read_text())
    data["workload"]["bucket_mb"] = 0.25
    if gpus is not None:
        data["cluster"] = {"topology": "star", "hosts": 1, "gpus_per_host": gpus, "nic_gbps": 0.2}
    path.write_text(yaml.safe_dump(data))
    return path


def buffer_mean(op: AllReduce, values: list[Any]) -> Any:
    """What every member holds after `op` on the members' `values` (a region laid end to end): the fp32
    mean, or with a wire the chunks reduced as wire_cast says (policies/ops.py, docs/policies.md)."""
    p = len(values)
    if op.wire is None:
        return torch.stack(values).mean(dim=0)
    from sim.numerics.wire_cast import reduced_chunk

    parts = partition(0, values[0].numel(), [1.0] * p)
    reduced = [
        reduced_chunk([v[a:b] for v in values], c, op.wire, op.block, True) / p for c, (a, b) in enumerate(parts)
    ]
    return torch.cat(reduced)


def partition(a: int, b: int, weights: list[float]) -> list[tuple[int, int]]:
    from sim.numerics.replica import partition as split

    return split(a, b, weights)


def buffer_collective(op: Any, rows: dict[int, Any], regions: dict[int, Any], replicas: dict[int, Any]) -> None:
    """`op` on the members' buffer `rows` (rank -> flat tensor) over their `regions` (rank -> ranges): an
    AllReduce of the ranges laid end to end, and in fp32 a ReduceScatter (member i keeps the mean of the
    i-th 1/p of its range, and later ops of the hook act on it: the replica's slice) and an AllGather
    (the slices gathered back into the enclosing range)."""
    members = op.group.ranks
    p = len(members)
    if isinstance(op, AllReduce):
        values = [torch.cat([rows[r][a:b] for a, b in regions[r]]) for r in members]
        mean = buffer_mean(op, values)
        for r in members:
            at = 0
            for a, b in regions[r]:
                rows[r][a:b] = mean[at : at + b - a]
                at += b - a
        return
    assert op.wire is None and all(len(regions[r]) == 1 for r in members)
    if isinstance(op, ReduceScatter):
        parts = {r: partition(*regions[r][0], [1.0] * p) for r in members}
        means = [torch.stack([rows[q][slice(*parts[q][i])] for q in members]).mean(dim=0) for i in range(p)]
        for i, r in enumerate(members):
            rows[r][slice(*parts[r][i])] = means[i]
            replicas[r].push_slice(None, parts[r][i])
        return
    parts = {}
    for r in members:
        enclosing = replicas[r].pop_slice(None)
        parts[r] = partition(*enclosing, [1.0] * p)
    held = [rows[r][slice(*parts[r][i])].clone() for i, r in enumerate(members)]
    for r in members:
        for i in range(p):
            rows[r][slice(*parts[r][i])] = held[i]


def reference(path: Path, label: str) -> Any:
    """Every worker's final parameters, run in one process: numerics mode's replicas for batches,
    gradients, local steps and the gradient collectives; the policy's local ops by `TensorStore`; a
    collective on a buffer as `buffer_collective` says, on the values when the policy reaches it (a
    launch: its Wait comes later, and the policy touches neither tensor before it)."""
    from policies.base import Bucket
    from policies.ops import Collective, LocalOp
    from sim.api import _prepare
    from sim.config import load_config
    from sim.engine.run import bind_policy
    from sim.numerics.local_ops import TensorStore, op_ranges, phase_buffers
    from sim.numerics.replicas import Replicas

    config = load_config(path)
    index = [entry.display for entry in config.policies].index(label)
    entry = config.policies[index]
    cluster, plan, task = _prepare(config)
    policy = bind_policy(entry, index, cluster, plan, config.workload.wire_precision)
    world, cfg = cluster.world_size, config.numerics
    reps = Replicas(cfg, task, world, [b.nbytes for b in plan.buckets], config.iterations, config.seed, label, False)
    buffers = phase_buffers(policy.phase_policies())
    stores = [TensorStore(reps.params[r], reps.grads[r], buffers) for r in range(world)]
    buckets = [Bucket(b, bucket.nbytes, len(plan.buckets)) for b, bucket in enumerate(plan.buckets)]

    def run(programs: list[Any], bucket: Optional[int]) -> None:
        """The ranks' programs of one hook, op by op in lockstep (every rank yields as many ops, in the
        same order; a collective's members are in the same column)."""
        ops = [[op for item in program for op in ex.step_ops(item)] for program in programs]
        assert all(len(o) == len(ops[0]) for o in ops)
        for column in zip(*ops):
            if isinstance(column[0], LocalOp):
                for r, op in enumerate(column):
                    stores[r].apply(op, op_ranges(reps.ranges, reps.replicas[r].range(bucket), op.fragment))
                continue
            if isinstance(column[0], Wait):  # the launched op was carried out when the policy reached it
                continue
            assert all(isinstance(op, Collective) for op in column)
            for op in {op.group: op for op in column}.values():  # one op per group
                members = op.group.ranks
                if op.tensor is None:
                    for r in members:
                        reps.arrive(r, op, bucket)
                    reps.collective_done(op, {r: bucket for r in members})
                else:
                    rows = {r: stores[r].tensor(op.buffer) for r in members}
                    region = {r: op_ranges(reps.ranges, reps.replicas[r].range(bucket), op.fragment) for r in members}
                    buffer_collective(op, rows, region, {r: reps.replicas[r] for r in members})

    for step in range(config.iterations):
        run([policy.begin_step(r, step) for r in range(world)], None)
        for r in range(world):
            reps.forward_done(r, step)
        for b in buckets:
            run([policy.on_gradients(r, step, b) for r in range(world)], b.index)
        for r in range(world):
            reps.step_done(r, step)
        run([policy.end_step(r, step) for r in range(world)], None)
    return reps.params.numpy().copy()


@pytest.mark.slow
def test_diloco_streaming_diloco_and_powersgd_on_gloo_end_with_the_references_parameters(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    from real.launch import launch
    from sim.api import simulate

    path = config_path(tmp_path)
    outcome = launch(path, tmp_path / "out", nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    runs = simulate(path).runs
    simulated = {run.label: run.parameters for run in runs}
    for label in ("diloco", "diloco_int8", "diloco_hosts", "streaming_diloco"):
        workers = real[f"{label}/workers"]
        np.testing.assert_allclose(workers, reference(path, label), rtol=1e-5, atol=1e-6, err_msg=label)
        np.testing.assert_allclose(workers, simulated[label], rtol=1e-5, atol=1e-6, err_msg=label)
        assert not np.allclose(workers[0], workers[2])  # local steps since the last outer step
    # powersgd: factor buffers per bucket region, their all-reduces and factor ops as numerics mode does them
    workers = real["powersgd/workers"]
    np.testing.assert_allclose(workers, simulated["powersgd"], rtol=1e-5, atol=1e-6, err_msg="powersgd")
    np.testing.assert_allclose(workers[0], workers[3], rtol=1e-6, atol=1e-7)  # replicas agree: one gradient each step
    # the model scored is each policy's global one (its anchor), as numerics mode scores it
    for run in runs:
        if run.label == "powersgd":
            continue
        consensus = real[f"{run.label}/consensus"]
        np.testing.assert_allclose(consensus, run.consensus, rtol=1e-5, atol=1e-6, err_msg=run.label)
        assert not np.allclose(consensus, real[f"{run.label}/workers"].mean(axis=0), atol=1e-6)
    accuracy = pd.read_csv(tmp_path / "out" / "accuracy.csv")
    consensus_rows = accuracy[accuracy["worker"] < 0]
    assert set(consensus_rows.loc[consensus_rows["policy"] != "powersgd", "scored"]) == {"anchor"}
    assert set(consensus_rows.loc[consensus_rows["policy"] == "powersgd", "scored"]) == {"mean"}


def test_a_phase_switch_restarts_the_buffers_and_the_policys_optimizers() -> None:
    from policies.ops import OptimizerStep
    from policies.tensors import Optimizer

    replica = FakeReplica()
    tensors = RankTensors(replica, [Buffer("anchor", initial="parameters"), Buffer("delta")])  # type: ignore[arg-type]
    tensors.store.tensor("delta").fill_(1.0)
    tensors.apply(OptimizerStep("anchor", "delta", Optimizer("sgd", lr=0.5, momentum=0.9)), None)
    assert tensors.store.states  # momentum kept
    model = torch.full((N,), 7.0)
    tensors.restart(model)
    assert torch.equal(tensors.store.tensor("anchor"), model) and tensors.store.tensor("delta").abs().sum() == 0
    assert tensors.store.states == {}
