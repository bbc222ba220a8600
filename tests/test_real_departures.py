"""Workers leaving and joining on the real backend (`faults.departures`, policies.membership).

In-process: a Broadcast (real/broadcast.py) run through two ranks' executors, one thread each, over a
stand-in for torch.distributed's broadcast calls, leaves the joiner with the root's tensor over the op's
region and with exactly the root's optimizer state (names the joiner never had, int64 step counts), or
drops the joiner's state where the root has none, as `TensorStore.take_from` says; the group plan dry-runs
only live (rank, step) pairs; an away rank runs no hook, forward or row for the steps it misses and its
row starts once it is back (real/worker.py); it waits on the rendezvous store for the rank that hands it
over, or stops waiting when that rank is gone (real/departures.py); the results score only the ranks live
at each evaluated step, the global model from the first of them.

On gloo processes (slow: one launch of 3 workers): DiLoCo with outer momentum and Local SGD, rank 1 away
for steps 5..14 of 20, end on numerics mode's parameters and accuracy rows (`simulate`), and rank 1 has no
iteration rows for the steps it missed.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

torch = pytest.importorskip("torch")

from test_real_primitives import FakeReplica, N  # noqa: E402

from policies.ops import AllReduce, Broadcast, Combine, Group, OptimizerStep, Payload  # noqa: E402
from policies.tensors import Buffer, Optimizer  # noqa: E402
from real import broadcast as bc  # noqa: E402
from real import executor as ex  # noqa: E402
from real.buffers import RankTensors  # noqa: E402
from sim.engine.op_checks import OpValidator  # noqa: E402

PAIR = Group((0, 1))
SGD = Optimizer("sgd", lr=0.5, momentum=0.9)


class Wire:
    """torch.distributed's broadcast calls between threads of one process: a member's n-th call meets the
    root's n-th call, whose values (a tensor's, or an object list's) it copies."""

    def __init__(self) -> None:
        self.posted: dict[int, Any] = {}
        self.calls: dict[int, int] = defaultdict(int)
        self.cv = threading.Condition()

    def _meet(self, rank: int, src: int, value: Any) -> Any:
        with self.cv:
            n = self.calls[rank]
            self.calls[rank] += 1
            if rank == src:
                self.posted[n] = value
                self.cv.notify_all()
                return value
            assert self.cv.wait_for(lambda: n in self.posted, timeout=10), "the root never made this call"
            return self.posted[n]

    def broadcast(self, tensor: Any, src: int, group: Any, async_op: bool = False) -> Any:
        def run() -> None:
            sent = self._meet(group.rank, src, tensor.clone())
            if group.rank != src:
                tensor.copy_(sent)

        if not async_op:
            run()
            return None
        return SimpleNamespace(wait=lambda *args: run() or True)  # carried out when waited for

    def broadcast_object_list(self, box: list, src: int, group: Any, device: Any = None) -> None:
        box[:] = self._meet(group.rank, src, list(box))


class Member(FakeReplica):
    """A rank's replica: `data` picks the parameters or the gradient by payload, as `Replica.data` does."""

    def data(self, op: Any) -> Any:
        return self.params if op.payload is Payload.PARAMETERS else self.grads


def two_ranks(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    """Executors of ranks 0 and 1, each with an anchor buffer, whose broadcasts meet over one `Wire`."""
    wire = Wire()
    monkeypatch.setattr(bc, "dist", wire)
    ranks = []
    for rank in (0, 1):
        replica = Member()
        replica.rank = rank
        replica.params = torch.arange(N, dtype=torch.float32) * (10.0 if rank == 0 else -1.0)
        groups = SimpleNamespace(get=lambda group, rank=rank: SimpleNamespace(rank=rank))
        validator = OpValidator("test", 2, 0, buffers=["anchor"], buckets=4)
        executor = ex.RankExecutor(rank, "test", groups, replica, [], None, 10.0, validator)  # type: ignore[arg-type]
        executor.tensors = RankTensors(replica, [Buffer("anchor", initial="parameters")])  # type: ignore[arg-type]
        ranks.append(executor)
    return ranks[0], ranks[1]


def both(*programs: tuple[Any, list, Any]) -> None:
    """Run each executor's program (and its bucket) on a thread of its own, as two processes would."""
    errors: list[BaseException] = []

    def run(executor: Any, program: list, bucket: Any) -> None:
        try:
            executor.run(20, [(program, bucket)])
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=p) for p in programs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)


