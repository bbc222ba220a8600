"""Sparse ops on the real backend: the pair exchanges of `real/sparse_collectives.py` (in-process,
with a stand-in for gloo's all_to_all_single), the sparse frames of `real/protocol.py`, a shard's
sparse replies, SparCML's dense switch and OmniReduce's blocks, and one gloo launch of zen,
sparse_allgather, sparse_ps, sparcml and omnireduce on DeepFM that must end where numerics mode does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

import torch.distributed as dist  # noqa: E402

from policies.ops import AllGather, AllReduce, AllToAll, Density, Group, ServerSpec, SparseCoding  # noqa: E402
from real import protocol as wire  # noqa: E402
from real.collectives import start  # noqa: E402
from real.groups import group_order  # noqa: E402
from real.launch import launch  # noqa: E402
from real.server import ShardServer  # noqa: E402
from real.sparse_codec import Codec  # noqa: E402
from sim.api import simulate  # noqa: E402
from sim.compute.sparse_traffic import message_bytes  # noqa: E402
from sim.config.numerics import NumericsConfig  # noqa: E402
from sim.errors import PolicyError  # noqa: E402
from sim.numerics.replicas import Replicas  # noqa: E402
from sim.numerics.servers import ServerTensors  # noqa: E402
from sim.numerics.sparse_rules import Pairs, reduce_pairs, scatter, split_by_owner  # noqa: E402
from sim.numerics.tasks import Task  # noqa: E402

CONFIG = Path(__file__).parent.parent / "configs" / "real_zen_deepfm.yaml"
SIZE = 50  # elements of the test bucket


# ----------------------------------------------------------------------------- in-process exchanges
class _World:
    """What the members of one in-process group hand each other through `_all_to_all_single`."""

    def __init__(self, p: int) -> None:
        self.p, self.barrier, self.inputs = p, threading.Barrier(p, timeout=10), [[] for _ in range(p)]
        self.calls = 0


@dataclass(frozen=True)
class _Group:
    world: _World
    rank: int  # torch's rank in the group


def _all_to_all_single(
    output: Any, input: Any, output_split_sizes: Any = None, input_split_sizes: Any = None, group: Any = None
) -> None:
    """gloo's all_to_all_single between threads: chunk r of member s's input lands in r's output."""
    world, me = group.world, group.rank
    splits = input_split_sizes or [input.numel() // world.p] * world.p
    world.inputs[me] = list(input.split(splits))
    world.barrier.wait()
    output.copy_(torch.cat([world.inputs[s][me] for s in range(world.p)]))
    if me == 0:
        world.calls += 1
    world.barrier.wait()


@dataclass
class _Replica:
    """What a collective reads of a `Replica`: rank, policy, the gradient and the bucket's range."""

    rank: int
    grads: Any
    bounds: tuple[int, int]
    policy: str = "zen"
    shares: dict = field(default_factory=dict)
    wire: Any = None  # the type gradients travel in (a `Replica`'s)

    def data(self, op: Any) -> Any:
        return self.grads

    def range(self, bucket: Optional[int]) -> tuple[int, int]:
        return self.bounds


def _members(ranks: tuple[int, ...], seed: int = 0) -> dict[int, _Replica]:
    """Sparse gradients (about a third non-zero) of the ranks, the bucket at [10, 10 + SIZE)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for r in ranks:
        grads = torch.randn(80, generator=gen)
        grads[torch.rand(80, generator=gen) > 0.35] = 0.0
        out[r] = _Replica(r, grads, (10, 10 + SIZE))
    return out


def _run(op: Any, replicas: dict[int, _Replica], monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Issue `op` on every member, each waiting in its own thread (as the executor's waiters do),
    then finish; returns the bytes each member sent."""
    monkeypatch.setattr(dist, "all_to_all_single", _all_to_all_single)
    world = _World(op.group.size)
    order = group_order(op.group)
    torch_rank = {op.group.ranks[i]: t for t, i in enumerate(order)}
    started = {r: start(op, rep, 0, _Group(world, torch_rank[r]), rep.shares) for r, rep in replicas.items()}
    threads = [threading.Thread(target=s.work.wait) for s in started.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert world.calls == 2  # the sizes, then the pairs
    for s in started.values():
        s.finish()
    return {r: s.nbytes for r, s in started.items()}


@pytest.mark.parametrize("partition", ["hash", "contiguous"])
def test_zen_all_to_all_then_all_gather_is_numerics_rule_in_member_order(
    partition: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = Group((2, 0, 3, 1))  # torch numbers members by global rank: a non-trivial order
    coding = SparseCoding(partition, "list", 4)
    replicas = _members(group.ranks)
    before = {r: rep.grads.clone() for r, rep in replicas.items()}
    pairs = [Pairs.of(before[r][10 : 10 + SIZE]) for r in group.ranks]  # the op's member order
    sent = [split_by_owner(mine, coding, 4, SIZE) for mine in pairs]
    shares = [reduce_pairs([sent[i][j] for i in range(4)], SIZE, 4) for j in range(4)]  # Replicas._sparse

    a2a = AllToAll(group, 400.0, density=Density.SPARSE, coding=coding)
    sent_bytes = _run(a2a, replicas, monkeypatch)
    for j, r in enumerate(group.ranks):
        assert torch.equal(replicas[r].grads, before[r])  # an AllToAll leaves the bucket as it was
        assert torch.equal(replicas[r].shares[0].index, shares[j].index)
        assert torch.equal(replicas[r].shares[0].values, shares[j].values)
        others = sum(len(sent[j][k].index) for k in range(4) if k != j)
        assert sent_bytes[r] == 8 * others + 8 * 3  # 4-byte ids and values, then 8-byte sizes per peer

    _run(AllGather(group, 400.0, density=Density.SPARSE, coding=coding), replicas, monkeypatch)
    expected = scatter(shares, SIZE, torch.float32)
    mean = torch.stack([before[r][10 : 10 + SIZE] for r in group.ranks]).mean(0)
    torch.testing.assert_close(expected, mean)  # the rule: a dense all-reduce mean, up to float order
    for r, rep in replicas.items():
        assert torch.equal(rep.grads[10 : 10 + SIZE], expected)
        assert torch.equal(rep.grads[:10], before[r][:10]) and not rep.shares  # outside the bucket: untouched


@pytest.mark.parametrize("coding", [SparseCoding("contiguous", "list", 4, dense_switch=True),
                                    SparseCoding("contiguous", "list", 4, block=8)])  # fmt: skip
def test_sparcml_and_omnireduce_codings_move_dense_ranges_or_blocks_and_give_the_mean(
    coding: SparseCoding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SparCML's switch: a message whose pairs take as many floats as its owner's range goes as the
    range's values (the gathered union, 1 - 0.65^4 = 82% dense, always does). OmniReduce's blocks:
    each non-zero block of 8 moves whole with its id. Either way the bucket ends as the mean."""
    group = Group((2, 0, 3, 1))
    replicas = _members(group.ranks, seed=2)
    before = {r: rep.grads[10 : 10 + SIZE].clone() for r, rep in replicas.items()}
    blocks = -(-SIZE // 8)
    bounds = [-(-j * SIZE // 4) for j in range(5)] if coding.dense_switch else [-(-j * blocks // 4) for j in range(5)]
    a2a_bytes = _run(AllToAll(group, 400.0, density=Density.SPARSE, coding=coding), replicas, monkeypatch)
    gather_bytes = _run(AllGather(group, 400.0, density=Density.SPARSE, coding=coding), replicas, monkeypatch)
    mean = torch.stack([before[r] for r in group.ranks]).mean(0)
    union = torch.stack([before[r] != 0 for r in group.ranks]).any(0)
    for j, r in enumerate(group.ranks):
        torch.testing.assert_close(replicas[r].grads[10 : 10 + SIZE], mean)
        nonzero = torch.nonzero(before[r]).flatten()
        if coding.dense_switch:
            span = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
            count = [int(((nonzero >= lo) & (nonzero < hi)).sum()) for lo, hi in zip(bounds, bounds[1:])]
            assert a2a_bytes[r] == sum(4 * min(2 * c, s) for k, (c, s) in enumerate(zip(count, span)) if k != j) + 24
            assert int(union[bounds[j] : bounds[j + 1]].sum()) * 2 >= span[j]  # the union's range went dense
            assert gather_bytes[r] == 3 * 4 * span[j] + 24
        else:
            touched = torch.unique(nonzero // 8)
            owned = [int(((touched >= lo) & (touched < hi)).sum()) for lo, hi in zip(bounds, bounds[1:])]
            assert a2a_bytes[r] == sum(4 * 9 * c for k, c in enumerate(owned) if k != j) + 24
            mine = torch.unique(torch.nonzero(union).flatten() // 8)
            held = int(((mine >= bounds[j]) & (mine < bounds[j + 1])).sum())
            assert gather_bytes[r] == 3 * 4 * 9 * held + 24


def test_sparse_all_gather_without_partition_reduces_every_members_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    group = Group((1, 3, 0))
    coding = SparseCoding("none", "list", 8)
    replicas = _members(group.ranks, seed=1)
    pairs = [Pairs.of(replicas[r].grads[10 : 10 + SIZE].clone()) for r in group.ranks]
    expected = scatter([reduce_pairs(pairs, SIZE, 3)], SIZE, torch.float32)
    sent_bytes = _run(AllGather(group, 400.0, density=Density.SPARSE, coding=coding), replicas, monkeypatch)
    for j, r in enumerate(group.ranks):
        assert torch.equal(replicas[r].grads[10 : 10 + SIZE], expected)
        assert sent_bytes[r] == 2 * 12 * len(pairs[j].index) + 8 * 2  # to both peers: 8-byte ids + values


def test_a_group_of_one_applies_the_rule_locally_and_sends_nothing() -> None:
    (replica,) = _members((0,)).values()
    before = replica.grads.clone()
    coding = SparseCoding("hash", "list", 4)
    for op in (AllToAll(Group((0,)), 8.0, density=Density.SPARSE, coding=coding),
               AllGather(Group((0,)), 8.0, density=Density.SPARSE, coding=coding)):  # fmt: skip
        started = start(op, replica, 0, None, replica.shares)
        assert started.work is None and started.nbytes == 0
        started.finish()
    assert torch.equal(replica.grads, before)


def test_a_gather_of_shares_nobody_reduced_and_a_dense_all_to_all_are_refused() -> None:
    replica = _members((0, 1))[0]
    coding = SparseCoding("hash", "list", 4)
    with pytest.raises(PolicyError, match="policy 'zen'.*no sparse AllToAll on bucket 0"):
        start(AllGather(Group((0, 1)), 8.0, density=Density.SPARSE, coding=coding), replica, 0, "pg", {})
    with pytest.raises(PolicyError, match="policy 'zen'.*dense AllToAll"):
        start(AllToAll(Group((0, 1)), 8.0), replica, 0, "pg", {})
    with pytest.raises(PolicyError, match="policy 'zen'.*sparse rule for AllReduce"):
        start(AllReduce(Group((0, 1)), 8.0, density=Density.SPARSE, coding=coding), replica, 0, "pg", {})


@pytest.mark.parametrize("coding", [SparseCoding("hash", "list", 4),
                                    SparseCoding("contiguous", "list", 4, dense_switch=True),
                                    SparseCoding("contiguous", "list", 8, block=10),
                                    SparseCoding("none", "list", 8)])  # fmt: skip
def test_fp16_pairs_take_2_bytes_a_value_as_the_simulator_counts_and_end_where_numerics_mode_does(
    coding: SparseCoding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under gradient_precision fp16 a pair's value travels in 16 bits: every message is the bytes
    `sim.compute.sparse_traffic.message_bytes` counts for it at 2 bytes a value, and the bucket ends
    as numerics mode's (which rounds the same values), not as it would in fp32."""
    cfg = NumericsConfig(model="logreg", global_batch=16)
    task = Task(cfg, 0)
    n, p, w = task.size, 4, coding.block or 1  # 650 elements: 65 blocks of 10
    gen = torch.Generator().manual_seed(7)
    grads = 1.0 + torch.randn(p, n, generator=gen) * 1e-3  # fp16 keeps 11 bits: the rounding shows
    grads[torch.rand(p, n, generator=gen) > 0.35] = 0.0
    group = Group((2, 0, 3, 1))
    replicas = {r: _Replica(r, grads[r].clone(), (0, n), wire=torch.float16) for r in range(p)}
    numerics = Replicas(cfg, task, p, (1.0,), 10, 0, "zen", False, gradient_precision="fp16")
    numerics.grads.copy_(grads)
    ops = [AllToAll(group, 2.0 * n, density=Density.SPARSE, coding=coding)] if coding.partition != "none" else []
    ops.append(AllGather(group, 2.0 * n, density=Density.SPARSE, coding=coding))
    sent = [_run(op, replicas, monkeypatch) for op in ops]
    for op in ops:
        numerics.collective_done(op, {r: 0 for r in range(p)})
    for r in range(p):
        assert torch.equal(replicas[r].grads, numerics.grads[r])
    assert (replicas[0].grads - grads.mean(0)).abs().max() > 1e-4  # fp32 pairs would give the mean

    def units(index: Any) -> int:  # rows, or blocks holding a non-zero
        return len(torch.unique(index // w))

    def simulated(rows: int, owner: Optional[int], codec: Codec) -> int:  # the simulator's bytes, 2 a value
        dense = np.array(2.0 * len(codec.share(owner))) if coding.dense_switch else None
        return int(message_bytes(np.array(2.0 * w * rows), np.array(rows), 0, coding, dense))

    if coding.partition == "none":
        codec = Codec(coding, 1, n)
        for r in range(p):
            assert sent[0][r] == 3 * simulated(units(torch.nonzero(grads[r]).flatten()), None, codec) + 24
        return
    codec = Codec(coding, p, n)
    union = torch.nonzero((grads != 0).any(0)).flatten()
    for j, r in enumerate(group.ranks):
        mine = split_by_owner(Pairs.of(grads[r]), coding, p, n)
        assert sent[0][r] == sum(simulated(units(mine[k].index), k, codec) for k in range(p) if k != j) + 24
        held = split_by_owner(Pairs(union, union.float()), coding, p, n)[j]
        assert sent[1][r] == 3 * simulated(units(held.index), j, codec) + 24


def test_a_codec_packs_16_bit_values_two_a_slot() -> None:
    coding = SparseCoding("hash", "list", 4)
    pairs = Pairs(torch.tensor([1, 4, 9]), torch.tensor([0.5, -1.25, 3.0]))
    fp32, fp16 = Codec(coding, 1, 20), Codec(coding, 1, 20, torch.float16)
    assert fp32.pack(pairs, None).numel() == 6 and fp16.pack(pairs, None).numel() == 3 + 2  # ids, then values
    assert fp32.nbytes(fp32.pack(pairs, None), None) == 24 and fp16.nbytes(fp16.pack(pairs, None), None) == 18
    back = fp16.unpack(fp16.pack(pairs, None), None)
    assert torch.equal(back.index, pairs.index) and torch.equal(back.values, pairs.values)


# ----------------------------------------------------------------------------- frames
@pytest.mark.parametrize("index_bytes", [4, 8])
def test_pairs_travel_as_ids_then_values(index_bytes: int) -> None:
    index = torch.tensor([0, 3, 2**20 + 1, 2**31 - 1] if index_bytes == 4 else [5, 2**40 + 9])
    values = torch.linspace(-1, 1, len(index))
    packed = wire.pack_pairs(index, values, index_bytes)
    assert packed.dtype == torch.float32 and packed.numel() == wire.pair_floats(len(index), index_bytes)
    ids, vals = wire.unpack_pairs(packed, index_bytes)
    assert torch.equal(ids, index) and torch.equal(vals, values)


def test_a_sparse_push_carries_the_non_zero_values_or_the_range_when_pairs_do_not_fit() -> None:
    grads = torch.zeros(40)
    grads[[1, 7, 30]] = torch.tensor([0.5, -2.0, 3.0])
    message = wire.sparse_push(4, 100, 140, grads, 4, room=1000)
    assert message.numel() == wire.HEADER_FLOATS + 6  # three ids and three values
    assert wire.header_of(message)[:4] == (wire.Kind.SPARSE_PUSH, 4, 100, 140)
    buffer = torch.full((wire.HEADER_FLOATS + 1000,), float("nan"))  # a shard's posted receive
    buffer[: message.numel()] = message
    assert torch.equal(wire.sparse_values_of(buffer, 100, 140), grads)
    dense = wire.sparse_push(4, 100, 140, grads, 8, room=8)  # 3 pairs of 8-byte ids take 9 floats
    assert dense.numel() == wire.HEADER_FLOATS + 40 and wire.header_of(dense)[4] == -1
    assert torch.equal(wire.sparse_values_of(dense, 100, 140), grads)


def test_a_shard_answers_a_sparse_pull_with_the_rows_its_round_touched() -> None:
    cfg = NumericsConfig(optimizer={"name": "sgd", "lr": 0.5, "momentum": 0})
    initial = torch.arange(20, dtype=torch.float32)
    server = ShardServer(ServerSpec(0, "h0"), 2, ServerTensors(cfg, initial, 2, 10), coordinator=False, claims=None)
    sent: list[tuple[Any, int, int]] = []
    server._send = lambda tensor, dst, tag: sent.append((tensor, dst, tag))  # type: ignore[method-assign]
    server._pull(1, 3, 4, 12, 0.0, index_bytes=4)  # rank 1 asks for round 0 before it is complete: held
    for rank, rows in ((0, [1, 5]), (1, [5, 6])):
        values = torch.zeros(8)
        values[rows] = 1.0
        server._push(rank, 3, 4, 12, values, sparse=True)
    server._pull(0, 3, 4, 12, 0.0, index_bytes=4)
    assert [(dst, tag) for _, dst, tag in sent] == [(1, wire.REPLY_BASE + 3), (0, wire.REPLY_BASE + 3)]
    expected = initial.clone()
    expected[[5, 9, 10]] -= torch.tensor([0.25, 0.5, 0.25])  # lr x the mean of the two pushes
    for reply, _, _ in sent:
        got = wire.read_pull_reply(reply)
        assert torch.equal(got.index, torch.tensor([1, 5, 6])) and got.held >= 0
        assert torch.equal(got.values, expected[[5, 9, 10]]) and got.nbytes == 24
        assert reply.numel() <= wire.pull_reply_floats(4, 12, 4)
    assert not server._rows  # both workers read round 0: its rows are dropped
    server._pull(0, 3, 4, 12, 0.0, index_bytes=4)  # round 1 was never pushed sparse: held, then dense
    server._push(0, 3, 4, 12, torch.ones(8))
    server._push(1, 3, 4, 12, torch.ones(8))
    got = wire.read_pull_reply(sent[-1][0])
    assert got.index is None and torch.equal(got.values, server.tensors.params[4:12]) and got.nbytes == 32


def test_sparse_frames_under_bf16_carry_2_byte_values() -> None:
    grads = torch.zeros(40)
    grads[[1, 7, 30]] = torch.tensor([0.5, -2.0, 3.0])
    message = wire.sparse_push(4, 100, 140, grads, 8, room=1000, wire=torch.bfloat16)
    assert message.numel() == wire.HEADER_FLOATS + 3 * 2 + 2 and wire.push_bytes(message) == 3 * (8 + 2)
    assert torch.equal(wire.sparse_values_of(message, 100, 140), grads)
    params = torch.linspace(0, 1, 20)
    reply = wire.pull_reply(0, 4, 12, 0.0, 4, params, torch.tensor([1, 5, 6]), torch.bfloat16)
    got = wire.read_pull_reply(reply)
    assert got.nbytes == 3 * (4 + 2) and got.wire == torch.bfloat16
    assert torch.equal(got.values, params[[5, 9, 10]].to(torch.bfloat16).float())


# ----------------------------------------------------------------------------- on gloo
@pytest.mark.slow
def test_sparse_policies_on_gloo_end_with_numerics_modes_parameters(tmp_path: Path) -> None:
    """Acceptance: configs/real_zen_deepfm.yaml (DeepFM, top-k 5%) on 4 gloo workers + 2 shards: zen
    (hashed and contiguous owners), sparse_allgather, sparse_ps, sparcml and omnireduce end with the
    parameters numerics mode computes, and their ops moved fewer bytes than ring's dense all-reduce."""
    out = tmp_path / "out"
    outcome = launch(CONFIG, out, nproc=4, timeout_s=60)
    assert outcome.ok, outcome.failed
    assert outcome.codes == {r: 0 for r in range(6)}

    sim = simulate(CONFIG)
    real = np.load(out / "parameters.npz")
    labels = ["ring", "zen", "zen_contiguous", "sparse_allgather", "sparse_ps", "sparcml", "omnireduce"]
    assert [run.label for run in sim.runs] == labels
    for run in sim.runs:
        assert run.parameters is not None and run.consensus is not None
        np.testing.assert_allclose(real[f"{run.label}/workers"], run.parameters, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(real[f"{run.label}/consensus"], run.consensus, rtol=1e-4, atol=1e-6)
    for label in ("zen", "zen_contiguous", "sparse_allgather", "sparcml", "omnireduce"):  # same sums, same order
        np.testing.assert_array_equal(real[f"{label}/workers"], sim.runs[1].parameters)
    np.testing.assert_allclose(real["sparse_ps/consensus"], real["ring/consensus"], rtol=1e-4, atol=1e-6)

    summary = pd.read_csv(out / "summary.csv").set_index("policy")
    assert (summary["status"] == "ok").all()
    sim_acc = sim.summary.set_index("policy")["final_accuracy"]
    np.testing.assert_allclose(summary["final_accuracy"], sim_acc[summary.index], atol=1e-6)

    ops = pd.read_csv(out / "ops.csv")
    sent = ops.groupby(["policy", "kind"])["nbytes"].sum()
    dense = sent[("ring", "AllReduce")]
    assert sent[("zen", "AllToAll")] + sent[("zen", "AllGather")] < dense / 2
    assert sent[("sparse_allgather", "AllGather")] < dense
    for label in ("sparcml", "omnireduce"):  # pairs and dense ranges; whole blocks
        assert sent[(label, "AllToAll")] + sent[(label, "AllGather")] < dense
    sparse = ops[(ops.policy == "zen") & (ops.kind == "AllToAll")]
    assert (sparse.wire_bytes > sparse["nbytes"]).all()  # every member's bytes, not the first's
    assert (sparse.imbalance >= 1).all() and np.isnan(ops[ops.policy == "ring"].wire_bytes).all()
    ps = ops.query("policy == 'sparse_ps'").groupby("kind")["nbytes"].sum()
    assert ps["push"] / 4 < dense / 2 and ps["pull"] / 4 < dense / 2  # per worker
