"""Ops that span steps and local ops on the simulator (sim/engine/launches.py, sim/engine/executor.py): a
launched collective overlaps compute until its Wait, a launch waited for at once costs what the blocking
collective does, local ops add their memory-bound time, and the engine refuses handles and buffers a
policy misuses. Closed forms on the ideal network (tests/test_local_sgd.py's ring)."""

from __future__ import annotations

import re
from typing import Any, Optional

import pandas as pd
import pytest
from helpers import star, synthetic
from test_local_sgd import ALPHA, ring_allreduce

import policies.registry as registry
from policies.base import Bucket, Policy
from policies.ops import AllReduce, Combine, Group, Payload, Program, Wait
from policies.tensors import Buffer
from policies.view import ClusterView, ModelInfo
from sim.api import simulate
from sim.catalog.gpus import get_gpu
from sim.config import parse_config

MB, GBPS = 1e6, 25e9 / 8
C = 0.05  # compute per step, s


def memory_bandwidth(config: dict[str, Any]) -> float:
    """Bytes/s of the config's GPU (the catalog's figure)."""
    return get_gpu(parse_config(config).cluster.gpu).memory_bandwidth_gbs * 1e9


def per_step(result: Any) -> dict[int, float]:
    """Iteration time per step (the slowest worker's)."""
    return result.iterations.groupby("iteration")["iteration_s"].max().to_dict()


@pytest.mark.parametrize("overlap", [1, 0])
def test_streaming_diloco_hides_the_fragment_all_reduce_behind_tau_steps(overlap: int) -> None:
    """4 buckets of 25 MB, P = 2 fragments of 50 MB, H = 4: fragment 1 sends after local steps 1 and 5,
    fragment 0 after 3 and 7. A sending step first forms anchor - parameters (a Combine of two terms: 3
    passes over the fragment's fp32 values); the step that waits steps the anchor (sgd with momentum: 5
    passes) and mixes the parameters (3 passes). The ring of 50 MB (24 ms) is shorter than a step's 50 ms of
    compute: with tau = 1 no step shows it; with tau = 0 the sending step blocks for all of it, then steps
    the anchor and copies it to the parameters (no mixing without overlap: 2 passes)."""
    policy = {"name": "streaming_diloco", "period": 4, "fragments": 2, "overlap_steps": overlap}
    config = synthetic(star(4), [policy], 100, compute_ms=C * 1e3, iterations=8, bucket_mb=25, layers=4)
    result = simulate(config)
    assert not result.errors
    u = 4 * (50 * MB / 4) / memory_bandwidth(config)  # one fp32 pass over a fragment
    ring = ring_allreduce(4, 50 * MB, ALPHA, GBPS)
    assert ring < C  # the premise: one step of compute covers it
    sends = {1, 3, 5, 7}
    if overlap:
        waits = {s + overlap for s in sends if s + overlap < 8}  # step 7's send is never waited for
        expected = {s: C + 3 * u * (s in sends) + 8 * u * (s in waits) for s in range(8)}
    else:
        expected = {s: C + (3 * u + ring + 7 * u) * (s in sends) for s in range(8)}
    assert per_step(result) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert (result.iterations["wait_s"] == 0).all()
    ops = result.ops
    finished = 3 if overlap else 4  # tau = 1: step 7's is still running when the workers end
    assert list(ops["kind"]) == ["AllReduce"] * finished and list(ops["nbytes"]) == [50 * MB] * finished
    assert (ops["finished_s"] - ops["launched_s"]).tolist() == pytest.approx([ring] * finished, rel=1e-9)
    assert (ops["wire"] == "").all()


@pytest.mark.parametrize("warmup", [0, 2])
def test_diloco_outer_step_costs_local_sgds_average_plus_its_local_ops(warmup: int) -> None:
    """DiLoCo's outer step is local_sgd's all-reduce of the model plus three passes of anchor - parameters,
    five of the outer sgd with momentum and two of parameters = anchor, over the model's 25e6 fp32
    values; each warm-up step copies parameters to the anchor (2 passes); other steps cost the same."""
    policies = [{"name": "local_sgd", "period": 3, "warmup_steps": warmup}, {"name": "diloco", "period": 3,
                "warmup_steps": warmup}]  # fmt: skip
    config = synthetic(star(4), policies, 100, compute_ms=C * 1e3, iterations=7)
    result = simulate(config)
    assert not result.errors
    u = 4 * (100 * MB / 4) / memory_bandwidth(config)  # one fp32 pass over the model
    rows = result.iterations.groupby(["policy", "iteration"])["iteration_s"].max()
    local, diloco = rows["local_sgd"].to_dict(), rows["diloco"].to_dict()
    outer = {s for s in range(warmup, 7) if (s - warmup + 1) % 3 == 0}
    extra = {s: 10 * u * (s in outer) + 2 * u * (s < warmup) for s in range(7)}
    assert diloco == pytest.approx({s: local[s] + extra[s] for s in range(7)}, rel=1e-9, abs=1e-12)
    assert max(extra.values()) > 0
    compute = result.iterations.groupby(["policy", "iteration"])["compute_s"].max()
    assert (compute["diloco"] - compute["local_sgd"]).to_dict() == pytest.approx(extra, rel=1e-9, abs=1e-12)