def test_a_joiner_takes_the_roots_anchor_and_momentum_and_restarts_from_the_anchor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, joiner = two_ranks(monkeypatch)
    store = root.tensors.store
    g1, g2 = torch.linspace(-1, 1, N), torch.linspace(2, 3, N)
    for g in (g1, g2):  # two outer steps: the root's momentum is 0.9 g1 + g2 (torch starts it at g1)
        store.tensor("gradients").copy_(g)
        store.apply(OptimizerStep("anchor", "gradients", SGD, state="outer"), [(0, N)])
    anchor = store.tensor("anchor").clone()
    assert joiner.tensors.store.states == {}  # it never stepped: it does not know the state's names
    hand_over = [
        Broadcast(PAIR, 4 * N, tensor="anchor", root=0),
        Broadcast(PAIR, 4 * N, state="outer", root=0),
    ]
    both((root, hand_over, None), (joiner, [*hand_over, Combine("parameters", ((1.0, "anchor"),))], None))
    mine = joiner.tensors.store
    assert torch.equal(mine.tensor("anchor"), anchor) and torch.equal(joiner.replica.params, anchor)
    assert set(mine.states) == {"outer"} and set(mine.states["outer"]) == {"momentum"}
    torch.testing.assert_close(mine.states["outer"]["momentum"], 0.9 * g1 + g2, rtol=0, atol=1e-6)
    assert mine.states["outer"]["momentum"] is not store.states["outer"]["momentum"]
    assert torch.equal(root.replica.params, torch.arange(N, dtype=torch.float32) * 10)  # the root keeps its own
    # the broadcasts are recorded with the bytes the op names, on both members, in one group's order
    assert [(r[3], r[4], r[5]) for r in joiner.collectives] == [(0, "Broadcast", 4 * N), (1, "Broadcast", 4 * N)]


def test_adamw_state_arrives_whole_with_its_int64_step_counts_over_the_ops_region_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, joiner = two_ranks(monkeypatch)
    store = root.tensors.store
    adamw = Optimizer("adamw", lr=0.1)
    store.tensor("gradients").fill_(1.0)
    for _ in range(3):
        store.apply(OptimizerStep("anchor", "gradients", adamw, state="outer"), [(0, N)])
    # a bucket's hook: the op acts on bucket 2's range (3..6) only
    op = Broadcast(PAIR, 12 * 3, state="outer", root=0)
    both((root, [op], 2), (joiner, [op], 2))
    state = joiner.tensors.store.states["outer"]
    assert set(state) == {"m", "v", "t"} and state["t"].dtype == torch.int64
    expected_t = torch.zeros(N, dtype=torch.int64)
    expected_t[3:6] = 3  # three steps there; zeros elsewhere, where the joiner had nothing
    assert torch.equal(state["t"], expected_t)
    m = torch.zeros(N)
    m[3:6] = 1 - 0.9**3  # m after three steps of gradient 1 from zero: (1 - beta1) (1 + beta1 + beta1^2)
    torch.testing.assert_close(state["m"], m, rtol=0, atol=1e-6)


def test_a_joiner_drops_its_state_where_the_root_has_none_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    root, joiner = two_ranks(monkeypatch)
    joiner.tensors.store.tensor("gradients").fill_(1.0)
    joiner.tensors.apply(OptimizerStep("anchor", "gradients", SGD, state="outer"), None)  # stale momentum
    assert joiner.tensors.store.states
    op = Broadcast(PAIR, 4 * N, state="outer", root=0)
    both((root, [op], None), (joiner, [op], None))
    assert "outer" not in joiner.tensors.store.states and root.tensors.store.states == {}


def test_a_parameter_broadcast_copies_the_roots_parameters_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    root, joiner = two_ranks(monkeypatch)
    params = joiner.replica.params
    op = Broadcast(PAIR, 4 * N, payload=Payload.PARAMETERS, root=0)
    both((root, [op], None), (joiner, [op], None))
    assert joiner.replica.params is params and torch.equal(params, torch.arange(N, dtype=torch.float32) * 10)


def bound(policy: dict[str, Any], departures: list[dict[str, Any]], iterations: int = 20) -> tuple[Any, Any]:
    from policies.base import Bucket
    from sim.api import prepare
    from sim.config import parse_config
    from sim.engine.faults import absences_of
    from sim.engine.run import bind_policy

    data = {
        "name": "departures",
        "iterations": iterations,
        "cluster": {"topology": "star", "hosts": 4, "nic_gbps": 10},
        "workload": {"model": "synthetic", "gradient_mb": 1.0, "compute_ms": 1.0, "bucket_mb": 2.0},
        "policies": [policy],
        "faults": {"departures": departures},
    }
    config = parse_config(data)
    cluster, plan = prepare(config)
    policy = bind_policy(config.policies[0], 0, cluster, plan, "fp32", absences_of(config, cluster))
    return policy, [Bucket(b, x.nbytes, len(plan.buckets)) for b, x in enumerate(plan.buckets)]


def test_the_group_plan_dry_runs_only_the_ranks_live_at_each_step() -> None:
    from real.groups import planned_groups

    policy, buckets = bound({"name": "local_sgd", "period": 2}, [{"ranks": [3], "leave_step": 2, "join_step": 4}], 6)
    # a pair per (rank, step) that runs the hook: rank 3 runs none at steps 2 and 3
    policy.end_step = lambda rank, step: iter([AllReduce(Group((rank, 10 * step + 4)), 4.0)])
    policy.begin_step = lambda rank, step: iter(())
    groups = {g.ranks for g in planned_groups(policy, 4, 6, buckets)}
    expected = {(r, 10 * s + 4) for r in range(4) for s in range(6) if not (r == 3 and s in (2, 3))}
    assert groups == {tuple(sorted(g)) for g in expected}


def test_diloco_plans_the_live_ranks_group_and_the_hand_over_group() -> None:
    from real.groups import planned_groups

    diloco = {"name": "diloco", "period": 5, "outer_momentum": 0.9}
    policy, buckets = bound(diloco, [{"ranks": [1], "leave_step": 5, "join_step": 15}])
    # outer steps after 4 and 19 over everyone, after 9 and 14 over ranks 0, 2, 3; rank 0 hands rank 1 over at 15
    assert planned_groups(policy, 4, 20, buckets) == [Group((0, 1, 2, 3)), Group((0, 2, 3)), Group((0, 1))]


def test_an_away_rank_resumes_where_it_comes_back_or_ends_its_phase() -> None:
    from real.departures import resume_at

    policy, _ = bound(
        {"name": "local_sgd", "period": 5},
        [{"ranks": [1], "leave_step": 5, "join_step": 15}, {"ranks": [2], "leave_step": 10}],
    )
    assert [resume_at(policy, 1, s, 20) for s in (4, 5, 9, 15)] == [4, 15, 15, 15]
    assert resume_at(policy, 1, 5, 12) == 12  # back only after the phase's end
    assert [resume_at(policy, 2, s, 20) for s in (9, 10, 19)] == [9, 20, 20]  # never back
    assert [resume_at(policy, 0, s, 20) for s in (0, 5, 19)] == [0, 5, 19]


def departures(policy: Any, rank: int, store: Any, end: int = 20) -> Any:
    from real.departures import Departures, Rendezvous

    return Departures(policy.bound_view.membership, rank, end, Rendezvous("diloco/0", lambda: store, period=0.05))


def test_a_rank_back_from_away_waits_until_the_rank_handing_it_over_opens_the_step() -> None:
    store = torch.distributed.HashStore()
    policy, _ = bound({"name": "local_sgd", "period": 5}, [{"ranks": [1], "leave_step": 5, "join_step": 15}])
    joiner, source, other = departures(policy, 1, store), departures(policy, 0, store), departures(policy, 2, store)
    opened, returned = threading.Event(), []
    thread = threading.Thread(target=lambda: returned.append((joiner.next_step(policy, 5), opened.is_set())))
    thread.start()
    assert other.next_step(policy, 15) == 15 and thread.is_alive()  # rank 2 opens nothing: it hands nobody over
    assert [source.next_step(policy, s) for s in (5, 14)] == [5, 14] and thread.is_alive()
    opened.set()
    assert source.next_step(policy, 15) == 15  # rank 0 starts step 15: it hands rank 1 over
    thread.join(10)
    assert returned == [(15, True)]


def test_a_rank_away_to_the_end_waits_for_the_first_rank_live_at_the_last_step_to_end() -> None:
    store = torch.distributed.HashStore()
    policy, _ = bound({"name": "local_sgd", "period": 5}, [{"ranks": [0], "leave_step": 10}])
    gone, first = departures(policy, 0, store), departures(policy, 1, store)
    returned: list[int] = []
    thread = threading.Thread(target=lambda: returned.append(gone.next_step(policy, 10)))
    thread.start()
    departures(policy, 2, store).finish()  # not the first live rank: opens nothing
    thread.join(0.2)
    assert thread.is_alive()
    first.finish()
    thread.join(10)
    assert returned == [20]