WORLD = Group.of(range(4))


def all_reduce(handle: Optional[str]) -> AllReduce:
    return AllReduce(WORLD, 10 * MB, payload=Payload.PARAMETERS, handle=handle)


class _Scripted(Policy):
    """A test policy on 4 ranks: its end_step program at each step is `script[step]` (nothing if absent)."""

    name = "scripted"
    script: dict[int, list[Any]] = {}
    declared: tuple[Buffer, ...] = ()

    def buffers(self) -> tuple[Buffer, ...]:
        return self.declared

    def end_step(self, rank: int, step: int) -> Program:
        yield from self.script.get(step, [])


def run_scripted(
    monkeypatch: pytest.MonkeyPatch, script: dict[int, list[Any]], declared: tuple[Buffer, ...] = (), slow: bool = False
) -> Any:
    """3 steps of the scripted policy (10 MB model, 50 ms compute); `slow`: rank 1 computes twice as slowly."""
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    registry.register("scripted", type("Scripted", (_Scripted,), {"script": script, "declared": declared}))
    config = synthetic(star(4), [{"name": "scripted"}], 10, compute_ms=C * 1e3, iterations=3)
    if slow:
        config["faults"] = {"slow_workers": [{"ranks": [1], "compute_factor": 2.0}]}
    return simulate(config)


def test_a_launch_waited_for_at_once_costs_what_the_blocking_collective_costs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 computes twice as slowly: after step 1 the others wait 2c for it at the collective, then the
    ring runs. The
    same rows (blocked time, communication) whether they block in the collective or launch it and block in
    its Wait."""
    blocking = run_scripted(monkeypatch, {1: [all_reduce(None)]}, slow=True)
    launched = run_scripted(monkeypatch, {1: [all_reduce("h"), Wait("h")]}, slow=True)
    assert not blocking.errors and not launched.errors
    cols = ["iteration", "rank", "iteration_s", "compute_s", "wait_s", "comm_s"]
    pd.testing.assert_frame_equal(blocking.iterations[cols], launched.iterations[cols], rtol=1e-12, atol=1e-15)
    ring = ring_allreduce(4, 10 * MB, ALPHA, GBPS)
    step1 = launched.iterations.set_index(["iteration", "rank"])
    assert step1.loc[(1, 0), "wait_s"] == pytest.approx(2 * C, rel=1e-9)  # rank 1 ends step 1 at 4c, rank 0 at 2c
    assert step1.loc[(1, 0), "comm_s"] == pytest.approx(ring, rel=1e-9)


def test_a_wait_blocks_on_late_members_as_a_collective_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 computes 2c a step. Every rank launches after step 1 and waits after step 2: rank 0 reaches its
    Wait at 3c, rank 1 launches at 4c, then the ring runs. Rank 0's step 2 is c of compute, c blocked on
    rank 1 and the ring; its step 1 did not wait for the launch."""
    result = run_scripted(monkeypatch, {1: [all_reduce("h")], 2: [Wait("h")]}, slow=True)
    assert not result.errors
    ring = ring_allreduce(4, 10 * MB, ALPHA, GBPS)
    rows = result.iterations.set_index(["iteration", "rank"])
    assert rows.loc[(2, 0), "wait_s"] == pytest.approx(C, rel=1e-9)
    assert rows.loc[(2, 0), "comm_s"] == pytest.approx(ring, rel=1e-9)
    assert rows.loc[(2, 0), "iteration_s"] == pytest.approx(C + C + ring, rel=1e-9)
    assert rows.loc[(1, 0), "wait_s"] == 0 and rows.loc[(1, 0), "iteration_s"] == pytest.approx(C)


class _Overlapped(Policy):
    """Launches each step's one gradient bucket from a program it hands out again every other step (the
    same tuple object: the executor's remembered-program path) and waits for it at the end of the next
    step: the all-reduce overlaps a step of compute."""

    name = "overlapped"

    def bind(self, view: ClusterView, model: ModelInfo) -> None:
        super().bind(view, model)
        world = Group.of(range(view.world_size))
        nbytes = model.bucket_bytes[0]
        self.programs = [(AllReduce(world, nbytes, handle=f"g{i}"),) for i in range(2)]

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        return self.programs[step % 2]

    def end_step(self, rank: int, step: int) -> Program:
        if step:
            yield Wait(f"g{(step - 1) % 2}")