@pytest.mark.parametrize(
    "stamp, why", [("state", "rank 0 stopped (failed)"), ("alive", "rank 0 silent for")], ids=["failed", "silent"]
)
def test_a_rank_back_from_away_stops_waiting_when_the_rank_to_hand_it_over_is_gone(stamp: str, why: str) -> None:
    import time

    from real.departures import PeerGone
    from real.liveness import PREFIX, STATE

    store = torch.distributed.HashStore()
    if stamp == "state":
        store.set(STATE + "0", "failed")
    else:  # its last heartbeat a minute ago
        store.set(PREFIX + "0", repr(time.time() - 60))
    policy, _ = bound({"name": "local_sgd", "period": 5}, [{"ranks": [1], "leave_step": 5, "join_step": 15}])
    with pytest.raises(PeerGone, match=re.escape(f"back at step 15, waiting for rank 0 to start it: {why}")):
        departures(policy, 1, store).next_step(policy, 5)
    store.set("syncsim/departures/diloco/0/15", "open")  # lets the thread that waited for the key end


class Opened:
    """A rendezvous whose waits take 1000 s of a fake clock (`now`) and whose opens are listed."""

    def __init__(self, now: list[float]) -> None:
        self.now, self.opened = now, []

    def wait(self, step: int, opener: int) -> None:
        self.now[0] += 1000.0

    def open(self, step: int) -> None:
        self.opened.append(step)


def trained(monkeypatch: pytest.MonkeyPatch, rank: int, departures: list[dict[str, Any]]) -> tuple[Any, Any, Any]:
    """`real.worker.train` of `rank` through 20 steps of local_sgd with `departures`, on a stand-in executor and
    replica that list the steps their hooks, forwards and optimizer steps ran at; time is a counter."""
    from real import worker
    from real.accounting import RankReport
    from real.departures import Departures

    policy, _ = bound({"name": "local_sgd", "period": 5}, departures)
    now = [0.0]

    def tick() -> float:
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(worker.time, "perf_counter", tick)
    ran: dict[str, list[int]] = defaultdict(list)
    replica = SimpleNamespace(
        task=None, params=torch.zeros(1), losses=[], forward_done=ran["forward"].append, step_done=lambda: None
    )
    executor = SimpleNamespace(
        replica=replica, blocked=[], timeout_s=1.0, tensors=None, drain=lambda: None,
        run=lambda step, programs, chained=False: ran["hooks"].append(step),
    )  # fmt: skip
    rendezvous = Opened(now)
    away = Departures(policy.bound_view.membership, rank, 20, rendezvous)  # type: ignore[arg-type]
    setup = worker.WorkerSetup(rank, policy, executor, [], 20, [], None, 0.0, departures=away)  # type: ignore[arg-type]
    report = RankReport(rank)
    steps = worker.train(setup, report)
    assert steps == 20
    return report, ran, rendezvous


def test_an_away_rank_runs_nothing_of_the_steps_it_misses_and_its_row_starts_once_it_is_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    back = [{"ranks": [1], "leave_step": 5, "join_step": 15}]
    report, ran, rendezvous = trained(monkeypatch, 1, back)
    expected = [*range(5), *range(15, 20)]
    assert [row[0] for row in report.rows] == expected and ran["forward"] == expected
    assert sorted(set(ran["hooks"])) == expected  # begin_step, on_forward, on_gradients, end_step: none away
    start_15 = next(row[2] for row in report.rows if row[0] == 15)
    assert start_15 > 1000.0  # after the wait (the fake clock jumped 1000), not from the end of step 4
    assert rendezvous.opened == []  # rank 1 hands nobody over
    report, _, rendezvous = trained(monkeypatch, 0, back)
    assert len(report.rows) == 20 and rendezvous.opened == [15]  # rank 0 opens the step rank 1 comes back at
    # away from step 10 to the end: ten rows, and the first rank live at the last step lets it go
    gone = [{"ranks": [2], "leave_step": 10}]
    report, ran, _ = trained(monkeypatch, 2, gone)
    assert [row[0] for row in report.rows] == list(range(10)) and ran["forward"] == list(range(10))
    assert trained(monkeypatch, 0, gone)[2].opened == [20]


class Scores:
    """A held-out 'evaluation' that identifies the model: its first element as loss and accuracy."""

    initial = torch.zeros(2)

    def evaluate(self, flat: Any) -> tuple[float, float]:
        return float(flat[0]), float(flat[0])


def test_evaluation_scores_the_live_ranks_only_and_the_global_model_of_the_first_of_them() -> None:
    from policies.membership import Absence, Membership
    from real.accounting import RankReport
    from real.results import assemble

    # 3 workers, 6 steps, snapshots after steps 1 and 3; rank 0 away at steps 2 and 3
    membership = Membership(3, (Absence((0,), 2, 4),))
    reports = []
    for rank in range(3):
        report = RankReport(rank)
        steps = [s for s in range(6) if membership.is_live(rank, s)]
        report.rows = [(s, rank, s, s, s, s + 0.5, s + 1.0, 0.5, 0.0, 0) for s in steps]
        report.losses = [100.0 * rank + s for s in steps]
        report.snapshots = [
            (
                k,
                float(k),
                torch.tensor([10.0 * k + rank, 0.0]),
                steps.index(k - 1) + 1,
                torch.tensor([1000.0 + rank, 0]),
            )
            for k in (2, 4)
            if k - 1 in steps
        ]
        report.parameters = torch.tensor([60.0 + rank, 0.0])
        report.global_tensor, report.global_model = "anchor", torch.tensor([2000.0 + rank, 0.0])
        reports.append(report)
    entry = SimpleNamespace(display="diloco", name="diloco")
    run = assemble(entry, Scores(), reports, 1.0, True, membership)  # type: ignore[arg-type]
    rows = {(r[0], r[2]): r for r in run.accuracy}
    assert sorted(rows) == sorted(
        [(0.0, w) for w in (-1, 0, 1, 2)] + [(2.0, w) for w in (-1, 0, 1, 2)] + [(4.0, w) for w in (-1, 1, 2)]
        + [(6.0, w) for w in (-1, 0, 1, 2)]
    )  # fmt: skip
    assert rows[(2.0, -1)][4] == 1000.0 and rows[(4.0, -1)][4] == 1001.0  # the first live rank's global model
    assert rows[(6.0, -1)][4] == 2000.0 and run.consensus[0] == 2000.0
    assert [rows[(4.0, w)][4] for w in (1, 2)] == [41.0, 42.0]
    # train loss: each row's live ranks' losses since their previous row; rank 0's steps 4, 5 in the last
    assert rows[(4.0, -1)][3] == pytest.approx(np.mean([102, 103, 202, 203]))
    assert rows[(6.0, 0)][3] == pytest.approx(4.5) and rows[(6.0, -1)][3] == pytest.approx(
        np.mean([4, 5, 104, 105, 204, 205])
    )


DEPARTED = 1  # the rank that leaves at step 5 and comes back at step 15 of 20
POLICIES = [
    {"name": "diloco", "period": 5, "outer_lr": 0.7, "outer_momentum": 0.9},
    {"name": "local_sgd", "period": 5},
]


@pytest.mark.slow
def test_diloco_and_local_sgd_with_a_rank_away_end_on_numerics_modes_parameters(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    from test_real_backend import write_config

    from real.launch import launch
    from sim.api import simulate

    departures = [{"ranks": [DEPARTED], "leave_step": 5, "join_step": 15}]
    path = write_config(tmp_path, POLICIES, iterations=20, faults={"departures": departures})
    data = yaml.safe_load(path.read_text())
    data["workload"]["bucket_mb"] = 0.25  # 4 buckets
    data["numerics"]["global_batch"] = 60  # 20 a worker
    data["cluster"] = {"topology": "star", "hosts": 1, "gpus_per_host": 3, "nic_gbps": 0.2}
    path.write_text(yaml.safe_dump(data))
    outcome = launch(path, tmp_path / "out", nproc=3, timeout_s=60)
    assert outcome.ok, outcome.failed
    real = np.load(tmp_path / "out" / "parameters.npz")
    accuracy = pd.read_csv(tmp_path / "out" / "accuracy.csv")
    iterations = pd.read_csv(tmp_path / "out" / "iterations.csv")
    for run in simulate(path).runs:
        label = run.label
        np.testing.assert_allclose(real[f"{label}/workers"], run.parameters, rtol=1e-5, atol=1e-6, err_msg=label)
        np.testing.assert_allclose(real[f"{label}/consensus"], run.consensus, rtol=1e-5, atol=1e-6, err_msg=label)
        rows = accuracy[accuracy["policy"] == label]
        assert list(zip(rows["iteration"], rows["worker"])) == [(float(r[0]), r[2]) for r in run.accuracy]
        np.testing.assert_allclose(rows["loss"], [r[4] for r in run.accuracy], rtol=1e-4, err_msg=label)
        away = iterations[(iterations["policy"] == label) & (iterations["rank"] == DEPARTED)]
        assert sorted(away["iteration"]) == [*range(5), *range(15, 20)], label
        assert len(iterations[iterations["policy"] == label]) == 3 * 20 - 10