def test_a_launch_in_a_remembered_program_still_overlaps(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step's 40 MB all-reduce (19 ms) runs under the next step's 50 ms of compute: every step takes
    its compute alone, and the last launch, never waited for, does not hold up the end of the run."""
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    registry.register("overlapped", _Overlapped)
    config = synthetic(star(4), [{"name": "overlapped"}], 40, compute_ms=C * 1e3, iterations=5)
    result = simulate(config)
    assert not result.errors
    assert ring_allreduce(4, 40 * MB, ALPHA, GBPS) < C
    assert per_step(result) == pytest.approx({s: C for s in range(5)}, rel=1e-12)
    assert len(result.ops) == 4  # the fifth is still running when the workers end


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ({1: [Wait("nope")]}, r"Wait\(handle='nope'\) on rank \d at step 1: no collective launched with handle 'nope'"),
        ({0: [all_reduce("h")], 2: [all_reduce("h")]}, r"at step 2: handle 'h' is still pending; Wait\('h'\) before"),
        ({0: [all_reduce("h"), Wait("h"), Wait("h")]}, r"at step 0: no collective launched with handle 'h'.*already"),
    ],
)
def test_misused_handles_are_refused(monkeypatch: pytest.MonkeyPatch, script: dict[int, list[Any]], why: str) -> None:
    result = run_scripted(monkeypatch, script)
    assert list(result.errors) == ["scripted"]
    assert result.errors["scripted"].startswith("PolicyError: policy 'scripted' yielded")
    assert re.search(why, result.errors["scripted"])


def test_a_buffer_the_policy_did_not_declare_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    copy = Combine("anchor", ((1.0, "parameters"),))
    ok = run_scripted(monkeypatch, {1: [copy]}, declared=(Buffer("anchor"),))
    assert not ok.errors
    refused = run_scripted(monkeypatch, {1: [copy]})
    assert re.search(
        r"on rank \d at step 1: no buffer 'anchor'; buffers: gradients, parameters", refused.errors["scripted"]
    )


def test_numerics_hears_of_local_ops_and_launched_collectives_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stand-in for numerics mode's replicas (sim/numerics/replicas.py) records what the engine tells
    it: per rank, streaming DiLoCo's Combine when issued, the launched all-reduce's arrival, and after the
    collective has completed (told once for all ranks) the outer step and the mixing at the Wait's step."""
    import sim.engine.run as run_module

    calls: list[tuple[float, str, int, str]] = []
    executor = run_module.Executor

    class Fake:
        def __init__(self, env: Any) -> None:
            self.env = env

        def arrive(self, rank: int, op: Any, bucket: Any) -> None:
            calls.append((self.env.now, "arrive", rank, type(op).__name__))

        def local(self, rank: int, op: Any, bucket: Any) -> None:
            calls.append((self.env.now, "local", rank, type(op).__name__))

        def collective_done(self, op: Any, contexts: Any) -> None:
            calls.append((self.env.now, "done", -1, type(op).__name__))

    def with_fake(env: Any, *args: Any) -> Any:
        fake, comms = Fake(env), args[4]
        comms.on_complete, comms._keep_contexts = fake.collective_done, True
        return executor(env, *args[:10], fake, *args[11:])

    monkeypatch.setattr(run_module, "Executor", with_fake)
    policy = {"name": "streaming_diloco", "period": 4, "fragments": 2, "overlap_steps": 1}
    config = synthetic(star(4), [policy], 100, compute_ms=C * 1e3, iterations=3, bucket_mb=25, layers=4)
    assert not simulate(config).errors
    # fragment 1 sends after step 1 and is waited for after step 2
    for rank in range(4):
        mine = [(kind, name) for _, kind, r, name in calls if r in (rank, -1)]
        assert mine == [("local", "Combine"), ("arrive", "AllReduce"), ("done", "AllReduce"),
                        ("local", "OptimizerStep"), ("local", "Combine")], rank  # fmt: skip
    times = [t for t, *_ in calls]
    assert times == sorted(times) and times[0] == pytest.approx(2 * C)


class _CopiesEachBucket(Policy):
    """Copies each gradient bucket's parameters into a buffer as the bucket is ready (a local op beside
    the rest of backward)."""

    name = "copies_each_bucket"

    def buffers(self) -> tuple[Buffer, ...]:
        return (Buffer("copy"),)

    def on_gradients(self, rank: int, step: int, bucket: Bucket) -> Program:
        yield Combine("copy", ((1.0, "parameters"),))


def test_a_local_op_beside_backward_counts_once_as_compute(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two buckets of 50 MB: the first one's copy (2 passes, 0.1 ms) runs while backward computes the
    second bucket (milliseconds), so only the last bucket's copy lengthens the step, and compute counts the
    overlapped time once: c + d, not c + 2d."""
    monkeypatch.setattr(registry, "_REGISTERED", dict(registry._REGISTERED))
    registry.register("copies_each_bucket", _CopiesEachBucket)
    config = synthetic(star(2), [{"name": "copies_each_bucket"}], 100, compute_ms=C * 1e3, iterations=2,
                       bucket_mb=50, layers=2)  # fmt: skip
    result = simulate(config)
    assert not result.errors
    d = 2 * 4 * (50 * MB / 4) / memory_bandwidth(config)
    assert result.iterations["iteration_s"].tolist() == pytest.approx([C + d] * 4, rel=1e-9)
    assert result.iterations["compute_s"].tolist() == pytest.approx([C + d] * 4, rel=1e-9)
